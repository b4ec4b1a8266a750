"""Why do short, launch-bound blocks scatter from round to round in a paired group? One factor at
a time, timed by detbench's own paired workers (issue 49, item 1).

    python tools/launch_noise.py --device cpu            # the 2-core VM: about 2 minutes
    python tools/launch_noise.py --device cuda           # a GPU host: under 4 minutes
    python tools/launch_noise.py --device cpu --rounds 6 --workers 3 --json noise.json

On the H200 (``results/20261128-011342-cuda-full-h200-partial``) GPU-bound blocks were steady to
0.1-0.5% from round to round, while launch-bound ones (0.2-0.6 ms steps, about 13 ms blocks) moved
11-27% and the cuDNN RNNs' (one step a block) 8-15%, with eleven workers of 16 intra-op threads
each sharing 16 cores. This tool times one short launch-bound workload and one RNN as a paired
group times them, and varies each suspect alone against a base configuration:

* **base**: ``--workers`` (11) workers alive, every one taking its turn, one block each, in an
  order shuffled anew each round; torch's own thread count; no pinning; the profile's block
  (``block_seconds``); the one untimed step before each block (``warmup.TURN_STEPS``), a
  long step's block too (a group's turn takes none before a block that is one step of 0.1 s or
  more, ``warmup.LONG_STEP_SECONDS``: this row and (e) say whether a shorter one could go
  without it, as the H200's RNN block of one 21 ms step);
* **(a)** ``1 of 11 timed``: the same eleven alive with the workload built, only one takes turns
  (its blocks back to back, the ten others idle); ``1 alive``: the ten others have exited;
* **(b)** ``threads N``: ``torch.set_num_threads(N)`` in every worker (``--threads``, 1);
* **(c)** ``pinned``: each worker's threads on a core of its own (``os.sched_setaffinity``;
  worker i on the i-th core from the last, round robin where the workers outnumber the cores),
  torch's thread count unchanged;
* **(d)** ``blocks X ms``: blocks of ``--long-block`` seconds (0.075) instead of the profile's;
* **(e)** ``no untimed step``: no step before a block;
* **(b)+(c)** ``pinned, threads N``: the one combination, each worker on its own core with N
  threads (at 1, as many as it has cores there: a candidate cure, not a factor);
* ``base, again``: the base configuration once more after the others, to show how far the
  spread itself moves between two identical runs.

A configuration whose settings a group's workers would have from their start (threads, pinning,
block length; and ``base, again``) is prepared anew under them: built, warmed up and its block
sized as a group's worker would; the others (who takes turns, the untimed step) time the base
build.

**How it times like a group.** The workers are real paired workers: ``detbench.run.child.pair``
in fresh processes (``python -m detbench.worker.child``), spawned, started and asked through the
runner's own ``run.paired_workers.GroupWorkers`` with the runner's job (``run.jobs.worker_job``
and ``pair_job``) and environment (``worker_environment``, and on a CPU the group's
``paired.SPIN_ENV``); each prepares the workload (``worker.paired.PairedTiming.prepare``: build,
first step, warm-up, block size), times blocks on ``block`` (``PairedTiming.block``: the untimed
step, a sync, one sample by the pass's own sampler, CUDA events on a GPU), and frees it on
``finish``; the rounds' orders are ``run.paired.round_order``'s. The one addition is the job's
kind, ``launch_noise:pair_worker``: it runs ``child.pair`` unchanged, and takes one more line,
``noise {json}``, read before ``pair`` sees its next line and answered by nothing, that sets the
worker's torch threads, its untimed steps (``warmup.TURN_STEPS``), the ``block_seconds`` of its
next ``prepare`` and the cores its threads may run on. So the configurations share eleven
processes (a group's start-up on the H200 was 23 s).

Not reproduced: the other modes of a real group (every worker here runs the baseline's
settings: eleven A/A copies, whose steps are the same length, where the H200's group also held
the native RNN modes' 0.3-1.2 s steps), the verdict passes, and the adaptive stop (every
configuration takes ``--rounds`` rounds). A block's time is one sample (seconds per step, the
block's time over its steps); the spreads are over the blocks of one process.

The table, one row per (workload, configuration): steps a block, the median block (ms), the
processes timed and blocks each, the coefficient of variation of a process's blocks (median over
the processes, and the largest), the largest and the smallest block over that process's median
(median over the processes), the spread (sd) of the per-round log-ratio of each timed process to
the first (the A/A spread a cost's interval sees; where two or more take turns: a drift all the
processes share moves the blocks but not this), the share of the host's CPU that processes other
than the experiment's used during the rounds and the share the hypervisor gave to other guests
(steal; both ``detbench.worker.hostload.Probe``'s), and the configuration's wall seconds.
``--deadline`` (seconds from the start) skips the configurations that would not end before it,
estimated from the base build's step time; one that runs on past three times its estimate
stops after its third round, or between two turns past twice that or the deadline, its first
round done: the row says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The job's kind of the workers: ``child.pair`` behind a reader that takes ``noise`` lines.
KIND = "launch_noise:pair_worker"
#: One short launch-bound step (0.35 ms x 37 a block on the H200: 11-27% from round to round)
#: and one cuDNN RNN (21 ms, one step a block: 10-15%).
WORKLOADS = ("batchnorm/batchnorm1d_train_simclr_head", "rnn/rnn_tanh_2layer")
#: The messages of a worker's life take about this long each way (seconds, for the deadline's
#: estimate of a configuration: the H200's rounds had 2.5 ms a turn beside their steps).
TURN_OVERHEAD = 0.003
#: A configuration's rounds stop past this many times their estimate from the base build's step
#: (at least ``CAP_SECONDS``): a pathological one (two threads pinned on one core) shows its
#: blocks, not the whole budget.
CAP_FACTOR = 3.0
CAP_SECONDS = 10.0
#: The fewest rounds a configuration that has started takes, cap or deadline: a spread needs
#: a few blocks.
MIN_BLOCKS = 3


# --------------------------------------------------------------------------- the worker's side


class _NoiseLines:
    """The worker's stdin as ``child.pair`` reads it (``readline`` and iteration), with each
    ``noise {json}`` line applied by ``apply`` and passed over."""

    def __init__(self, raw: Any, apply: Callable[[dict[str, Any]], None]) -> None:
        self.raw, self.apply = raw, apply

    def readline(self) -> bytes:
        while True:
            line: bytes = self.raw.readline()
            if not line.startswith(b"noise "):
                return line
            self.apply(json.loads(line[len(b"noise ") :]))

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


class _Stdin:
    def __init__(self, buffer: _NoiseLines) -> None:
        self.buffer = buffer


def _pin(cores: Sequence[int]) -> None:
    """Every thread of this process on ``cores`` (threads started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), set(cores))
        except (ProcessLookupError, OSError):
            continue  # a thread that ended meanwhile


