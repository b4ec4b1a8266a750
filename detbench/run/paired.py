"""The paired phase: every replicate's modes timed side by side, and, by default, their verdicts
made in the same workers.

A ratio of two medians taken minutes apart carries whatever changed in between (the GPU's clock,
the host's load). So each replicate's workloads are measured by a **group** of fresh workers
alive together: one per mode, and a second of the baseline's settings (``copy`` 1: the A/A check,
whose interval must hold 1). For each workload:

1. each worker prepares it, one at a time (the baseline's first, the others shuffled): a member
   that owes its verdict (all but the A/A copy) makes it (``passes.run_workload``), stored at
   once, and keeps the step it built; the others build it. Each warms it up until steady. On a
   GPU the verdicts are made side by side where the copies fit (``HELD_VERDICTS``);
2. rounds (``paired_rounds``): the workers take turns, one block each, in an order shuffled
   anew each round (``round_order``);
3. each worker summarises its samples and frees the workload; the group's lines go to
   ``paired.jsonl`` together, so a stopped run keeps none of a half-measured group.

A group too big for the device (``paired_rounds.fits``) is timed as subgroups that each hold the
baseline's copy (``subgroup`` in the lines); an out-of-memory error is that member's record.
Several devices (``--devices``) each time one group at a time (``PairedPhase.lane_of``). A run
that times nothing (``detbench audit``) has no A/A copy and no rounds: each member makes its
verdicts (``record KEY``) and ``paired.jsonl`` gets no line.

On a CPU the cuDNN flags act on nothing (``acts.timed_as``): a mode that differs from another
only in them makes its verdict (``record KEY``) and sits the rounds out, its line saying
``same_computation``. Of the 10 modes, default and det-algos take turns (with the A/A copy).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO

from detbench.core import acts
from detbench.core.modes import DEFAULT_MODE, Mode
from detbench.core.workload import Workload
from detbench.run.config import TARGET_REL, RunConfig, RunError
from detbench.run.hostspeed import cores as host_cores
from detbench.run.paired_plan import PairedPlan
from detbench.run.paired_rounds import (
    MIN_ROUNDS,
    TwinRoom,
    copies_at_once,
    fits,
    half_width,
    log_ratios,
    most_rounds,
    settled,
)
from detbench.run.paired_workers import GroupWorkers
from detbench.run.schedule import clock
from detbench.run.supervise import Crew, WorkerProcess, side_by_side
from detbench.store.paired import PairedWriter, iter_paired
from detbench.store.record import lost
from detbench.store.results import iter_records, utc_now

if TYPE_CHECKING:
    from detbench.run.estimate import Estimate
    from detbench.run.schedule import Slot


#: libgomp's ``GOMP_SPINCOUNT`` for a CPU worker: its default (about 10 ms of spinning after a
#: turn) slows the next worker's block (docs/measured.md); 30,000 is about 1 ms, still far above
#: the gaps between a step's parallel regions. A count the user set is kept.
SPIN_ENV = {"GOMP_SPINCOUNT": "30000"}

#: The devices on which a group's members make their verdicts side by side (``hold KEY``), then
#: warm up one at a time (``warm KEY``: it measures the step that sizes the block). A verdict's
#: passes are mostly host work, and one after another they are a large part of a GPU matrix's
#: plan (docs/measured.md). Not on a CPU: two workers' OpenMP threads on the same cores slow
#: each other's fingerprint passes 6x.
HELD_VERDICTS = frozenset({"cuda"})


def baseline_of(modes: Iterable[Mode]) -> Mode:
    """torch's default where the run has it, else the first (as ``labels.baseline_mode``)."""
    modes = list(modes)
    return next((m for m in modes if m.name == DEFAULT_MODE.name), modes[0])


