"""Where the wall time of a run went: the seconds of each phase of its records, its workers'
start-ups and exits, the paired phase's own figures and the probe's, summed over a call of the
run (``run.runner`` counts them; ``cli.finish`` prints them and env.json keeps them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from detbench.run.supervise import Turn


@dataclass
class RunStats:
    """Where the wall time of a run went (seconds)."""

    wall: float = 0.0
    startup: float = 0.0  # waiting for a worker to be ready: imports, mode, CUDA init
    startup_cpu: float = 0.0  # the workers' own start-up work, most of it overlapped
    build: float = 0.0
    fingerprint: float = 0.0
    count: float = 0.0  # the one step run under the FLOP counter
    timing: float = 0.0
    invariance: float = 0.0  # the batch-invariance pass: built and stepped at every batch size
    cleanup: float = 0.0  # freeing a workload's objects (and CUDA cache) after it
    shutdown: float = 0.0  # from a worker's last message to its exit (interpreter teardown)
    workers: int = 0
    records: int = 0
    devices: int = 1  # side by side (--devices): the phase seconds above add up over them
    stolen: int = 0  # slots a device took from another's queue
    timing_target_missed: int = 0  # records whose samples hit the budget before the target
    device_stage: float = 0.0  # the workers' device stage (CUDA init), after their go-ahead
    #: The plan's estimate of this run's wall time (seconds), where the run was given one.
    planned: float | None = None
    #: Per worker: its pid, (replicate, mode), and its device stage's start and end (epoch
    #: seconds): set against the records' timing windows, it shows that none overlapped.
    worker_stages: list[dict[str, Any]] = field(default_factory=list)
    #: The paired phase's own figures (``paired.PairedStats``), where the run had one.
    paired: dict[str, Any] | None = None
    #: The probe worker's seconds before the run (``run.costprobe``), in ``wall``: the call's.
    probe: float = 0.0

    @property
    def other(self) -> float:
        """The rest of the wall time; with devices side by side, of their device-seconds (wall
        x devices), since the phases add up over the devices."""
        paired = self.paired or {}
        # Where the paired phase made verdicts, their records' phases ran inside its wall time.
        inside = self.records_phases if paired.get("verdicts") else 0.0
        return (
            self.wall * self.devices
            - self.startup
            - self.records_phases
            - self.shutdown
            - (float(paired.get("wall") or 0.0) - inside)
            - self.probe
        )

    @property
    def records_phases(self) -> float:
        """The seconds of the records' own phases (build to clean-up)."""
        phases = ("build", "fingerprint", "count", "timing", "invariance", "cleanup")
        return sum(getattr(self, p) for p in phases)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "other": self.other}

    def add_turn(self, turn: Turn, replicate: int, mode: str) -> None:
        """Count a worker's turn: its waits and its device stage."""
        self.startup += turn.startup_wait
        self.shutdown += turn.shutdown
        if turn.stage is not None:
            start, end = turn.stage["device_stage"]
            self.device_stage += end - start
            self.worker_stages.append({"replicate": replicate, "mode": mode, **turn.stage})