def pair_worker(job: dict[str, Any], out: Any) -> int:
    """A paired worker (``detbench.run.child.pair``, unchanged) that also takes ``noise`` lines:
    ``threads`` (0: torch's own count), ``turn_steps``, ``block_seconds`` (of the next
    ``prepare``), ``cores`` (empty: every core this process started with)."""
    import torch

    from detbench.run import child
    from detbench.worker import warmup

    threads = torch.get_num_threads()
    cores = sorted(os.sched_getaffinity(0))

    def apply(settings: dict[str, Any]) -> None:
        if "threads" in settings:
            torch.set_num_threads(int(settings["threads"]) or threads)
        if "turn_steps" in settings:
            warmup.TURN_STEPS = int(settings["turn_steps"])
        if "block_seconds" in settings:
            job["block_seconds"] = float(settings["block_seconds"])
        if "cores" in settings:
            _pin(settings["cores"] or cores)

    # Every block takes TURN_STEPS, a long step's too: "base" and "no untimed step" then say
    # whether a one-step block shorter than the paired turn's rule (``warmup.LONG_STEP_SECONDS``)
    # could go without it, as the H200's RNN block of one 21 ms step.
    warmup.LONG_STEP_SECONDS = math.inf
    sys.stdin = _Stdin(_NoiseLines(sys.stdin.buffer, apply))
    return child.pair(job, out)


