"""Where the wall time of a run's call went (``run.runner`` counts it, ``cli.finish`` prints it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class RunStats:
    """Where the wall time of a run went (seconds)."""

    wall: float = 0.0
    startup_cpu: float = 0.0  # the workers' own start-up work, most of it overlapped
    build: float = 0.0
    fingerprint: float = 0.0
    count: float = 0.0  # the one step run under the FLOP counter
    invariance: float = 0.0  # the batch-invariance pass: built and stepped at every batch size
    cleanup: float = 0.0  # freeing a workload's objects (and CUDA cache) after it
    records: int = 0
    devices: int = 1  # side by side (--devices): the phase seconds above add up over them
    #: The plan's estimate of this run's wall time (seconds), where the run was given one.
    planned: float | None = None
    #: The paired phase's own figures (``paired.PairedStats``).
    paired: dict[str, Any] | None = None
    #: The probe worker's seconds before the run (``run.planprobe``), in ``wall``: the call's.
    probe: float = 0.0

    @property
    def other(self) -> float:
        """The rest of the wall time x devices (the phases add up over them); the records'
        phases ran inside the paired phase's wall where its groups made the verdicts."""
        paired = self.paired or {}
        inside = self.records_phases if paired.get("verdicts") else 0.0
        return (
            self.wall * self.devices
            - self.records_phases
            - (float(paired.get("wall") or 0.0) - inside)
            - self.probe
        )

    @property
    def records_phases(self) -> float:
        """The seconds of the records' own phases (build to clean-up)."""
        phases = ("build", "fingerprint", "count", "invariance", "cleanup")
        return sum(getattr(self, p) for p in phases)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "other": self.other}
