"""Which (mode, replicate) runs in which worker, in what order, how long the run should take, and
how far it has got (the progress line).

The plan is fixed before the first worker starts, so ``--dry-run`` can print it without writing
anything, and a resumed run rebuilds the same order from the same seed.

Order: replicates are the outer loop, so every mode's replicates are spread over the whole run.
Within a replicate the modes run in a shuffled order, drawn from a generator seeded by the run's
``--seed`` (and recorded in env.json). With a fixed order, a machine that slows down for a minute
makes whichever modes always run at that point of a replicate look expensive; shuffled, the same
drift falls on different modes in each replicate and shows as spread between replicates instead of
a bias (the report shows that spread).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from detbench.modes import Mode

if TYPE_CHECKING:
    from detbench.runner import Runner

#: Seconds a record costs beyond its timing budget, per device and profile: building the workload,
#: its fingerprint steps, the FLOP count, warm-up and clean-up. CPU quick: from the published CPU
#: matrix of the version before (build, fingerprint, count and clean-up 0.02 s per record, plus
#: warm-up), set before the stopping rule existed and checked against later runs (README, "Plan
#: and estimate"). The others are guesses until a run measures them; on CUDA ``--dry-run`` says
#: so.
RECORD_OVERHEAD_SECONDS = {("cpu", "quick"): 0.035, ("cpu", "full"): 0.3,
                           ("cuda", "quick"): 0.05, ("cuda", "full"): 0.15}  # fmt: skip
#: The share of its budget a record spends sampling before the stopping rule ends it, on average
#: (records that reach their target early spend less). CPU: set from the matrix run before the
#: stopping rule existed, and checked since (README, "Plan and estimate"). CUDA: a guess until a
#: GPU run measures it: GPU kernel times are steady, so +-1% should often come within 6-16
#: samples of budget/50 each.
BUDGET_SHARE = {"cpu": 0.75, "cuda": 0.5}


@dataclass(frozen=True)
class Slot:
    """One worker's share of the run: one mode in one replicate, and its workloads in order."""

    replicate: int
    position: int  # the mode's place in this replicate's order
    mode: Mode
    keys: tuple[str, ...]


def mode_order(modes: Sequence[Mode], replicates: int, seed: int) -> list[list[Mode]]:
    """The modes of each replicate in run order: a seeded shuffle per replicate.

    Seeded with a string, which Python hashes with sha512 (not the per-process hash seed), so the
    same ``seed`` gives the same order in every process and on every machine."""
    rng = random.Random(f"detbench-mode-order-{seed}")
    order = []
    for _ in range(replicates):
        modes_r = list(modes)
        rng.shuffle(modes_r)
        order.append(modes_r)
    return order


@dataclass(frozen=True)
class Plan:
    slots: tuple[Slot, ...]
    # Mode names per replicate, in run order: every replicate's, also those a resumed run has.
    order: tuple[tuple[str, ...], ...]
    seed: int

    @property
    def records(self) -> int:
        return sum(len(s.keys) for s in self.slots)

    @property
    def workers(self) -> int:
        return len(self.slots)

    def order_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "replicates": [list(r) for r in self.order]}


def make_plan(
    keys: Sequence[str],
    modes: Sequence[Mode],
    replicates: int,
    seed: int,
    done: set[tuple[str, str, int]] | frozenset[tuple[str, str, int]] = frozenset(),
    only_for: Mapping[str, Sequence[str]] | None = None,
) -> Plan:
    """Every (replicate, mode) that still has a workload to measure, in run order; ``done`` holds
    the (workload, mode, replicate) records a resumed run already has. ``only_for`` limits a
    mode (by name) to some of the workloads (an attribution study's attention-backend variants
    run only on the workloads that use attention)."""
    order = mode_order(modes, replicates, seed)
    slots = []
    for r, modes_r in enumerate(order):
        for position, mode in enumerate(modes_r):
            allowed = None if only_for is None else only_for.get(mode.name)
            todo = tuple(
                k for k in keys
                if (k, mode.name, r) not in done and (allowed is None or k in allowed)
            )  # fmt: skip
            if todo:
                slots.append(Slot(r, position, mode, todo))
    return Plan(tuple(slots), tuple(tuple(m.name for m in r) for r in order), seed)


@dataclass(frozen=True)
class Estimate:
    """Seconds a plan should take: its records at the budget-based cost of one record, plus the
    start-up of the first worker, plus what each later worker's start-up (begun while the one
    before it measures) outlasts that worker's measuring: a worker with one or two workloads (an
    attribution study's attention-backend variants) is done before the next is ready."""

    records: int
    workers: int
    startup_seconds: float
    per_record_seconds: float
    measured_startup: bool
    #: Seconds of later workers' start-up not hidden behind the worker before them.
    startup_waits: float = 0.0
    #: Records whose step is compiled (execution=compile): their compile time is not estimated.
    compiled_records: int = 0

    @property
    def seconds(self) -> float:
        return self.startup_seconds + self.startup_waits + self.records * self.per_record_seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "workers": self.workers,
            "estimated_seconds": round(self.seconds, 1),
            "startup_seconds": round(self.startup_seconds, 3),
            "startup_measured": self.measured_startup,
            "per_record_seconds": round(self.per_record_seconds, 4),
            "startup_waits_seconds": round(self.startup_waits, 1),
            "compiled_records": self.compiled_records,
        }