# --------------------------------------------------------------------------- the runner's side


@dataclass
class Config:
    """One configuration: ``alive`` workers, the first ``timed`` of them taking turns."""

    name: str
    factor: str
    timed: int | None = None  # None: every worker alive
    threads: int = 0  # 0: torch's own count
    pinned: bool = False
    block_seconds: float | None = None  # None: the profile's
    turn_steps: int = 1
    alone: bool = False  # the other workers have exited
    #: Prepared anew under its settings (a group's workers would warm up and size their blocks
    #: under them), or timed on the base build.
    build: bool = True


@dataclass
class Row:
    workload: str
    config: Config
    step_ms: float = math.nan
    number: int = 0
    block_ms: float = math.nan
    processes: int = 0
    blocks: int = 0
    cv: float = math.nan
    cv_max: float = math.nan
    hi: float = math.nan
    lo: float = math.nan
    aa_sd: float = math.nan
    #: The share of the host's CPU time that processes other than the experiment's used while
    #: its rounds ran (``hostload.Probe``'s ``other_cpu_foreign``): another user's load.
    foreign: float = math.nan
    #: The share of the host's CPU time the hypervisor gave to other guests meanwhile (steal).
    steal: float = math.nan
    seconds: float = 0.0
    note: str = ""
    samples: dict[int, list[float]] = field(default_factory=dict)
    rounds: dict[int, list[int]] = field(default_factory=dict)


def configs(workers: int, threads: int, long_block: float) -> list[Config]:
    """The configurations: per workload, those on the base build in this order, then those with
    a build of their own; the ``alone`` ones last of all, once the other workers have exited."""
    return [
        Config("base", "-", build=False),
        Config(f"1 of {workers} timed", "(a)", timed=1, build=False),
        Config("no untimed step", "(e)", turn_steps=0, build=False),
        Config(f"threads {threads}", "(b)", threads=threads),
        Config(f"blocks {long_block * 1e3:g} ms", "(d)", block_seconds=long_block),
        Config(f"pinned, threads {threads}", "(b)+(c)", threads=threads, pinned=True),
        # Last but one: torch's threads on one core can make a step 100-200 times slower (the
        # 2-core VM), and its cap or the deadline then takes what is left from "base, again".
        Config("pinned", "(c)", pinned=True),
        Config("base, again", "-"),
        Config("1 alive", "(a)", timed=1, alone=True),
    ]


def spread(samples: Sequence[float]) -> tuple[float, float, float]:
    """(coefficient of variation, max / median, min / median) of one process's blocks."""
    if len(samples) < 2:
        return math.nan, math.nan, math.nan
    med = statistics.median(samples)
    return (
        statistics.stdev(samples) / statistics.fmean(samples),
        max(samples) / med,
        min(samples) / med,
    )


def summarise(row: Row) -> None:
    """The row's figures from its samples (seconds per step, per process) and rounds."""
    if row.samples:  # every block, also of a process stopped before its second
        row.step_ms = statistics.median(x for s in row.samples.values() for x in s) * 1e3
        row.block_ms = row.step_ms * row.number
    got = {i: s for i, s in row.samples.items() if len(s) >= 2}
    row.processes = len(got)
    if not got:
        return
    row.blocks = min(len(s) for s in got.values())
    each = [spread(s) for s in got.values()]
    row.cv = statistics.median(e[0] for e in each)
    row.cv_max = max(e[0] for e in each)
    row.hi = statistics.median(e[1] for e in each)
    row.lo = statistics.median(e[2] for e in each)
    first = min(got)
    base = dict(zip(row.rounds[first], got[first], strict=True))
    sds = []
    for i, s in got.items():
        if i == first:
            continue
        logs = [math.log(v / base[r]) for r, v in zip(row.rounds[i], s, strict=True) if r in base]
        if len(logs) >= 2:
            sds.append(statistics.stdev(logs))
    if sds:
        row.aa_sd = statistics.median(sds)


