"""What the paired phase takes on paper (``run/paired.py``), for the plan's estimate: per
replicate, its group's start-up; per (workload, replicate), each member's preparation and its
rounds. The figures are in ``run/figures.py``.

The group's workers start all at once and share the host's cores, so a group of ``n`` workers on
``cores`` cores takes ``n / cores`` start-ups' time, one at least (docs/measured.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from detbench.run.figures import (
    CONVOLUTION_FREE,
    GROUP_START_SECONDS,
    PAIRED_BLOCK_STEP_SECONDS,
    PAIRED_PREPARE_SECONDS,
    PAIRED_ROUNDS_BY_SUITE,
    PAIRED_ROUNDS_TAKEN,
    PAIRED_TURN_SECONDS,
    REFERENCE_CHECK_SECONDS,
    SUITE_PREPARE_SECONDS,
    VERDICT_STEPS,
)
from detbench.run.hostspeed import cores as host_cores
from detbench.run.paired_rounds import MIN_ROUNDS
from detbench.worker.warmup import GROUP as WARMUP_GROUP
from detbench.worker.warmup import block_steps, turn_steps


def turn_of(block: float, step: float) -> float:
    """A member's turn on paper: the block, and the untimed step before it unless the block is
    one long step (``warmup.turn_steps``)."""
    number = max(1, round(block / step)) if step > 0 else 1
    return block + step * turn_steps(step, number)


@dataclass(frozen=True)
class PairedPlan:
    """The paired phase of a plan: the groups left, their workers, rounds and block."""

    groups: int
    replicates: int
    #: The groups' workload keys (SUITE/NAME), one per group.
    keys: tuple[str, ...]
    workers: int
    rounds: int
    block_seconds: float
    #: Whether the group's workers make the verdicts too: the A/A copy builds, the others warm up.
    fused: bool = False
    #: A member's warm-up ceiling: half the seconds its rounds sample, at most the budget.
    warmup: float = 0.0
    #: Verdicts and no costs (``detbench audit``): no A/A copy, no rounds.
    verdicts_only: bool = False
    #: How many of a group's workers run with cuDNN off (often far slower: their own figures).
    cudnn_off: int = 0
    #: How many of them take turns in the rounds (0: all; ``acts.timed_as``).
    timed: int = 0
    #: ``--reference-check`` seconds (``REFERENCE_CHECK_SECONDS``); 0: no check.
    reference: float = 0.0
    #: The timing budget (``--budget``, ``paired_rounds.most_rounds``); 0: the cap.
    budget: float = 0.0
    #: The devices that time groups side by side (``--devices``); CPU entries count as one.
    lanes: int = 1
    #: (mode, runs cuDNN) whose verdicts a group makes side by side (``PairedPhase.holds``); the
    #: ``autotuned`` only where the step calls no convolution (on paper: ``CONVOLUTION_FREE``);
    #: the ``baseline`` in every group of a workload but its first.
    held: tuple[tuple[str, bool], ...] = ()
    autotuned: tuple[tuple[str, bool], ...] = ()
    baseline: tuple[tuple[str, bool], ...] = ()

    @property
    def turns(self) -> int:
        return self.timed or self.workers

    def seconds(
        self,
        device: str,
        profile: str,
        startup: float,
        cores: int | None = None,
        probed: Mapping[str, Any] | None = None,
        speed: float = 1.0,
    ) -> float:
        """Seconds of the phase on paper (``startup``: one worker's). ``probed``: the workloads
        measured here, a member's preparation taken from their record. ``speed``
        (``run.hostspeed``) scales work, not a block, a time by design."""
        if not self.groups:
            return 0.0
        cores = cores or host_cores()
        group_start = startup * max(1.0, self.workers / cores)
        if device in GROUP_START_SECONDS:
            fixed, each = GROUP_START_SECONDS[device]
            group_start = max(group_start, fixed + each * self.workers)
        if self.verdicts_only:  # its verdicts are estimated with the records; nothing is timed
            return self.replicates * group_start
        prepare = PAIRED_PREPARE_SECONDS.get((device, profile), 0.1) * speed
        suites = {k: v * speed for k, v in SUITE_PREPARE_SECONDS.get((device, profile), {}).items()}
        measured = probed or {}

        def member(key: str) -> float:
            got = measured.get(key)
            if got is not None:
                return max(prepare, got.seconds - got.count)
            return suites.get(key.partition("/")[0], prepare)

        def step(key: str) -> float:
            return float(getattr(measured.get(key), "step", 0.0) or 0.0)

        timing = sum(
            self.rounds_seconds(key, device, profile, speed, step(key)) for key in self.keys
        )
        side = min(self.lanes, self.groups) if device == "cuda" else 1
        builds = sum(member(k) for k in self.keys)
        if self.fused:  # the A/A copy builds; the others warm the verdict's step up
            work = builds + sum(
                self.warm_ups(k, device, profile, speed, step(k)) for k in self.keys
            )
        else:
            work = self.workers * builds
        return self.replicates * group_start + (work + timing) / side

    def rounds_seconds(
        self, key: str, device: str, profile: str, speed: float = 1.0, step: float = 0.0
    ) -> float:
        """One group's rounds on paper, each a turn of every worker: from the suite's measured
        block and step, else the workload's ``step`` measured here (a block of whole steps, as
        many rounds as the budget fits), else the plan's block; plus the overhead."""
        suite = key.partition("/")[0]
        share = PAIRED_ROUNDS_BY_SUITE.get((device, profile), {}).get(
            suite, PAIRED_ROUNDS_TAKEN.get(device, 1.0)
        )
        rounds = max(float(MIN_ROUNDS), share * self.rounds)
        overhead = PAIRED_TURN_SECONDS.get(device, 0.001) * speed
        measured = self.suite_figures(suite, device, profile, speed)
        if measured is None and step > 0:
            block = step * block_steps(step, self.block_seconds)
            if self.budget > 0:
                rounds = max(float(MIN_ROUNDS), min(rounds, self.budget // block))
            turn = turn_of(block, step) + overhead + self.checked(device, block)
            return rounds * self.turns * turn
        if measured is None:
            return rounds * self.turns * (self.block_seconds + overhead + self.checked(device))
        on, off = measured
        turns = (self.turns - self.cudnn_off) * turn_of(*on) + self.cudnn_off * turn_of(*off)
        return rounds * (turns + self.turns * (overhead + self.checked(device, on[0])))

    def warm_ups(
        self, key: str, device: str, profile: str, speed: float = 1.0, step: float = 0.0
    ) -> float:
        """One group's warm-ups on paper, but the A/A copy's: each its ceiling (``warmup``), or
        ``WARMUP_GROUP`` steps where longer (``worker.warmup``); the step is the suite's where
        measured, else ``step``."""

        def one(step: float) -> float:
            return max(self.warmup, WARMUP_GROUP * step)

        members = self.turns - 1
        measured = self.suite_figures(key.partition("/")[0], device, profile, speed)
        if measured is None:
            return members * one(step)
        (_, on), (_, off) = measured
        return (members - self.cudnn_off) * one(on) + self.cudnn_off * one(off)

    def suite_figures(
        self, suite: str, device: str, profile: str, speed: float = 1.0
    ) -> tuple[tuple[float, float], tuple[float, float]] | None:
        """A member's (block, step) of ``suite`` with cuDNN on and off (off is on's where only on
        was measured) on this host (``here``); None where no run measured them."""
        steps = PAIRED_BLOCK_STEP_SECONDS.get((device, profile), {})
        if (suite, True) not in steps:
            return None
        on = steps[(suite, True)]
        return self.here(on, speed), self.here(steps.get((suite, False), on), speed)

    def held_saving(
        self,
        slot_seconds: Mapping[tuple[int, str], tuple[float, Mapping[str, float]]],
        device: str,
        profile: str,
        speed: float = 1.0,
    ) -> float:
        """Seconds the verdicts made side by side save on paper: per group, the held modes'
        records cost the slowest of them, or their ``VERDICT_STEPS`` steps one after another where
        longer (the GPU runs one process's kernels at a time)."""
        steps = PAIRED_BLOCK_STEP_SECONDS.get((device, profile), {})
        counts = VERDICT_STEPS.get((device, profile), {})
        names = {m for m, _ in self.held + self.autotuned + self.baseline}
        groups = {(r, k) for (r, m), (_, keys) in slot_seconds.items() if m in names for k in keys}
        saved = 0.0
        seen: set[str] = set()
        for replicate, key in sorted(groups):
            suite = key.partition("/")[0]
            held = self.held + (self.autotuned if key in CONVOLUTION_FREE else ())
            held += self.baseline if key in seen else ()
            seen.add(key)
            got = [
                (slot_seconds[(replicate, m)][1][key], cudnn)
                for m, cudnn in held
                if key in slot_seconds.get((replicate, m), (0.0, {}))[1]
            ]
            if len(got) < 2 or (suite, True) not in steps or suite not in counts:
                continue
            work = sum(
                min(s, counts[suite] * steps.get((suite, cudnn), steps[(suite, True)])[1] * speed)
                for s, cudnn in got
            )
            saved += sum(s for s, _ in got) - max(max(s for s, _ in got), work)
        return saved

    def here(self, measured: tuple[float, float], speed: float) -> tuple[float, float]:
        """A measured (block, step) on a host ``speed`` times as slow: the step scales; the block
        only where the step outlasts its size."""
        block, step = measured
        if speed == 1.0:
            return block, step
        size = self.block_seconds
        return block * max(size, step * speed) / max(size, step), step * speed

    def checked(self, device: str, block: float | None = None) -> float:
        """Seconds of one member's reference timing after a round (``REFERENCE_CHECK_SECONDS``)."""
        if self.reference <= 0:
            return 0.0
        share, blocks = REFERENCE_CHECK_SECONDS.get(device, (1.0, 1.0))
        return max(share * self.reference, blocks * (block or self.block_seconds))

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "replicates": self.replicates,
            "workers_per_group": self.workers,
            "timed_per_group": self.turns,
            "rounds": self.rounds,
            "block_seconds": self.block_seconds,
            "fused": self.fused,
            "verdicts_only": self.verdicts_only,
            "cudnn_off": self.cudnn_off,
            "devices": self.lanes,
        }