def per_record_seconds(device: str, profile: str, budget: float) -> float:
    """The model's cost of one record: its overhead plus the expected share of its budget."""
    return RECORD_OVERHEAD_SECONDS[(device, profile)] + BUDGET_SHARE[device] * budget


def estimate(
    plan: Plan, device: str, profile: str, budget: float, startup_seconds: float, measured: bool
) -> Estimate:
    per_record = per_record_seconds(device, profile, budget)
    waits = sum(
        max(0.0, startup_seconds - len(before.keys) * per_record)
        for before in plan.slots[:-1]
    )  # fmt: skip
    return Estimate(
        records=plan.records,
        workers=plan.workers,
        startup_seconds=startup_seconds if plan.workers else 0.0,
        per_record_seconds=per_record,
        measured_startup=measured,
        startup_waits=waits,
        compiled_records=sum(
            len(s.keys) for s in plan.slots if s.mode.overrides.get("execution") == "compile"
        ),
    )


def describe_plan(runner: Runner, est: Estimate) -> tuple[dict[str, Any], list[str]]:
    """The plan of ``runner`` and its estimate: as JSON (``--dry-run --json``) and as lines."""
    from detbench.config import TARGET_REL

    c = runner.config
    budget, target = c.setting("budget"), TARGET_REL[c.device]
    doc = {
        **est.to_json(),
        "device": c.device,
        "profile": c.profile,
        "modes": [m.name for m in c.modes],
        "replicates": c.replicates,
        "workloads": [w.key for w in runner.workloads],
        "budget": budget,
        "target_rel": target,
        "fingerprint": c.fingerprint,
        "out": str(c.out),
        "mode_order": runner.plan.order_json(),
    }
    lines = [
        f"plan: {len(runner.workloads)} workloads x {len(c.modes)} modes x {c.replicates} "
        "replicates"
        + (f" ({len(runner.done)} records already kept)" if runner.done else "")
        + f" = {est.records} records in {est.workers} fresh workers",
        f"  device {c.device}, profile {c.profile}: fingerprint "
        f"{c.setting('fingerprint_steps')} steps (a workload may ask for more, {c.fingerprint}), "
        f"warm-up {c.setting('warmup_steps')} steps, timing until the median's 95% interval is "
        f"within +-{100 * target:g}% or {budget:g} s of samples",
        f"  estimated {clock(est.seconds)} ({est.seconds:.0f} s) = {est.records} records x "
        f"{est.per_record_seconds:.3f} s + {est.startup_seconds:.1f} s start-up of the first "
        f"worker ({'measured here' if est.measured_startup else 'assumed'}; each later worker "
        "starts while the one before it measures"
        + (
            f", and {est.startup_waits:.0f} s where a worker has too little to measure for the "
            "next one's start-up to hide behind it)"
            if est.startup_waits >= 0.5
            else ")"
        ),
    ]
    if est.compiled_records:
        lines.append(
            f"  plus the compile time of {est.compiled_records} records under execution=compile, "
            "not in the estimate (each worker compiles afresh: seconds to minutes per workload)"
        )
    if c.device == "cuda":
        lines.append("  (the per-record cost on a GPU is the model's, not yet measured on a GPU)")
    lines.append(f"  would write {c.out}; nothing was written (--dry-run)")
    return doc, lines


def clock(seconds: float) -> str:
    """``M:SS`` (or ``H:MM:SS``) for people."""
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """One status line: which replicate, mode and workload runs, how far the run is, and the time
    left: the plan's estimate until the first record, then the measured seconds per record."""

    def __init__(self, total: int, estimate: float | None = None, stream: TextIO = sys.stderr):
        self.total = total
        self.done = 0
        self.estimate = estimate
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self._width = 0

    def left(self, elapsed: float) -> float | None:
        if self.done:
            return elapsed / self.done * (self.total - self.done)
        return None if self.estimate is None else max(0.0, self.estimate - elapsed)

    def show(self, slot: Slot, replicates: int, modes: int, workload: str) -> None:
        elapsed = time.monotonic() - self.t0
        left = self.left(elapsed)
        line = (
            f"[{self.done + 1:>{len(str(self.total))}}/{self.total} "
            f"{100 * self.done / max(1, self.total):3.0f}%] replicate {slot.replicate + 1}/"
            f"{replicates} mode {slot.position + 1}/{modes} {slot.mode.name:<24} {workload}  "
            f"elapsed {clock(elapsed)}" + (f" left ~{clock(left)}" if left is not None else "")
        )
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def advance(self) -> None:
        self.done += 1

    def close(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