def host_facts(device: str, ready: dict[str, Any] | None) -> dict[str, Any]:
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    env = (ready or {}).get("device_env") or {}
    return {
        "utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "device": env.get("gpu_name") if device == "cuda" else cpu,
        "cpu": cpu,
        "torch": torch.__version__,
        "cuda": env.get("cuda_build"),
        "cudnn": env.get("cudnn_version"),
        "cores": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "torch_threads": env.get("num_threads"),
        "load": list(os.getloadavg()),
    }


class Experiment:
    """The group's workers and the configurations' rounds (module docstring)."""

    def __init__(self, args: argparse.Namespace, out: Path, stream: Any) -> None:
        from detbench.core.modes import DEFAULT_MODE
        from detbench.run.config import RunConfig, resolve_sources
        from detbench.run.jobs import pair_job, worker_environment, worker_job
        from detbench.run.paired import SPIN_ENV, PairedStats
        from detbench.run.paired_workers import GroupWorkers
        from detbench.run.supervise import Crew

        self.args, self.out, self.stream = args, out, stream
        self.t0 = time.perf_counter()
        profile = args.profile or ("full" if args.device == "cuda" else "quick")
        suites = sorted({k.split("/", 1)[0] for k in args.workload})
        self.c = RunConfig(
            out=out,
            suites=suites,
            only=list(args.workload),
            modes=[DEFAULT_MODE],
            replicates=1,
            profile=profile,
            device=args.device,
            seed=args.seed,
            rounds=args.rounds,
            timeout=args.timeout,
        )
        sources, _ = resolve_sources(self.c)
        lane = self.c.device_names[0]
        self.job = pair_job(
            self.c, worker_job(self.c, sources, None, DEFAULT_MODE, 0, lane, list(args.workload))
        )
        self.env, self.caches = worker_environment(self.c, DEFAULT_MODE, lane)
        if args.device == "cpu" and not any(
            k in self.env for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
        ):
            self.env.update(SPIN_ENV)  # as the paired phase gives its CPU workers
        self.env["PYTHONPATH"] = os.pathsep.join([str(TOOLS), self.env["PYTHONPATH"]])
        self.profile_block = float(self.c.setting("block_seconds"))
        self.ready: dict[str, Any] | None = None
        #: Each workload's step (seconds) as its first preparation measured it.
        self.step_seconds: dict[str, float] = {}
        (out / "logs").mkdir(parents=True, exist_ok=True)

        job, env = self.job, self.env

        class Workers(GroupWorkers):
            def spawn(self, member: Any, replicate: int) -> None:
                log = self.out / "logs" / f"worker{member.copy}.log"
                member.worker = self.crew.spawn(
                    self.python, {**job, "copy": member.copy}, dict(env), log, kind=KIND
                )
                self.stats.workers += 1

        def on_verdict(rec: dict[str, Any]) -> None:
            raise RuntimeError("a paired worker sent a verdict record nobody asked for")

        self.crew = Crew()
        self.stats = PairedStats()
        self.workers = Workers(
            out,
            self.c.python,
            self.crew,
            lambda mode, replicate: job,
            lambda mode: env,
            float(self.c.startup_timeout),
            args.timeout,
            self.stats,
            on_verdict,
        )
        self.workers.on_ready = self._on_ready

    def _on_ready(self, msg: dict[str, Any]) -> None:
        if self.ready is None:
            self.ready = msg

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    # ---- the members' work

    def noise(self, members: Sequence[Any], **settings: Any) -> None:
        for m in members:
            if m.worker is not None:
                m.worker.send("noise " + json.dumps(settings))

    def pin(self, members: Sequence[Any], on: bool) -> None:
        cores = sorted(os.sched_getaffinity(0), reverse=True)
        for i, m in enumerate(members):
            if m.worker is not None:
                m.worker.send(
                    "noise " + json.dumps({"cores": [cores[i % len(cores)]] if on else []})
                )

    def prepare(self, members: Sequence[Any], key: str) -> None:
        """Each member builds and warms up ``key``, one at a time, as a group's members do; the
        first preparation of ``key`` gives its step time (their median) to the estimates."""
        steps = []
        for m in members:
            m.prepared = None
            if m.worker is None:
                continue
            msg = self.workers.ask(m, f"prepare {key}", "prepared")
            if msg is not None and msg.get("status") == "ok":
                m.prepared = msg
                steps.append(float(msg["step_seconds"]))
            elif msg is not None:
                self.say(f"  worker {m.copy}: {key} {msg.get('status')}: {msg.get('message')}")
        if steps and key not in self.step_seconds:
            self.step_seconds[key] = statistics.median(steps)

    def finish(self, members: Sequence[Any]) -> None:
        for m in members:
            if m.worker is not None and m.prepared is not None:
                self.workers.ask(m, "finish", "timed")
            m.prepared = None

    def estimate(self, members: Sequence[Any], key: str, cfg: Config) -> float:
        """Seconds the rounds of ``cfg`` should take, from the step time the workers' first
        preparation of ``key`` measured (the base build's)."""
        step = self.step_seconds.get(key)
        if step is None:
            return 0.0
        timed = min(cfg.timed or len(members), len(members))
        block = cfg.block_seconds or self.profile_block
        turn = max(step, block) + cfg.turn_steps * step + TURN_OVERHEAD
        return self.args.rounds * timed * turn

    def rounds(self, members: Sequence[Any], key: str, cfg: Config, row: Row, cap: float) -> None:
        """``cfg``'s rounds: its timed members take turns, one block each, in the group's
        order. Stopped (the row says so) between two rounds past ``cap`` seconds once it has
        ``MIN_BLOCKS``; between two turns of any round but the first past twice ``cap`` or the
        deadline."""
        from detbench.run.paired import round_order

        timed = [m for m in members if m.prepared is not None][: cfg.timed or len(members)]
        if not timed:
            row.note = "no worker prepared the workload"
            return
        row.number = int(statistics.median(int(m.prepared["number_per_block"]) for m in timed))
        t0 = time.perf_counter()
        for index in range(self.args.rounds):
            spent = time.perf_counter() - t0
            if index >= MIN_BLOCKS and (spent > cap or self.elapsed() > self.args.deadline):
                row.note = f"stopped after {index} rounds ({spent:.0f} s)"
                break
            for i in round_order(self.args.seed, key, 0, index, len(timed)):
                spent = time.perf_counter() - t0
                if index and (spent > 2 * cap or self.elapsed() > self.args.deadline):
                    row.note = f"stopped in round {index + 1} ({spent:.0f} s)"
                    return
                m = timed[i]
                if m.worker is None or m.prepared is None:
                    continue
                msg = self.workers.ask(m, "block", "block")
                if msg is None or "error" in msg:
                    row.note = f"worker {m.copy}: {'lost' if msg is None else msg['error']}"
                    m.prepared = None
                    continue
                row.samples.setdefault(m.copy, []).append(float(msg["seconds"]))
                row.rounds.setdefault(m.copy, []).append(index)

    def run_config(self, members: Sequence[Any], key: str, cfg: Config, rows: list[Row]) -> None:
        """``cfg`` on ``key``: its settings, its own build where it needs one (``cfg.build``;
        otherwise the members hold the base build already), its rounds, the settings undone;
        or only its row's note where the deadline is too near."""
        from detbench.worker.hostload import Probe

        row = Row(key, cfg)
        rows.append(row)
        t0 = time.perf_counter()
        need = self.estimate(members, key, cfg)
        if self.elapsed() + need > self.args.deadline:
            row.note = f"not run: {need:.0f} s would pass the deadline of {self.args.deadline:g} s"
        else:
            if cfg.threads:
                self.noise(members, threads=cfg.threads)
            if cfg.block_seconds:
                self.noise(members, block_seconds=cfg.block_seconds)
            if cfg.turn_steps != 1:
                self.noise(members, turn_steps=cfg.turn_steps)
            if cfg.pinned:
                self.pin(members, True)
            try:
                if cfg.build:
                    self.prepare(members, key)
                probe = Probe("cpu", os.getpid())  # the workers are this process's children
                probe.start()
                self.rounds(members, key, cfg, row, cap=max(CAP_FACTOR * need, CAP_SECONDS))
                load = probe.stop()
                for name, key in (("foreign", "other_cpu_foreign"), ("steal", "steal")):
                    setattr(row, name, math.nan if load.get(key) is None else float(load[key]))
            finally:
                if cfg.build:
                    self.finish(members)
                if cfg.pinned:
                    self.pin(members, False)
                if cfg.turn_steps != 1:
                    self.noise(members, turn_steps=1)
                if cfg.threads or cfg.block_seconds:
                    self.noise(members, threads=0, block_seconds=self.profile_block)
            summarise(row)
        row.seconds = time.perf_counter() - t0
        self.say(format_row(row) + f"   [at {self.elapsed():.0f} s]")

    def run(self) -> list[Row]:
        from detbench.core.modes import DEFAULT_MODE
        from detbench.run.paired import Member

        a = self.args
        cfgs = configs(a.workers, a.threads, a.long_block)
        members = [Member(DEFAULT_MODE, i) for i in range(a.workers)]
        rows: list[Row] = []
        try:
            self.workers.start(members, 0)
            self.say(f"{a.workers} workers started in {self.elapsed():.1f} s")
            self.facts = host_facts(a.device, self.ready)
            for key in a.workload:
                # The base build first: the configurations without a build of their own time it.
                self.prepare(members, key)
                for cfg in (c for c in cfgs if not c.build and not c.alone):
                    self.run_config(members, key, cfg, rows)
                self.finish(members)
                for cfg in (c for c in cfgs if c.build and not c.alone):
                    self.run_config(members, key, cfg, rows)
            self.workers.end(members[1:])
            for key in a.workload:
                for cfg in (c for c in cfgs if c.alone):
                    self.run_config(members[:1], key, cfg, rows)
        except KeyboardInterrupt:
            self.say("interrupted: the rows so far")
            self.crew.halt()
        finally:
            self.workers.end(members)
            shutil.rmtree(self.caches, ignore_errors=True)
        return rows


