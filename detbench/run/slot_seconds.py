"""The seconds each slot of a plan takes on one device and profile (``SlotSeconds``): the
estimate's arithmetic per worker and per record. The figures are in ``run/figures.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from detbench.run.figures import (
    BUDGET_SHARE,
    INVARIANCE_SECONDS_PER_SIZE,
    LAUNCH_SECONDS,
    NO_CUDNN_RECORD_SECONDS,
    RECORD_OVERHEAD_SECONDS,
    SUITE_RECORD_SECONDS,
    VERDICT_RECORD_SECONDS,
    WARMUP_SHARE,
    WORKLOAD_RECORD_SECONDS,
)

if TYPE_CHECKING:
    from detbench.core.modes import Mode
    from detbench.run.schedule import Slot


def timing_seconds(device: str, budget: float) -> float:
    """Seconds the model's figures hold for a record's timing pass (warm-up and samples): a
    verdict record, which has none, is estimated at a figure less this (``record_seconds``)."""
    return (BUDGET_SHARE[device] + WARMUP_SHARE[device]) * budget


def per_record_seconds(device: str, profile: str, budget: float) -> float:
    """The model's seconds of one record: its overhead and its timing pass (``timing_seconds``)."""
    return RECORD_OVERHEAD_SECONDS[(device, profile)] + timing_seconds(device, budget)


@dataclass(frozen=True)
class Probed:
    """A workload measured on this host (``run.planprobe``): one record's phases summed, and its
    FLOP count (a run counts FLOPs in its first replicate only)."""

    seconds: float
    count: float = 0.0
    #: Its step's seconds (0: not known): a long step sets the seconds of its group's turns.
    step: float = 0.0

    def record(self, replicate: int) -> float:
        return self.seconds - (self.count if replicate else 0.0)

    @classmethod
    def of(cls, rec: Mapping[str, Any]) -> Probed:
        phases = {k: float(v or 0.0) for k, v in (rec.get("phases") or {}).items()}
        return cls(sum(phases.values()), phases.get("count", 0.0), step_seconds(rec))


def step_seconds(rec: Mapping[str, Any]) -> float:
    """A record's step, in seconds: its timing median, else its fingerprint steps' but the first
    (which carries the one-offs), else its first step; 0 where it shows none."""
    median = (rec.get("timing") or {}).get("median")
    if median:
        return float(median)
    first = float(rec.get("first_step_seconds") or 0.0)
    steps = len(rec.get("step_fingerprints") or [])
    fingerprint = float((rec.get("phases") or {}).get("fingerprint") or 0.0)
    if steps >= 2 and fingerprint > first > 0:
        return (fingerprint - first) / (steps - 1)
    return first


def record_seconds(
    key: str,
    device: str,
    profile: str,
    per_record: float,
    cudnn: bool = True,
    probed: Mapping[str, Probed] | None = None,
    replicate: int = 0,
    speed: float = 1.0,
) -> tuple[float, bool]:
    """Seconds of one record of ``key``, and whether the figure is measured (not ``per_record``).
    A figure measured with a timing pass is taken less the model's timing, at least a third of
    it; ``speed`` scales all but a probe's record, measured here."""
    if probed and key in probed:
        return probed[key].record(replicate), True
    budget_timing = timing_seconds(device, _budget(per_record, device, profile))

    def untimed(figure: float) -> float:
        return max(figure / 3, figure - budget_timing) * speed

    own = WORKLOAD_RECORD_SECONDS.get((device, profile), {})
    if key in own:
        return untimed(own[key]), True
    suite = key.partition("/")[0]
    verdict = VERDICT_RECORD_SECONDS.get((device, profile, cudnn), {})
    if suite in verdict:
        return verdict[suite] * speed, True
    native = NO_CUDNN_RECORD_SECONDS.get((device, profile), {})
    if not cudnn and suite in native:
        return untimed(native[suite]), True
    suites = SUITE_RECORD_SECONDS.get((device, profile), {})
    if suite in suites:
        return untimed(suites[suite]), True
    return untimed(per_record), False


def _budget(per_record: float, device: str, profile: str) -> float:
    """The budget ``per_record`` was estimated with (``per_record_seconds``'s inverse)."""
    share = BUDGET_SHARE[device] + WARMUP_SHARE[device]
    return max(0.0, per_record - RECORD_OVERHEAD_SECONDS[(device, profile)]) / share


@dataclass(frozen=True)
class SlotSeconds:
    """The seconds each slot of a plan takes on one device and profile (module docstring)."""

    device: str
    profile: str
    per_record: float
    distributed: frozenset[str]
    sizes: Mapping[str, int]
    skip: Callable[[Mode, str], bool]
    probed: Mapping[str, Probed] | None
    speed: float = 1.0

    @property
    def own(self) -> Mapping[str, Any]:
        """The workloads whose own figure includes their invariance pass."""
        return {
            **WORKLOAD_RECORD_SECONDS.get((self.device, self.profile), {}),
            **(self.probed or {}),
        }

    def runs(self, s: Slot) -> list[str]:
        return [k for k in s.keys if not self.skip(s.mode, k)]

    def key_seconds(self, s: Slot, k: str) -> float:
        if self.skip(s.mode, k) or (k in self.distributed and self.device == "cuda"):
            return 0.0  # unsupported, or in the launch's measured figure
        return record_seconds(
            k,
            self.device,
            self.profile,
            self.per_record,
            s.mode.cudnn_enabled,
            self.probed,
            s.replicate,
            self.speed,
        )[0]

    def records_seconds(self, slots: Sequence[Slot]) -> float:
        return sum(self.key_seconds(s, k) for s in slots for k in s.keys)

    def with_figure(self, s: Slot) -> int:
        return sum(
            1
            for k in self.runs(s)
            if record_seconds(k, self.device, self.profile, self.per_record, True, self.probed)[1]
        )

    def launches(self, s: Slot) -> bool:
        return bool(self.distributed & set(self.runs(s)))

    def slot_sizes(self, s: Slot) -> int:
        """The batch sizes the invariance passes of slot ``s``'s records build."""
        own = self.own
        return sum(self.sizes.get(k, 0) for k in self.runs(s) if k not in own)

    def sizes_seconds(self, s: Slot) -> float:
        """The seconds of slot ``s``'s invariance passes."""
        return self.size_seconds * self.slot_sizes(s)

    @property
    def size_seconds(self) -> float:
        return INVARIANCE_SECONDS_PER_SIZE.get((self.device, self.profile), 0.0) * self.speed

    @property
    def launch_seconds(self) -> float:
        return LAUNCH_SECONDS.get(self.device, 0.0) * self.speed