def round_order(seed: int, key: str, replicate: int, index: int, n: int) -> list[int]:
    """The order of ``n`` workers' turns in round ``index`` (-1: the others' preparation after
    the baseline's), seeded from SHA-256 so every host and a resumed run plan the same."""
    name = f"{seed}|{key}|{replicate}|{index}"
    rng = random.Random(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big"))
    order = list(range(n))
    rng.shuffle(order)
    return order


@dataclass
class Member:
    """One worker of a group (``copy`` 1: the A/A copy) and what it measured of the workload."""

    mode: Mode
    copy: int
    worker: WorkerProcess | None = None
    prepared: dict[str, Any] | None = None
    samples: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    references: list[float] = field(default_factory=list)
    reference_timer: str | None = None
    timed: dict[str, Any] | None = None  # the ``timed`` message, once finished
    subgroup: int = 0
    workers: int = 0  # members timed side by side in its subgroup
    failure: tuple[str, str] | None = None  # (status, message) of the workload in hand
    exit_code: int | None = None  # its worker's, where the worker died on it
    #: Another mode whose worker times this one's computation (``acts.timed_as``): sits out.
    timed_as: str | None = None
    #: Its verdict made beside others' (``hold KEY``), its step kept, not yet warmed up.
    held: bool = False

    def reset(self) -> None:
        self.prepared, self.failure, self.timed, self.reference_timer = None, None, None, None
        self.exit_code, self.held = None, False
        self.samples, self.rounds, self.positions, self.starts = [], [], [], []
        self.references, self.subgroup, self.workers = [], 0, 0

    def by_round(self) -> dict[int, float]:
        return dict(zip(self.rounds, self.samples, strict=True))


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
    verdicts: int = 0
    held: int = 0
    subgroups: int = 0
    rounds_taken: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def absorb(self, other: PairedStats) -> None:
        """Add ``other``'s figures (one device's) to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def line_of(
    m: Member, key: str, replicate: int, recs: Mapping[tuple[str, str, int], Mapping[str, Any]]
) -> dict[str, Any]:
    """``m``'s line of ``paired.jsonl`` for ``key``; ``recs``: the run's verdict records."""
    suite, name = key.split("/", 1)
    line: dict[str, Any] = {
        "suite": suite,
        "workload": name,
        "mode": m.mode.name,
        "replicate": replicate,
        "copy": m.copy,
        "workers": m.workers,
        "subgroup": m.subgroup,
        "utc": utc_now(),
    }
    timed = m.timed
    if m.prepared is not None and timed is not None and timed.get("timing"):
        p = m.prepared
        verdict = recs.get((key, m.mode.name, replicate)) or {}
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
            footprint_bytes=p.get("footprint_bytes"),
            host_load=timed.get("host_load"),
        )
        if m.references:
            line.update(reference=m.references, reference_timer=m.reference_timer)
        return line
    status, message = m.failure or ("failed", "fewer than 6 blocks were timed")
    line.update(status=status, message=message, samples=m.samples, rounds=m.rounds)
    if status == "same_computation":
        line["timed_as"] = m.timed_as
    return line


def done_groups(
    lines: Iterable[Mapping[str, Any]], members_of: list[tuple[Mode, int]]
) -> set[tuple[str, int]]:
    """The (workload key, replicate) groups whose every member has a line in ``lines``."""
    done: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for line in lines:
        key = (f"{line['suite']}/{line['workload']}", int(line["replicate"]))
        done.setdefault(key, set()).add((line["mode"], int(line.get("copy", 0))))
    every = {(m.name, c) for m, c in members_of}
    return {k for k, got in done.items() if got >= every}


def not_timed(verdict: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(status, why) of a member whose verdict record is missing or not ok; None where ok."""
    if verdict is not None and verdict.get("status") == "ok":
        return None
    why = "no verdict record" if verdict is None else f"a verdict {verdict['status']}"
    return "not_timed", f"{why}: not timed"


def same_words(rep: str, device: str) -> tuple[str, str]:
    """(status, why) of a member timed as ``rep`` on ``device`` (``acts.timed_as``)."""
    return (
        "same_computation",
        f"the same computation as {rep} on {device} (the switches it changes act on nothing "
        f"here): timed as {rep}",
    )


def time_left(
    weights: tuple[float, float],
    elapsed: float,
    startups: tuple[float, float, float],
    estimated: bool = False,
) -> float | None:
    """Seconds left: the plan's (``weights`` = (planned, done)) at the pace so far, plus a
    start-up per group to start (``startups`` = (seconds, started, in all)). Before a group is
    done: the plan's seconds less those spent where ``estimated``, else None."""
    (planned, spent), (startup, started, groups) = weights, startups
    if spent <= 0 or started <= 0:
        return max(0.0, planned - elapsed) if estimated else None
    pace = max(0.0, elapsed - startup) / spent
    return pace * (planned - spent) + startup / started * (groups - started)


def group_line(
    verdicts: bool,
    count: tuple[int, int],
    replicate: tuple[int, int],
    key: str,
    workers: tuple[int, int],
    time: tuple[float, float | None],
) -> str:
    """The progress line of group ``count`` = (n, total) starting: ``workers`` = (started,
    taking turns); ``time`` = (elapsed, seconds left or None)."""
    (n, total), (r, replicates), (elapsed, left), (started, turns) = count, replicate, time, workers
    side = f"{started} workers"
    if turns:
        side += " side by side" if turns == started else f", {turns} timed side by side"
    width = len(str(total))
    rest = f" left ~{clock(left)}" if left is not None else ""
    what = "verdicts and costs" if verdicts and turns else "verdicts" if verdicts else "costs"
    return (
        f"{what} [{n:>{width}}/{total}] replicate {r + 1}/{replicates} {key}: {side}  "
        f"elapsed {clock(elapsed)}{rest}\n"
    )


class PairedPhase:
    """The paired phase of the run ``c`` (module docstring); each device's ``GroupTimer`` runs in
    a thread of its own. ``owed``: the plan's slots, whose verdicts the groups make, stored
    through ``store``; ``shard``: the groups of ``--shard K/N`` (``schedule.shard_groups``)."""

    def __init__(
        self,
        c: RunConfig,
        workloads: list[Workload],
        job_for: Callable[[Mode, int, str, list[str]], dict[str, Any]],
        env_for: Callable[[Mode, str], dict[str, str]],
        crew: Crew,
        stream: TextIO,
        owed: Sequence[Slot] | None = None,
        store: Callable[[dict[str, Any]], None] | None = None,
        shard: set[tuple[str, int]] | None = None,
    ) -> None:
        self.c = c
        self.out, self.modes, self.replicates = c.out, c.modes, c.replicates
        self.keys = keys = [w.key for w in workloads]
        self.distributed = {w.key for w in workloads if w.distributed}  # never held
        self.rounds = int(c.setting("rounds"))
        self.budget = float(c.setting("budget"))
        self.seed = c.seed
        self.device = c.device
        self.target = TARGET_REL.get(self.device, 0.03)
        self.reference_seconds = c.reference_check
        self.stream = stream
        self.stats = PairedStats()
        self.crew = crew
        self.owed = {(k, s.mode.name, s.replicate) for s in owed or () for k in s.keys}
        self.shard = shard
        self.store = store
        self.base = baseline_of(c.modes)
        self.verdicts_only = not c.paired
        copies = [] if self.verdicts_only else [(self.base, 1)]  # the A/A copy
        self.members_of = [(m, 0) for m in c.modes] + copies
        order = [self.base] + [m for m in c.modes if m.name != self.base.name]
        self.timed_as = acts.timed_as(order, self.device)
        lanes = c.device_names
        # Members timed as another mode make their verdicts as many at once as the cores hold
        # workers of their threads: more would wait on each other's OpenMP threads.
        cores = host_cores() // (len(lanes) if self.device == "cpu" else 1)
        threads = job_for(c.modes[0], 0, lanes[0], keys).get("num_threads")
        most = cores // int(threads or cores or 1)
        #: The modes of the members that take turns: the A/A copy's, and each not timed as another.
        self.turning = [m for m, n in self.members_of if n or self.timed_as[m.name] == m.name]
        self.turns = 0 if self.verdicts_only else len(self.turning)
        self.done = done_groups(iter_paired(c.out), self.members_of)
        self.recs: dict[tuple[str, str, int], Mapping[str, Any]] = {}
        self.made: set[tuple[str, str, int]] = set()
        self.weights: dict[str, float] = {}
        self.lock = threading.RLock()  # the devices' threads share the verdicts and progress
        self.timers = [
            GroupTimer(
                self, lane, self._workers(lane, job_for, env_for), TwinRoom(self.device, most)
            )
            for lane in lanes
        ]

    def _workers(
        self,
        lane: str,
        job_for: Callable[[Mode, int, str, list[str]], dict[str, Any]],
        env_for: Callable[[Mode, str], dict[str, str]],
    ) -> GroupWorkers:
        """The workers of device ``lane``, a CPU worker's spin cut short (``SPIN_ENV``)."""
        c, lanes = self.c, self.c.device_names

        def env(mode: Mode) -> dict[str, str]:
            got = env_for(mode, lane)
            if c.device == "cpu" and not got.keys() & {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"}:
                got.update(SPIN_ENV)
            return got

        return GroupWorkers(
            c.out,
            c.python,
            self.crew,
            lambda mode, replicate: job_for(mode, replicate, lane, self.keys),
            env,
            float(c.startup_timeout),
            c.timeout,
            PairedStats(),
            self.verdict,
            tag=f"-{lane.replace(':', '')}" if len(lanes) > 1 else "",
        )

    def weigh(self, estimate: Estimate) -> None:
        """Each group's weight for the time left, from ``estimate``'s seconds."""
        records: Counter[str] = Counter()
        for _, keys in estimate.slot_seconds.values():
            records.update(keys)
        share = estimate.paired_seconds / max(1, (estimate.paired or {}).get("groups") or 1)
        self.weights = {k: v / max(1, self.replicates) + share for k, v in records.items()}

    def holds(self, mode: Mode, convolves: bool = True, baseline: bool = False) -> bool:
        """Whether ``mode``'s member makes its verdicts beside the others' (``hold KEY``): not a
        twin, nor one that autotunes where the step ``convolves`` (``cudnn.benchmark`` times a
        convolution's candidates: alone), nor the baseline's unless ``baseline``."""
        return (
            self.device in HELD_VERDICTS
            and not self.verdicts_only
            and (baseline or mode.name != self.base.name)
            and not (mode.benchmark and convolves)
            and self.timed_as[mode.name] == mode.name
        )

    def convolves(self, key: str) -> bool:
        """False only where a baseline's verdict made by this run saw ``key``'s step call no
        convolution (a record read back may come from a detbench that did not watch for them)."""
        for r in range(self.replicates):
            if (key, self.base.name, r) in self.made:
                called = self.recs[(key, self.base.name, r)].get("ops_called")
                return not isinstance(called, list) or "convolution" in called
        return True

    def owes(self, key: str, replicate: int) -> bool:
        return any((key, m.name, replicate) in self.owed for m in self.modes)

    def todo(self) -> list[tuple[int, list[str]]]:
        """Per replicate, the workloads whose group or verdicts are still to be made."""
        out = []
        for r in range(self.replicates):
            keys = [
                k
                for k in self.keys
                if (self.owes(k, r) or ((k, r) not in self.done and not self.verdicts_only))
                and (self.shard is None or (k, r) in self.shard)
            ]
            if keys:
                out.append((r, keys))
        return out

    @property
    def groups(self) -> int:
        return sum(len(keys) for _, keys in self.todo())

    def plan(self, block_seconds: float) -> PairedPlan:
        todo = self.todo()
        owing = [m for m, c in self.members_of if c == 0 and self.owed]

        def named(keep: Callable[[Mode], bool]) -> tuple[tuple[str, bool], ...]:
            return tuple((m.name, m.cudnn_enabled) for m in owing if keep(m))

        return PairedPlan(
            groups=sum(len(keys) for _, keys in todo),
            replicates=len(todo),
            keys=tuple(k for _, keys in todo for k in keys),
            workers=len(self.members_of),
            timed=self.turns,
            rounds=self.rounds,
            block_seconds=block_seconds,
            fused=bool(self.owed),
            verdicts_only=self.verdicts_only,
            warmup=min(self.budget, self.rounds * block_seconds / 2),
            cudnn_off=sum(not m.cudnn_enabled for m in self.turning),
            reference=self.reference_seconds,
            budget=self.budget,
            lanes=len(self.timers),
            held=named(self.holds),
            autotuned=named(lambda m: self.holds(m, False) and not self.holds(m)),
            baseline=named(lambda m: m == self.base and self.holds(m, baseline=True)),
        )

    def run(self, before: float = 0.0) -> None:
        """Time every group left, making the verdicts owed on the way (``before``: the run's
        seconds so far)."""
        self.recs = {
            (f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"])): r
            for r in iter_records(self.out)
        }
        t0 = time.perf_counter()
        todo = self.todo()
        queues: list[deque[tuple[int, str]]] = [deque() for _ in self.timers]
        for r, keys in todo:
            for k in keys:
                queues[self.lane_of(k, r)].append((r, k))
        weight = {k: self.weights.get(k, 1.0) for _, keys in todo for k in keys}
        planned = sum(weight[k] for q in queues for _, k in q)
        progress = {"n": 0, "spent": 0.0, "started": 0, "total": sum(len(q) for q in queues)}
        starts = sum(len({r for r, _ in q}) for q in queues)

        def line(lane: GroupTimer, key: str, replicate: int) -> None:
            with self.lock:
                progress["n"] += 1
                # The devices start their groups side by side: a start-up takes their mean.
                n = len(self.timers)
                startup = sum(t.workers.stats.startup for t in self.timers)
                left = time_left(
                    (planned, float(progress["spent"])),
                    time.perf_counter() - t0,
                    (startup / n, float(progress["started"]) / n, starts / n),
                    estimated=bool(self.weights),
                )
                text = group_line(
                    self.owes(key, replicate),
                    (int(progress["n"]), int(progress["total"])),
                    (replicate, self.replicates),
                    key,
                    (len(self.members_of), self.turns),
                    (before + time.perf_counter() - t0, left),
                )
                if len(self.timers) > 1:
                    text = text.replace(": ", f" on {lane.lane}: ", 1)
                self.stream.write(text)
                self.stream.flush()

        def take(lane: int) -> tuple[int, str] | None:
            with self.lock:
                return queues[lane].popleft() if queues[lane] else None

        def done(key: str, started: bool) -> None:
            with self.lock:
                progress["spent"] = float(progress["spent"]) + weight[key]
                progress["started"] = int(progress["started"]) + started
                self.stats.groups += 1

        try:
            with PairedWriter(self.out) as writer:
                each = [
                    partial(t.run, partial(take, i), line, done, writer)
                    for i, t in enumerate(self.timers)
                ]
                if len(each) == 1:
                    each[0]()
                else:
                    side_by_side(each, [t.lane for t in self.timers], self.crew)
        finally:
            for t in self.timers:
                self.stats.absorb(t.workers.stats)
            self.stats.wall += time.perf_counter() - t0

    def lane_of(self, key: str, replicate: int) -> int:
        """The device of group (``key``, ``replicate``): a workload's replicates take each device
        in turn, so a difference between devices shows as one (``report.devices``)."""
        return (self.keys.index(key) + replicate) % len(self.timers)

    def verdict(self, rec: dict[str, Any], position: int | None = None) -> None:
        """A verdict record a member made: stored, and no longer owed."""
        key = (f"{rec['suite']}/{rec['workload']}", rec["mode"], int(rec["replicate"]))
        with self.lock:
            self.owed.discard(key)
            if position is not None:
                rec["mode_position"] = position
            self.recs[key] = rec
            self.made.add(key)
            self.stats.verdicts += 1
            if self.store is not None:
                self.store(rec)


class GroupTimer:
    """One device's share of the paired phase: fresh workers per replicate, a group at a time."""

    def __init__(
        self, phase: PairedPhase, lane: str, workers: GroupWorkers, room: TwinRoom
    ) -> None:
        self.phase = phase
        self.lane = lane
        self.workers = workers
        workers.on_verdict = lambda rec: phase.verdict(rec, self._position)
        self.room = room
        #: Per workload key, (footprint, free) of the baseline's copy in its last group.
        self.copies: dict[str, tuple[Any, Any]] = {}
        self._position: int | None = None

    def run(
        self,
        take: Callable[[], tuple[int, str] | None],
        line: Callable[[GroupTimer, str, int], None],
        done: Callable[[str, bool], None],
        writer: PairedWriter,
    ) -> None:
        """Time the groups ``take`` gives until it gives none, their lines through ``writer``."""
        members: list[Member] = []
        replicate: int | None = None
        try:
            while (got := take()) is not None:
                r, key = got
                started = r != replicate
                if started:
                    self.workers.end(members)
                    members = [Member(m, c) for m, c in self.phase.members_of]
                    replicate = r
                    self.workers.start(members, r)
                line(self, key, r)
                writer.append_all(self.group(members, key, r))
                if self.workers.failed_starts >= 2:  # two groups in a row: stop, records kept
                    out, failed = self.phase.out, self.workers.failed_starts
                    raise RunError(
                        f"{failed} workers in a row did not start; stopping. Records kept in "
                        f"{out}; resume with: detbench run --resume {out}"
                    )
                done(key, started)
        except BaseException:  # Ctrl-C or a failure: the workers are killed, none waited for
            self.workers.end(members, kill=True)
            raise
        self.workers.end(members)

    def group(self, members: list[Member], key: str, replicate: int) -> list[dict[str, Any]]:
        """Prepare, rounds, finish, in as many subgroups as memory needs: the group's lines."""
        phase, stats = self.phase, self.workers.stats
        for m in members:
            m.reset()
            if m.copy == 0 and phase.timed_as[m.mode.name] != m.mode.name:
                m.timed_as = phase.timed_as[m.mode.name]
            elif phase.verdicts_only:  # its verdict alone, nothing kept: as a twin makes it
                m.timed_as = m.mode.name
        base = next(m for m in members if m.mode.name == phase.base.name and m.copy == 0)
        rest = [m for m in members if m is not base]
        queue = [base] + [rest[i] for i in round_order(phase.seed, key, replicate, -1, len(rest))]
        live: list[Member] = []
        footprint: int | None = None
        free: int | None = None
        index, subgroup = 0, 0
        # Members timed as another mode make their verdicts first, as many at once as memory
        # holds (``TwinRoom``): nothing is timed while they work.
        twins = [(m, p) for p, m in enumerate(queue) if m.timed_as is not None]
        while twins:
            n = self.room.at_once(key)
            self._prepare_all(twins[:n], key, replicate)
            twins = twins[n:]
        if key in self.copies:  # an earlier group showed what a copy holds: the baseline too
            self._hold_all(queue, base, key, replicate, self.copies[key])
        for position, m in enumerate(queue):
            if m.timed_as is not None:
                continue
            if len(live) >= 2 and not fits(footprint, free, phase.device):
                index = self._rounds(live, key, replicate, index, subgroup, base)
                for x in live:
                    if x is not base:
                        self._finish(x)
                live = [base] if base.prepared is not None else []
                subgroup += 1
            self._prepare_all([(m, position)], key, replicate)
            if m.prepared is not None:
                live.append(m)
                got = m.prepared.get("footprint_bytes")
                footprint = footprint if got is None else max(footprint or 0, int(got))
                free = m.prepared.get("free_bytes", free)
            if m is base:
                self._hold_all(queue, base, key, replicate)
        if live and (len(live) > 1 or index == 0):
            self._rounds(live, key, replicate, index, subgroup, base)
        if phase.verdicts_only:
            return []
        stats.subgroups += subgroup + 1
        t0 = time.perf_counter()
        for m in members:
            self._finish(m)
        with phase.lock:
            lines = [line_of(m, key, replicate, phase.recs) for m in members]
        for ln in lines:
            ln["device_name"] = self.lane
        stats.finish += time.perf_counter() - t0
        return lines

    def _hold_all(
        self,
        queue: list[Member],
        base: Member,
        key: str,
        replicate: int,
        room: tuple[Any, Any] | None = None,
    ) -> None:
        """The held members of ``queue`` that owe ``key``'s verdict make it side by side where all
        their copies fit: once the baseline's copy is prepared, or before, from the ``room``
        (footprint, free) an earlier group showed, the baseline's verdict held too."""
        phase = self.phase
        if base.prepared is not None:
            room = base.prepared.get("footprint_bytes"), base.prepared.get("free_bytes")
            self.copies[key] = room
        if room is None or key in phase.distributed:
            return
        convolves, early = phase.convolves(key), base.prepared is None
        ms = [
            (m, position)
            for position, m in enumerate(queue)
            if m.copy == 0
            and phase.holds(m.mode, convolves, baseline=early)
            and (key, m.mode.name, replicate) in phase.owed
        ]
        footprint, free = room
        if not ms or footprint is None or free is None:
            return
        if copies_at_once(int(footprint), int(free), phase.device, len(ms)) >= len(ms):
            self._prepare_all(ms, key, replicate, hold=True)

    def _prepare_all(
        self, ms: list[tuple[Member, int]], key: str, replicate: int, hold: bool = False
    ) -> None:
        """Each (member, ``mode_position``) of ``ms`` prepares ``key``, all requests sent before
        the first answer is read so the workers work at once (``hold``: ``_hold_all``)."""
        phase = self.phase
        t0 = time.perf_counter()
        try:
            sent: list[tuple[Member, int]] = []
            for m, position in ms:
                self._position = position
                if self._request(m, key, replicate, hold):
                    sent.append((m, position))
            for m, position in sent:
                self._position = position
                self._answer(m, key, replicate, self.workers.wait(m, "prepared"))
            for m, position in ms:
                if m.copy == 0 and (key, m.mode.name, replicate) in phase.owed:
                    # Its worker was lost: the record says how.
                    status, why = m.failure or ("crashed", "the worker ended")
                    rec = lost(
                        key,
                        m.mode,
                        status,
                        why,
                        m.exit_code,
                        replicate=replicate,
                        seed=phase.seed,
                        device=phase.device,
                        device_name=self.lane,
                        profile=phase.c.profile,
                        utc=utc_now(),
                    )
                    phase.verdict(rec, position)
        finally:
            self.workers.stats.prepare += time.perf_counter() - t0

    def _request(self, m: Member, key: str, replicate: int, hold: bool = False) -> bool:
        """Send ``m``'s worker (a fresh one where it lost its own) what it does with ``key``;
        False where it sits out: no worker, or no verdict to time."""
        phase = self.phase
        owes = m.copy == 0 and (key, m.mode.name, replicate) in phase.owed
        if not owes:
            m.failure = not_timed(phase.recs.get((key, m.mode.name, replicate)))
            if m.failure is None and m.timed_as is not None:
                m.failure = same_words(m.timed_as, phase.device)
            if m.failure is not None:
                return False
        if m.worker is None:  # lost on an earlier workload: a fresh one
            m.held = False  # nothing of its held
            self.workers.spawn(m, replicate)
            self.workers.ready(m)
        if m.worker is None:
            return False
        m.failure = None
        if m.timed_as is not None:
            word = "record"
        elif owes:
            word = "hold" if hold else "verdict"
        else:
            word = "warm" if m.held else "prepare"
        self.workers.stats.held += word == "hold"
        m.worker.send(f"{word} {key}")
        return True

    def _answer(self, m: Member, key: str, replicate: int, msg: dict[str, Any] | None) -> None:
        if msg is None:
            return
        if msg.get("lost"):
            self.workers.lose(m, "lost its CUDA context")
        elif msg.get("status") != "ok":
            verdict = self.phase.recs.get((key, m.mode.name, replicate)) if m.copy == 0 else None
            failed = str(msg.get("status")), str(msg.get("message"))
            m.failure = (None if verdict is None else not_timed(verdict)) or failed
        elif m.timed_as is not None:
            m.failure = same_words(m.timed_as, self.phase.device)
            self.room.saw(key, msg)
        elif msg.get("held"):  # its verdict made, its step kept: warmed up at its turn
            m.held = True
        else:
            m.prepared = msg

    def _rounds(
        self, live: list[Member], key: str, replicate: int, first: int, subgroup: int, base: Member
    ) -> int:
        """One subgroup's rounds, numbered from ``first``, until every ratio to ``base`` settles
        (``paired_rounds``) or the cap: the next round's number."""
        phase, stats = self.phase, self.workers.stats
        t0 = time.perf_counter()
        cap = most_rounds([m.prepared for m in live if m.prepared], phase.rounds, phase.budget)
        widths: dict[int, list[float]] = {id(m): [] for m in live}
        index = first
        for m in live:
            m.subgroup, m.workers = subgroup, len(live)
        for n in range(cap):
            order = round_order(phase.seed, key, replicate, index, len(live))
            for position, i in enumerate(order):
                self._turn(live[i], index, position)
            if phase.reference_seconds > 0:
                for i in order:
                    self._reference(live[i])
            index += 1
            if n + 1 < MIN_ROUNDS:
                continue
            done = True
            for m in live:
                if m is base or m.prepared is None or base.prepared is None:
                    continue
                widths[id(m)].append(half_width(log_ratios(base.by_round(), m.by_round())))
                done = done and settled(widths[id(m)], phase.target)
            if done:
                break
        stats.rounds_taken.append(index - first)
        stats.rounds += time.perf_counter() - t0
        return index

    def _turn(self, m: Member, index: int, position: int) -> None:
        if m.prepared is None or m.worker is None:  # failed in an earlier round
            return
        msg = self.workers.ask(m, "block", "block")
        if msg is None or "error" in msg:
            why = "lost" if msg is None else msg["error"]
            m.failure = m.failure or ("failed", f"block {index}: {why}")
            m.prepared = None
            return
        m.samples.append(float(msg["seconds"]))
        m.starts.append(float(msg["start"]))
        m.rounds.append(index)
        m.positions.append(position)

    def _reference(self, m: Member) -> None:
        """``--reference-check``: the step timed by the reference timer in ``m``'s worker."""
        if m.prepared is None or m.worker is None:
            return
        msg = self.workers.ask(m, f"reference {self.phase.reference_seconds}", "reference")
        if msg is not None:
            m.references.append(float(msg["seconds"]))
            m.reference_timer = str(msg.get("timer"))

    def _finish(self, m: Member) -> None:
        """``m``'s summary of its samples, the workload freed in its worker (once)."""
        if m.timed is None and m.prepared is not None and m.worker is not None:
            m.timed = self.workers.ask(m, "finish", "timed")