# --------------------------------------------------------------------------- the table


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 100:.1f}%"


def _x(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


HEADER = (
    "| workload | factor | configuration | steps a block | block ms | processes x blocks | "
    "CV (median) | CV (largest) | max/median | min/median | A/A log-ratio sd | foreign CPU | "
    "steal | seconds |"
)


def format_row(row: Row) -> str:
    c = row.config
    block = "-" if math.isnan(row.block_ms) else f"{row.block_ms:.2f}"
    cells = [
        row.workload.split("/", 1)[1],
        c.factor,
        c.name,
        str(row.number or "-"),
        block,
        f"{row.processes} x {row.blocks}",
        _pct(row.cv),
        _pct(row.cv_max),
        _x(row.hi),
        _x(row.lo),
        _pct(row.aa_sd),
        _pct(row.foreign),
        _pct(row.steal),
        f"{row.seconds:.1f}",
    ]
    line = "| " + " | ".join(cells) + " |"
    return line + (f" {row.note}" if row.note else "")


def table(rows: Sequence[Row]) -> str:
    sep = "| " + " | ".join("---" for _ in HEADER.strip("|").split("|")) + " |"
    return "\n".join([HEADER, sep, *(format_row(r) for r in rows)])


def to_json(rows: Sequence[Row], facts: dict[str, Any], args: argparse.Namespace) -> Any:
    def clean(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {
        "facts": facts,
        "options": {k: v for k, v in vars(args).items() if k != "json"},
        "rows": [
            {
                "workload": r.workload,
                "configuration": r.config.name,
                "factor": r.config.factor,
                "steps_per_block": r.number,
                "step_ms": clean(r.step_ms),
                "block_ms": clean(r.block_ms),
                "processes": r.processes,
                "blocks": r.blocks,
                "cv_median": clean(r.cv),
                "cv_largest": clean(r.cv_max),
                "max_over_median": clean(r.hi),
                "min_over_median": clean(r.lo),
                "aa_log_ratio_sd": clean(r.aa_sd),
                "foreign_cpu": clean(r.foreign),
                "steal": clean(r.steal),
                "seconds": r.seconds,
                "note": r.note,
                "samples": {str(k): v for k, v in r.samples.items()},
                "rounds": {str(k): v for k, v in r.rounds.items()},
            }
            for r in rows
        ],
    }


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument(
        "--profile", choices=("quick", "full"), help="default: full on cuda, quick on cpu"
    )
    p.add_argument(
        "--workload", action="append", help=f"suite/name (default: {', '.join(WORKLOADS)})"
    )
    p.add_argument("--workers", type=int, default=11, help="a group's workers (default 11)")
    p.add_argument("--rounds", type=int, default=20, help="rounds a configuration (default 20)")
    p.add_argument("--threads", type=int, default=1, help="(b)'s torch threads (default 1)")
    p.add_argument("--long-block", type=float, default=0.075, help="(d)'s block seconds")
    p.add_argument("--deadline", type=float, default=200.0, help="seconds: skip what would pass it")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a worker may stay silent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="the workers' logs (default: a temporary folder)")
    p.add_argument("--json", type=Path, help="write every block's time and the table here")
    args = p.parse_args(argv)
    args.workload = args.workload or list(WORKLOADS)
    if args.workers < 2:
        p.error("--workers: at least 2 (a group, and one of it alone)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    stream = sys.stdout
    out = args.out or Path(tempfile.mkdtemp(prefix="launch-noise-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    exp = Experiment(args, out, stream)
    stream.write(
        f"launch noise: {args.device}, profile {exp.c.profile}, {args.workers} workers, "
        f"{args.rounds} rounds a configuration, workloads {', '.join(args.workload)}\n"
    )
    stream.write(HEADER + "\n")
    stream.flush()
    rows = exp.run()
    facts = getattr(exp, "facts", None) or host_facts(args.device, exp.ready)
    facts["load_start"] = list(load0)
    facts["load_end"] = list(os.getloadavg())
    wall = time.perf_counter() - t0
    facts["wall_seconds"] = wall
    stream.write(
        f"\n{facts['utc']}: device {args.device} ({facts['device']}), torch {facts['torch']}"
        + (f", CUDA {facts['cuda']}, cuDNN {facts['cudnn']}" if args.device == "cuda" else "")
        + f", {facts['cores']} cores (CPU {facts['cpu']}), torch threads {facts['torch_threads']}"
        + f", load {load0[0]:.2f} at the start, {facts['load_end'][0]:.2f} at the end\n\n"
    )
    stream.write(table(rows) + "\n")
    stream.write(f"\nwall time {wall:.1f} s\n")
    stream.flush()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_json(rows, facts, args), indent=1, default=str) + "\n")
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    return 0 if rows and all(r.processes for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
