"""How long a plan should take: the cost model behind ``--dry-run``, the plan line of every run
and the progress line's first guess. Every record costs its overhead plus the expected share of
its timing budget; the first worker's start-up (measured by a dry run) and what later workers'
start-ups cannot hide are added, and so are torchrun launches and invariance passes. Each
constant says where its value was measured, or that it is a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from detbench.run.schedule import Plan, Slot

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
#: Seconds of one torchrun launch, per device: a worker with distributed workloads makes one
#: (``detbench.distributed.launch``), whose ranks each import torch and join the process group. CPU:
#: 4.9-5.3 s per launch of 2 gloo ranks running the distributed suite, measured on the 2-core VM
#: (README, "Distributed"). CUDA: a guess (NCCL's initialisation, a CUDA context per rank) until
#: a GPU run measures it.
LAUNCH_SECONDS = {"cpu": 5.0, "cuda": 10.0}
#: Seconds of the batch-invariance pass per declared batch size of a record (a build and one
#: step at that size). CPU quick: 54 s over the 3960 sizes of the invariance suite's 750
#: records, measured on the 2-core VM (results/20261124-024157-cpu-quick-invariance). The
#: others are guesses until a run measures them.
INVARIANCE_SECONDS_PER_SIZE = {("cpu", "quick"): 0.014, ("cpu", "full"): 0.1,
                               ("cuda", "quick"): 0.01, ("cuda", "full"): 0.05}  # fmt: skip


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
    #: Per device (``--devices``): its records and its start-up waits; empty: one device.
    lane_records: tuple[int, ...] = ()
    lane_waits: tuple[float, ...] = ()
    #: torchrun launches (one per worker with distributed workloads), per device, and the
    #: seconds of one.
    lane_launches: tuple[int, ...] = ()
    launch_seconds: float = 0.0
    #: Per device: the batch sizes its records' invariance passes build, and the seconds of one.
    lane_sizes: tuple[int, ...] = ()
    size_seconds: float = 0.0

    @property
    def invariance_seconds(self) -> float:
        return sum(self.lane_sizes) * self.size_seconds

    @property
    def launches(self) -> int:
        return sum(self.lane_launches)

    @property
    def lane_seconds(self) -> tuple[float, ...]:
        """Each device's share: its records, its waits and the start-up of its first worker."""
        launches = self.lane_launches or (0,) * len(self.lane_records)
        sizes = self.lane_sizes or (0,) * len(self.lane_records)
        return tuple(
            (self.startup_seconds if n else 0.0) + w + n * self.per_record_seconds
            + k * self.launch_seconds + b * self.size_seconds
            for n, w, k, b in zip(self.lane_records, self.lane_waits, launches, sizes, strict=True)
        )  # fmt: skip

    @property
    def seconds(self) -> float:
        """The run's seconds: with several devices side by side, the busiest device's."""
        if len(self.lane_records) > 1:
            return max(self.lane_seconds)
        return (
            self.startup_seconds + self.startup_waits + self.records * self.per_record_seconds
            + self.launches * self.launch_seconds + self.invariance_seconds
        )  # fmt: skip

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
            "torchrun_launches": self.launches,
            "invariance_sizes": sum(self.lane_sizes),
            "invariance_seconds": round(self.invariance_seconds, 1),
            **(
                {"device_seconds": [round(x, 1) for x in self.lane_seconds]}
                if len(self.lane_records) > 1
                else {}
            ),
        }


def per_record_seconds(device: str, profile: str, budget: float) -> float:
    """The model's cost of one record: its overhead plus the expected share of its budget."""
    return RECORD_OVERHEAD_SECONDS[(device, profile)] + BUDGET_SHARE[device] * budget


def estimate(
    plan: Plan,
    device: str,
    profile: str,
    budget: float,
    startup_seconds: float,
    measured: bool,
    distributed: frozenset[str] = frozenset(),
    batch_sizes: Mapping[str, int] | None = None,
) -> Estimate:
    """``distributed``: the keys of the plan's distributed workloads (each worker that has any
    makes one torchrun launch). ``batch_sizes``: per workload key that declares batch sizes,
    how many (each of its records builds and steps it at every one)."""
    sizes = batch_sizes or {}
    per_record = per_record_seconds(device, profile, budget)

    def waits(slots: Sequence[Slot]) -> float:
        return sum(max(0.0, startup_seconds - len(before.keys) * per_record)
                   for before in slots[:-1])  # fmt: skip

    lanes = [plan.lane_slots(d) for d in range(plan.lanes)]
    return Estimate(
        records=plan.records,
        workers=plan.workers,
        startup_seconds=startup_seconds if plan.workers else 0.0,
        per_record_seconds=per_record,
        measured_startup=measured,
        startup_waits=waits(plan.slots) if plan.lanes == 1 else max(map(waits, lanes)),
        compiled_records=sum(
            len(s.keys) for s in plan.slots if s.mode.overrides.get("execution") == "compile"
        ),
        lane_records=tuple(sum(len(s.keys) for s in ss) for ss in lanes),
        lane_waits=tuple(waits(ss) for ss in lanes),
        lane_launches=tuple(sum(1 for s in ss if distributed & set(s.keys)) for ss in lanes),
        launch_seconds=LAUNCH_SECONDS.get(device, 0.0),
        lane_sizes=tuple(sum(sizes.get(k, 0) for s in ss for k in s.keys) for ss in lanes),
        size_seconds=INVARIANCE_SECONDS_PER_SIZE.get((device, profile), 0.0),
    )
