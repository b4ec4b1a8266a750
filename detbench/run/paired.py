"""The paired phase: every replicate's modes timed side by side, after every verdict (issue 34).

A cost measured as the ratio of two medians taken in two workers minutes apart carries whatever
changed in between: the GPU's clock and power state, the host's load. So, once the verdict
workers have fingerprinted every (mode, replicate), the costs are timed per replicate by a
**group** of fresh timing workers alive together: one per mode, and a second worker of the
baseline's settings (``copy`` 1: the A/A check, a mode against itself, whose interval must hold
1). For each workload:

1. each worker builds it and warms up, one worker at a time (``prepare``); a worker that cannot
   (a setting this workload does not support, an error) sits out this workload;
2. ``rounds`` rounds (fewer for a long step: ``rounds_for``): in each, the workers take turns
   in an order shuffled anew (a generator seeded from the run's seed, the workload, the
   replicate and the round), each timing one block of about ``block_seconds`` while the others
   wait on their stdin, so no two blocks overlap;
3. each worker summarises its samples (``finish``) and frees the workload; the group's lines go
   to ``paired.jsonl`` at once, all of them together, so a run stopped in the middle of a
   workload keeps none of its half-measured group and a ``--resume`` times it again.

The workers are the runner's workers (``supervise.WorkerProcess``), started as they are, with a
job of kind ``PAIR_KIND`` (``detbench.run.child.pair``); every worker of the group starts at once
(their imports and CUDA initialisation overlap each other, not a timing).
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from detbench.core.modes import DEFAULT_MODE, Mode
from detbench.core.workload import Workload
from detbench.run.config import RunConfig
from detbench.run.paired_cost import PairedPlan
from detbench.run.schedule import clock
from detbench.run.supervise import TIMEOUT, Crew, WorkerProcess, log_tail
from detbench.store.paired import PairedWriter, iter_paired
from detbench.store.results import iter_records, utc_now

#: The job's kind for a timing worker of the paired phase.
PAIR_KIND = "detbench.run.child:pair"
#: The fewest rounds of a group: 6 samples are the fewest with a 95% interval of their median.
MIN_ROUNDS = 6


def baseline_of(modes: Iterable[Mode]) -> Mode:
    """The mode every cost is relative to: torch's default where the run has it, else its first
    mode (as ``analysis.labels.baseline_mode`` reads the records)."""
    modes = list(modes)
    return next((m for m in modes if m.name == DEFAULT_MODE.name), modes[0])


def round_order(seed: int, key: str, replicate: int, index: int, n: int) -> list[int]:
    """The order in which ``n`` workers take their turns in round ``index``: a permutation drawn
    from a generator of its own, seeded from SHA-256 of the run's seed and the round's name, so
    the same run plans the same rounds on every host and a resumed run repeats them."""
    name = f"{seed}|{key}|{replicate}|{index}"
    rng = random.Random(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big"))
    order = list(range(n))
    rng.shuffle(order)
    return order


@dataclass
class Member:
    """One worker of a group: its mode, its copy (1: the A/A second worker), its process, and
    what it measured of the workload in hand."""

    mode: Mode
    copy: int
    worker: WorkerProcess | None = None
    prepared: dict[str, Any] | None = None
    samples: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    failure: tuple[str, str] | None = None  # (status, message) of the workload in hand

    @property
    def label(self) -> str:
        return self.mode.name + (" (A/A copy)" if self.copy else "")

    def reset(self) -> None:
        self.prepared, self.failure = None, None
        self.samples, self.rounds, self.positions, self.starts = [], [], [], []


@dataclass
class PairedStats:
    """Where the paired phase's time went (seconds), for env.json's ``run_stats``."""

    groups: int = 0
    workers: int = 0
    startup: float = 0.0
    prepare: float = 0.0
    rounds: float = 0.0
    finish: float = 0.0
    wall: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class PairedPhase:
    """The paired phase of one run (see the module docstring). ``job_for``: the runner's job for
    a worker of (mode, replicate), ``env_for`` its environment; ``keys``: the workloads to time,
    in the plan's order; ``crew``: the run's workers (its halt ends the phase)."""

    @classmethod
    def of(
        cls,
        c: RunConfig,
        workloads: list[Workload],
        job_for: Callable[[Mode, int, str, list[str]], dict[str, Any]],
        env_for: Callable[[Mode, str], dict[str, str]],
        crew: Crew,
        stream: TextIO,
    ) -> PairedPhase:
        """The paired phase of the run ``c`` of ``workloads`` (the distributed ones are timed in
        their torchrun launch), on its first device; ``job_for(mode, replicate, device, keys)``
        and ``env_for(mode, device)``: the runner's job and environment of a worker."""
        keys = [w.key for w in workloads if not w.distributed]
        lane = c.device_names[0]
        return cls(
            c.out,
            c.modes,
            c.replicates,
            keys,
            job_for=lambda mode, replicate: job_for(mode, replicate, lane, keys),
            env_for=lambda mode: env_for(mode, lane),
            python=c.python,
            crew=crew,
            settings={
                "rounds": c.setting("rounds"),
                "budget": c.setting("budget"),
                "seed": c.seed,
                "startup_timeout": c.startup_timeout,
                "timeout": c.timeout,
            },
            stream=stream,
        )

    def __init__(
        self,
        out: Path,
        modes: list[Mode],
        replicates: int,
        keys: list[str],
        job_for: Callable[[Mode, int], dict[str, Any]],
        env_for: Callable[[Mode], dict[str, str]],
        python: str,
        crew: Crew,
        settings: Mapping[str, Any],
        stream: TextIO,
    ) -> None:
        self.out = out
        self.modes = modes
        self.replicates = replicates
        self.keys = keys
        self.job_for = job_for
        self.env_for = env_for
        self.python = python
        self.crew = crew
        self.rounds = int(settings["rounds"])
        self.budget = float(settings["budget"])
        self.seed = int(settings["seed"])
        self.startup_timeout = float(settings["startup_timeout"])
        self.timeout = settings.get("timeout")
        self.stream = stream
        self.stats = PairedStats()
        base = baseline_of(modes)
        self.members_of = [(m, 0) for m in modes] + [(base, 1)]
        done: dict[tuple[str, int], set[tuple[str, int]]] = {}
        for line in iter_paired(out):
            key = (f"{line['suite']}/{line['workload']}", int(line["replicate"]))
            done.setdefault(key, set()).add((line["mode"], int(line.get("copy", 0))))
        every = {(m.name, c) for m, c in self.members_of}
        #: (workload key, replicate) whose group is in paired.jsonl already (a resumed run).
        self.done = {k for k, got in done.items() if got >= every}

    def todo(self) -> list[tuple[int, list[str]]]:
        """Per replicate, the workloads whose group is still to be timed."""
        out = []
        for r in range(self.replicates):
            keys = [k for k in self.keys if (k, r) not in self.done]
            if keys:
                out.append((r, keys))
        return out

    @property
    def groups(self) -> int:
        return sum(len(keys) for _, keys in self.todo())

    def plan(self, block_seconds: float) -> PairedPlan:
        """What is left to time, for the estimate."""
        todo = self.todo()
        return PairedPlan(
            groups=sum(len(keys) for _, keys in todo),
            replicates=len(todo),
            keys=tuple(k for _, keys in todo for k in keys),
            workers=len(self.members_of),
            rounds=self.rounds,
            block_seconds=block_seconds,
        )

    def run(self) -> None:
        """Time every group still to be timed, once every verdict is in: each verdict record of
        the run (this call's and earlier calls') gives its timing ``same_bits``, and a mode
        whose verdict record is not ``ok`` (unsupported, failed, or not run) sits out."""
        recs = {
            (f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"])): r
            for r in iter_records(self.out)
        }

        def verdicts(key: str, mode: str, replicate: int) -> Mapping[str, Any] | None:
            return recs.get((key, mode, replicate))

        t0 = time.perf_counter()
        total, n = self.groups, 0
        try:
            with _Writer(self.out) as writer:
                for replicate, keys in self.todo():
                    members = [Member(m, c) for m, c in self.members_of]
                    try:
                        self._start(members, replicate)
                        for key in keys:
                            n += 1
                            self._say(n, total, replicate, key, time.perf_counter() - t0)
                            writer.append_all(self._group(members, key, replicate, verdicts))
                            self.stats.groups += 1
                    finally:
                        self._end(members)
        finally:
            self.stats.wall += time.perf_counter() - t0

    # -- one replicate's workers ---------------------------------------------------------------
    def _spawn(self, member: Member, replicate: int) -> None:
        job = {**self.job_for(member.mode, replicate), "copy": member.copy}
        env = self.env_for(member.mode)
        log = self.out / "logs" / f"r{replicate}-{member.mode.name}-timing{member.copy}.log"
        member.worker = self.crew.spawn(self.python, job, env, log, kind=PAIR_KIND)
        self.stats.workers += 1

    def _start(self, members: list[Member], replicate: int) -> None:
        """Spawn the group's workers all at once, let them all initialise, wait until each is
        ready, and start them."""
        t0 = time.perf_counter()
        for m in members:
            self._spawn(m, replicate)
        for m in members:
            self._ready(m)
        self.stats.startup += time.perf_counter() - t0

    def _ready(self, m: Member) -> None:
        assert m.worker is not None
        m.worker.release()
        msg = m.worker.ready(self.startup_timeout)
        if msg is None or msg is TIMEOUT or msg.get("type") != "ready":
            self._lose(m, "did not start")
            return
        m.worker.send("go")

    def _lose(self, m: Member, what: str) -> None:
        """``m``'s worker is gone (it crashed, or was silent past its limit): killed and
        reaped; a fresh one takes the next workload."""
        if m.worker is not None:
            m.worker.kill()
            code = self.crew.finish(m.worker)
            said = log_tail(m.worker.log)
            m.failure = ("crashed", f"the timing worker {what} (exit {code}): {said}")
            m.worker = None

    def _end(self, members: list[Member]) -> None:
        for m in members:
            if m.worker is not None:
                m.worker.send("exit")
        for m in members:
            if m.worker is not None:
                self.crew.finish(m.worker)
                m.worker = None

    def _ask(self, m: Member, line: str, kind: str) -> dict[str, Any] | None:
        """Send ``line`` to ``m``'s worker and wait for its message of type ``kind``; None (the
        worker lost) where it exits or stays silent past the run's ``--timeout``."""
        assert m.worker is not None
        m.worker.send(line)
        msg = m.worker.next(self.timeout)
        if msg is None or msg is TIMEOUT or msg.get("type") != kind:
            self._lose(m, "ended" if msg is None else "was silent" if msg is TIMEOUT else "erred")
            return None
        return msg

    # -- one workload ----------------------------------------------------------------------------
    def _group(
        self,
        members: list[Member],
        key: str,
        replicate: int,
        verdicts: Callable[[str, str, int], Mapping[str, Any] | None],
    ) -> list[dict[str, Any]]:
        """Prepare, rounds, finish: the group's lines for ``key``."""
        t0 = time.perf_counter()
        for m in members:
            m.reset()
            verdict = verdicts(key, m.mode.name, replicate)
            if verdict is None or verdict.get("status") != "ok":
                why = "no verdict record" if verdict is None else f"a verdict {verdict['status']}"
                m.failure = ("not_timed", f"{why}: not timed")
                continue
            if m.worker is None:  # lost on an earlier workload: a fresh one
                self._spawn(m, replicate)
                self._ready(m)
                m.failure = None
            if m.worker is None:
                continue
            msg = self._ask(m, f"prepare {key}", "prepared")
            if msg is None:
                continue
            if msg.get("status") != "ok":
                m.failure = (str(msg.get("status")), str(msg.get("message")))
                continue
            m.prepared = msg
        t1 = time.perf_counter()
        self.stats.prepare += t1 - t0
        live = [m for m in members if m.prepared is not None]
        for index in range(self.rounds_for(live)):
            order = round_order(self.seed, key, replicate, index, len(live))
            for position, i in enumerate(order):
                m = live[i]
                if m.prepared is None or m.worker is None:  # failed in an earlier round
                    continue
                msg = self._ask(m, "block", "block")
                if msg is None or "error" in msg:
                    why = "lost" if msg is None else msg["error"]
                    m.failure = m.failure or ("failed", f"block {index}: {why}")
                    m.prepared = None
                    continue
                m.samples.append(float(msg["seconds"]))
                m.starts.append(float(msg["start"]))
                m.rounds.append(index)
                m.positions.append(position)
        t2 = time.perf_counter()
        self.stats.rounds += t2 - t1
        lines = [self._line(m, key, replicate, len(live), verdicts) for m in members]
        self.stats.finish += time.perf_counter() - t2
        return lines

    def rounds_for(self, live: list[Member]) -> int:
        """The group's rounds: ``rounds``, fewer where the longest block would take the
        members past ``budget`` seconds of sampling each (a step longer than the block is a
        block of its own: an RNN step of 40 ms, a training step of 30 ms on the H100), never
        fewer than ``MIN_ROUNDS``."""
        blocks = [
            m.prepared["number_per_block"] * m.prepared["step_seconds"] for m in live if m.prepared
        ]
        longest = max(blocks, default=0.0)
        fit = math.floor(self.budget / longest) if longest > 0 else self.rounds
        return max(MIN_ROUNDS, min(self.rounds, fit))

    def _line(
        self,
        m: Member,
        key: str,
        replicate: int,
        workers: int,
        verdicts: Callable[[str, str, int], Mapping[str, Any] | None],
    ) -> dict[str, Any]:
        suite, name = key.split("/", 1)
        line: dict[str, Any] = {
            "suite": suite,
            "workload": name,
            "mode": m.mode.name,
            "replicate": replicate,
            "copy": m.copy,
            "workers": workers,
            "utc": utc_now(),
        }
        timed = None
        if m.prepared is not None and m.worker is not None:
            timed = self._ask(m, "finish", "timed")
        if m.prepared is not None and timed is not None and timed.get("timing"):
            p = m.prepared
            verdict = verdicts(key, m.mode.name, replicate) or {}
            digest = (verdict.get("step_fingerprints") or [None])[0]
            line.update(
                status="ok",
                message=None,
                samples=m.samples,
                rounds=m.rounds,
                positions=m.positions,
                block_start=m.starts,
                number_per_block=p["number_per_block"],
                timing=timed["timing"],
                first_step_digest=p["first_step_digest"],
                same_bits=None if digest is None else digest == p["first_step_digest"],
                settings_changed=p.get("settings_changed") or [],
                worker_pid=m.worker.pid if m.worker is not None else None,
            )
            return line
        status, message = m.failure or ("failed", "fewer than 6 blocks were timed")
        line.update(status=status, message=message, samples=m.samples, rounds=m.rounds)
        return line

    def _say(self, n: int, total: int, replicate: int, key: str, elapsed: float) -> None:
        """The line of group ``n`` of ``total`` starting: the time left is the groups left at
        the pace of those timed so far (the first group's line has none yet)."""
        width = len(str(total))
        left = f" left ~{clock(elapsed / (n - 1) * (total - n + 1))}" if n > 1 else ""
        self.stream.write(
            f"costs [{n:>{width}}/{total}] replicate {replicate + 1}/{self.replicates} "
            f"{key}: {len(self.members_of)} workers side by side  elapsed {clock(elapsed)}"
            f"{left}\n"
        )
        self.stream.flush()


class _Writer:
    """``PairedWriter`` as a context manager."""

    def __init__(self, out: Path) -> None:
        self.writer = PairedWriter(out)

    def __enter__(self) -> PairedWriter:
        return self.writer

    def __exit__(self, *exc: object) -> None:
        self.writer.close()
