"""How long a plan should take: the model behind ``--dry-run``, the plan line of every run and
the progress line's first guess: the records, torchrun launches, invariance passes, the paired
phase and the probe. The figures, and where each was measured, are in ``run/figures.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from detbench.core import settings as st
from detbench.run.slot_seconds import Probed, SlotSeconds, per_record_seconds

if TYPE_CHECKING:
    from detbench.core.modes import Mode
    from detbench.run.hostspeed import HostSpeed
    from detbench.run.paired_plan import PairedPlan
    from detbench.run.schedule import Plan, Slot


@dataclass(frozen=True)
class Estimate:
    """Seconds a plan should take, and what they are made of."""

    records: int
    workers: int
    startup_seconds: float
    per_record_seconds: float
    measured_startup: bool
    #: Records under execution=compile: their compile time is not estimated.
    compiled_records: int = 0
    #: Per device (``--devices``): its records; empty: one device.
    lane_records: tuple[int, ...] = ()
    #: Per device: torchrun launches, and the seconds of one.
    lane_launches: tuple[int, ...] = ()
    launch_seconds: float = 0.0
    #: Per device: the batch sizes its records' invariance passes build, and the seconds of one.
    lane_sizes: tuple[int, ...] = ()
    size_seconds: float = 0.0
    #: Per device: the seconds of its records; empty: records x ``per_record_seconds``.
    lane_record_seconds: tuple[float, ...] = ()
    #: Records known to be ``unsupported``, charged nothing; records at a measured or declared
    #: figure (JSON ``costed_records``, the name plans already written hold).
    unsupported_records: int = 0
    figure_records: int = 0
    #: "measured start-up" (a dry run's), "model" (a real run's), "paper" (CUDA, no GPU here).
    basis: str = "model"
    #: Records measured by a probe worker on this host (a user's own workloads).
    probed_records: int = 0
    #: Per slot (replicate, mode name): its seconds beyond its records, and each record's
    #: (``PairedPhase.weigh``, ``run.calls``).
    slot_seconds: Mapping[tuple[int, str], tuple[float, Mapping[str, float]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: The paired phase's seconds on paper and ``PairedPlan.to_json`` (None: no paired phase).
    paired_seconds: float = 0.0
    paired: dict[str, Any] | None = None
    #: Seconds of the probe worker (``run.planprobe``); 0: no probe measured a workload.
    probe_seconds: float = 0.0
    #: Records estimated from the run's own records of the same workload (a resumed run).
    own_records: int = 0
    #: ``run.hostspeed.HostSpeed.to_json``; None: the figures stand as measured (a GPU plan).
    host: dict[str, Any] | None = None
    #: Seconds the verdicts made side by side save (``PairedPlan.held_saving``).
    held_seconds: float = 0.0

    @property
    def record_seconds(self) -> float:
        if self.lane_record_seconds:
            return sum(self.lane_record_seconds)
        return self.records * self.per_record_seconds

    @property
    def invariance_seconds(self) -> float:
        return sum(self.lane_sizes) * self.size_seconds

    @property
    def launches(self) -> int:
        return sum(self.lane_launches)

    @property
    def lane_seconds(self) -> tuple[float, ...]:
        launches = self.lane_launches or (0,) * len(self.lane_records)
        sizes = self.lane_sizes or (0,) * len(self.lane_records)
        records = self.lane_record_seconds or tuple(
            n * self.per_record_seconds for n in self.lane_records
        )
        return tuple(
            c + k * self.launch_seconds + b * self.size_seconds
            for c, k, b in zip(records, launches, sizes, strict=True)
        )

    @property
    def seconds(self) -> float:
        """The run's seconds: with several devices side by side, the busiest device's."""
        if len(self.lane_records) > 1:
            return (
                self.probe_seconds
                + max(self.lane_seconds)
                + self.paired_seconds
                - self.held_seconds / len(self.lane_records)
            )
        return (
            self.probe_seconds
            + self.paired_seconds
            + self.record_seconds
            - self.held_seconds
            + self.launches * self.launch_seconds
            + self.invariance_seconds
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "workers": self.workers,
            "estimated_seconds": round(self.seconds, 1),
            "startup_seconds": round(self.startup_seconds, 3),
            "startup_measured": self.measured_startup,
            "per_record_seconds": round(self.per_record_seconds, 4),
            "compiled_records": self.compiled_records,
            "torchrun_launches": self.launches,
            "invariance_sizes": sum(self.lane_sizes),
            "invariance_seconds": round(self.invariance_seconds, 1),
            "record_seconds": round(self.record_seconds, 1),
            "unsupported_records": self.unsupported_records,
            "costed_records": self.figure_records,
            "probed_records": self.probed_records,
            "probe_seconds": round(self.probe_seconds, 1),
            "own_records": self.own_records,
            "estimate_basis": self.basis,
            "paired_seconds": round(self.paired_seconds, 1),
            "held_verdicts_saving": round(self.held_seconds, 1),
            "paired": self.paired,
            "host_speed": self.host,
            **(
                {"device_seconds": [round(x, 1) for x in self.lane_seconds]}
                if len(self.lane_records) > 1
                else {}
            ),
        }


def planned_unsupported(
    workloads: Sequence[Any], device: str, gpus: int
) -> Callable[[Mode, str], bool]:
    """Whether a record (mode, workload key) will be ``unsupported``, as far as a plan can know:
    a setting this torch lacks, undeclared autocast, or more ranks than ``gpus``."""
    by_key = {w.key: w for w in workloads}

    def unsupported(mode: Mode, key: str) -> bool:
        w = by_key.get(key)
        if any(st.get(n).unavailable() is not None for n, _ in mode.settings):
            return True
        if w is None:
            return False
        if mode.overrides.get("autocast", "off") != "off" and not w.autocast:
            return True
        if w.distributed and device == "cuda":
            world = mode.overrides.get("world_size") or st.world_size_default(device, gpus)
            return int(world) > gpus
        return False

    return unsupported


def _launches(
    lanes: list[list[Slot]], p: SlotSeconds, paired: PairedPlan | None, distributed: frozenset[str]
) -> tuple[int, ...]:
    """torchrun launches per device: one per worker with distributed workloads (with a fused
    paired phase: per member of a replicate's group, and its A/A copy)."""
    if paired is not None and paired.fused:
        slots = [s for ss in lanes for s in ss if distributed & set(p.runs(s))]
        n = len(slots) + len({s.replicate for s in slots})
        return (n,) + (0,) * (len(lanes) - 1)
    return tuple(sum(1 for s in ss if p.launches(s)) for ss in lanes)


def estimate(
    plan: Plan,
    device: str,
    profile: str,
    budget: float,
    startup_seconds: float,
    measured: bool,
    distributed: frozenset[str] = frozenset(),
    batch_sizes: Mapping[str, int] | None = None,
    unsupported: Callable[[Mode, str], bool] | None = None,
    basis: str | None = None,
    probed: Mapping[str, Probed] | None = None,
    paired: PairedPlan | None = None,
    cores: int | None = None,
    own: Mapping[str, Probed] | None = None,
    host: HostSpeed | None = None,
) -> Estimate:
    """The seconds of ``plan``. ``distributed``: on CUDA the launch's figure includes their
    records; ``probed``: measured by a probe here; ``own``: from a resumed run's records
    (``run.planprobe.own_seconds``), a probe's winning; ``host`` scales all but
    ``startup_seconds``, measured here."""
    speed = host.factor if host is not None else 1.0
    per_record = per_record_seconds(device, profile, budget)
    own = {k: v for k, v in (own or {}).items() if not probed or k not in probed}
    probed = {**own, **(probed or {})} or None
    p = SlotSeconds(
        device,
        profile,
        per_record,
        distributed,
        batch_sizes or {},
        unsupported or (lambda mode, key: False),
        probed,
        speed=speed,
    )
    lanes = [plan.lane_slots(d) for d in range(plan.lanes)]
    slot_seconds = {
        (s.replicate, s.mode.name): (p.sizes_seconds(s), {k: p.key_seconds(s, k) for k in s.keys})
        for ss in lanes
        for s in ss
    }
    return Estimate(
        records=plan.records,
        workers=plan.workers,
        startup_seconds=startup_seconds if plan.workers else 0.0,
        per_record_seconds=per_record,
        measured_startup=measured,
        compiled_records=sum(
            len(s.keys) for s in plan.slots if s.mode.overrides.get("execution") == "compile"
        ),
        lane_records=tuple(sum(len(s.keys) for s in ss) for ss in lanes),
        lane_launches=_launches(lanes, p, paired, distributed),
        launch_seconds=p.launch_seconds,
        lane_sizes=tuple(sum(p.slot_sizes(s) for s in ss) for ss in lanes),
        size_seconds=p.size_seconds,
        lane_record_seconds=tuple(p.records_seconds(ss) for ss in lanes),
        unsupported_records=sum(len(s.keys) - len(p.runs(s)) for s in plan.slots),
        figure_records=sum(p.with_figure(s) for s in plan.slots),
        basis=basis or ("measured start-up" if measured else "model"),
        probed_records=sum(
            1 for s in plan.slots for k in p.runs(s) if probed and k in probed and k not in own
        ),
        own_records=sum(1 for s in plan.slots for k in p.runs(s) if k in own),
        slot_seconds=slot_seconds,
        paired_seconds=0.0
        if paired is None
        else paired.seconds(device, profile, startup_seconds, cores, probed, speed),
        paired=None if paired is None else paired.to_json(),
        host=None if host is None else host.to_json(),
        held_seconds=0.0
        if paired is None
        else paired.held_saving(slot_seconds, device, profile, speed),
    )
