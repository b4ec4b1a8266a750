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

Devices (``--devices``): every slot is given a device before the run starts, in plan order: the
device that has run the fewest replicates of the slot's mode so far (replicates of one mode
spread over the devices, never stacked on one while another has none), then the one with the
least work (records) planned, then the lowest index. Each device runs its slots in plan order,
one worker at a time. A device whose queue is empty takes the last queued slot of the busiest
other device (work stealing), only where that leaves the slot's mode on as many devices as
before; the records say where each ran (``device_name``).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO

from detbench.core.modes import Mode
from detbench.run.config import RunError

if TYPE_CHECKING:
    from detbench.run.estimate import Estimate


@dataclass(frozen=True)
class Slot:
    """One worker's share of the run: one mode in one replicate, and its workloads in order."""

    replicate: int
    position: int  # the mode's place in this replicate's order
    mode: Mode
    keys: tuple[str, ...]
    lane: int = 0  # the index of the device that runs it, in the plan's devices


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
    #: How many devices run workers side by side (``--devices``); 1 without the option.
    lanes: int = 1

    @property
    def records(self) -> int:
        return sum(len(s.keys) for s in self.slots)

    def lane_slots(self, lane: int) -> list[Slot]:
        """The slots planned for device ``lane``, in the order it runs them."""
        return [s for s in self.slots if s.lane == lane]

    @property
    def workers(self) -> int:
        return len(self.slots)

    def order_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "replicates": [list(r) for r in self.order]}


#: (workload key, mode name, replicate) -> the device (index) its kept record ran on (a resumed
#: run).
Placed = Mapping[tuple[str, str, int], int]


class _Spread:
    """How many replicates of each (workload, mode) each device has run or is planned to run."""

    def __init__(self, lanes: int, placed: Placed | None) -> None:
        self.lanes = lanes
        self.n: dict[tuple[str, str], list[int]] = {}
        for (key, mode, _), lane in (placed or {}).items():
            if 0 <= lane < lanes:
                self._row((key, mode))[lane] += 1

    def _row(self, kk: tuple[str, str]) -> list[int]:
        return self.n.setdefault(kk, [0] * self.lanes)

    def _rows(self, keys: Sequence[str], mode: Mode) -> list[list[int]]:
        return [self._row((k, mode.name)) for k in keys]

    def stacked(self, keys: Sequence[str], mode: Mode, lane: int) -> int:
        """How many replicates of these (workload, mode) device ``lane`` already has."""
        return sum(row[lane] for row in self._rows(keys, mode))

    def move(self, keys: Sequence[str], mode: Mode, src: int | None, dst: int) -> None:
        for row in self._rows(keys, mode):
            if src is not None:
                row[src] -= 1
            row[dst] += 1

    def keeps_spread(self, slot: Slot, src: int, dst: int) -> bool:
        """Whether moving ``slot`` from device ``src`` to ``dst`` leaves each of its (workload,
        mode) on as many devices as before."""
        return not any(row[src] == 1 and row[dst] >= 1 for row in self._rows(slot.keys, slot.mode))


def make_plan(
    keys: Sequence[str],
    modes: Sequence[Mode],
    replicates: int,
    seed: int,
    done: set[tuple[str, str, int]] | frozenset[tuple[str, str, int]] = frozenset(),
    only_for: Mapping[str, Sequence[str]] | None = None,
    lanes: int = 1,
    placed: Placed | None = None,
    shard: tuple[int, int] | None = None,
    by_group: bool = False,
) -> Plan:
    """Every (replicate, mode) that still has a workload to measure, in run order; ``done`` holds
    the (workload, mode, replicate) records a resumed run already has. ``only_for`` limits a
    mode (by name) to some of the workloads (an attribution study's attention-backend variants
    run only on the workloads that use attention). ``lanes``: the devices that run workers side
    by side, each slot given one (see the module docstring); ``placed``: for a resumed run, the
    devices its kept records ran on: the rest of a replicate goes where it began when that
    stacks nothing, and the other replicates spread beside them. ``shard`` (K, N): only the
    (workload, replicate) groups ``shard_groups`` gives shard K of N (``run --shard K/N``) where
    ``by_group`` (a run with a paired phase), else the workers ``shard_slots`` gives it."""
    if shard is not None:
        full = make_plan(keys, modes, replicates, seed, only_for=only_for)
        if by_group:
            groups = shard_groups(full, shard)
            mine = {(k, m.name, r) for k, r in groups for m in modes}
        else:
            workers = shard_slots(full, shard)
            mine = {(k, name, r) for r, name in workers for k in keys}
        done = set(done) | {
            (k, m.name, r)
            for r in range(replicates)
            for m in modes
            for k in keys
            if (k, m.name, r) not in mine
        }
    order = mode_order(modes, replicates, seed)
    slots = []
    load = [0] * lanes  # records planned per device
    spread = _Spread(lanes, placed)
    began = {(mode, r): lane for (_, mode, r), lane in (placed or {}).items()}
    for r, modes_r in enumerate(order):
        for position, mode in enumerate(modes_r):
            allowed = None if only_for is None else only_for.get(mode.name)
            todo = tuple(
                k
                for k in keys
                if (k, mode.name, r) not in done and (allowed is None or k in allowed)
            )
            if todo:
                here = began.get((mode.name, r))
                lane = min(
                    range(lanes),
                    key=lambda d: (spread.stacked(todo, mode, d), d != here, load[d], d),
                )
                spread.move(todo, mode, None, lane)
                load[lane] += len(todo)
                slots.append(Slot(r, position, mode, todo, lane))
    return Plan(tuple(slots), tuple(tuple(m.name for m in r) for r in order), seed, lanes)


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard K/N``: (K, N), with 1 <= K <= N."""
    k, slash, n = text.partition("/")
    if not (slash and k.strip().isdigit() and n.strip().isdigit()) or not 1 <= int(k) <= int(n):
        raise RunError(f"--shard {text}: give K/N with 1 <= K <= N, e.g. --shard 1/4")
    return int(k), int(n)


def shard_slots(full: Plan, shard: tuple[int, int]) -> set[tuple[int, str]]:
    """The (replicate, mode) workers of shard K of N: the whole plan's workers (of a fresh run,
    whatever a resumed one has kept) dealt in plan order, each to the shard with the fewest
    records so far (ties: the lowest K). Whole workers, so every replicate stays a fresh process;
    the same options give every machine the same deal, and the N shards together are the plan."""
    k, n = shard
    if n > len(full.slots):
        raise RunError(
            f"--shard {k}/{n}: the plan has {len(full.slots)} workers, fewer than "
            f"{n} shards; give at most {len(full.slots)}"
        )
    load = [0] * n
    mine: set[tuple[int, str]] = set()
    for s in full.slots:
        i = min(range(n), key=lambda j: (load[j], j))
        load[i] += len(s.keys)
        if i == k - 1:
            mine.add((s.replicate, s.mode.name))
    return mine


def shard_groups(full: Plan, shard: tuple[int, int]) -> set[tuple[str, int]]:
    """The (workload, replicate) groups of shard K of N in a run with a paired phase, whose
    groups time a workload's modes side by side in one replicate: the whole plan's groups (of a
    fresh run) dealt in order, replicates outer and the workloads in the plan's order turned by
    one place each replicate, each to the shard with the fewest records so far (ties: the lowest
    K). Every record of a group is in one shard, so its modes are timed together and its
    verdicts made by its own workers; turning the order spreads a workload's replicates over the
    shards, so a shard lost costs each workload a replicate, not every replicate of some. The
    same options give every machine the same deal, and the N shards together are the plan."""
    k, n = shard
    sizes: dict[tuple[str, int], int] = {}
    for s in full.slots:
        for key in s.keys:
            sizes[(key, s.replicate)] = sizes.get((key, s.replicate), 0) + 1
    order: list[tuple[str, int]] = []
    for r in sorted({g[1] for g in sizes}):
        keys = [g for g in sizes if g[1] == r]
        order += keys[r % len(keys) :] + keys[: r % len(keys)]
    if n > len(order):
        raise RunError(
            f"--shard {k}/{n}: the plan has {len(order)} (workload, replicate) groups, fewer "
            f"than {n} shards; give at most {len(order)}"
        )
    load = [0] * n
    mine: set[tuple[str, int]] = set()
    for g in order:
        i = min(range(n), key=lambda j: (load[j], j))
        load[i] += sizes[g]
        if i == k - 1:
            mine.add(g)
    return mine


class LaneQueues:
    """The plan's slots queued per device while a run goes: each device takes its own in plan
    order, and one with none left steals (see the module docstring). Thread-safe: the devices'
    drivers take from it at the same time."""

    def __init__(self, plan: Plan, placed: Placed | None = None) -> None:
        self.lanes = plan.lanes
        self.queues = [deque(plan.lane_slots(d)) for d in range(plan.lanes)]
        self.spread = _Spread(plan.lanes, placed)
        for s in plan.slots:
            self.spread.move(s.keys, s.mode, None, s.lane)
        self.stolen = 0
        self._lock = threading.Lock()

    def take(self, lane: int) -> Slot | None:
        """Device ``lane``'s next slot: its own, else one stolen, else None (its work is done)."""
        with self._lock:
            if self.queues[lane]:
                return self.queues[lane].popleft()
            return self._steal(lane)

    def _steal(self, lane: int) -> Slot | None:
        def queued(d: int) -> int:
            return sum(len(s.keys) for s in self.queues[d])

        for d in sorted((d for d in range(self.lanes) if d != lane), key=lambda d: -queued(d)):
            for s in reversed(self.queues[d]):
                if not self.spread.keeps_spread(s, d, lane):
                    continue  # a (workload, mode) would lose device d and stack on this one
                self.queues[d].remove(s)
                self.spread.move(s.keys, s.mode, d, lane)
                self.stolen += 1
                return replace(s, lane=lane)
        return None


def clock(seconds: float) -> str:
    """``M:SS`` (or ``H:MM:SS``) for people."""
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


#: A thing the progress line prices: a worker's record, (worker, key), or what the worker costs
#: beyond its records, (worker, None); a worker is its (replicate, mode name).
Item = tuple[tuple[int, str], str | None]


class Progress:
    """One status line: which replicate, mode and workload runs, how far the run is, and the time
    left: the plan's estimate until the first record, then the estimate's own figures (``costs``:
    per worker, its start-up or wait and each record's seconds, ``Estimate.slot_costs``) scaled
    by how far the run has departed from them so far, so that the line starts where the plan
    line does and moves only as far as the run departs from the plan.

    The two parts of the plan are scaled apart, since they go wrong apart: a record's seconds by
    how long the records of its workload took against their estimate (every record of it so
    far, in the modes with cuDNN on, or off, as its mode, where the estimate prices the two
    apart; a workload not yet measured so, by the records of that kind so far), and a
    worker's own seconds by how long the run spent outside records (start-ups, waits, hand-overs)
    against the estimate's figure for the workers begun. Scaling everything by the time so far
    over the estimate of the work done, as the line once did, lets the first worker's start-up
    (seconds, against a record's fraction of one) multiply every record left: it read
    "left ~4:34:59" for a 37-minute run at its second record. With devices side by side the time
    left is the busiest device's. Without ``costs`` every record weighs the same."""

    def __init__(
        self,
        total: int,
        estimate: float | None = None,
        stream: TextIO = sys.stderr,
        costs: Mapping[tuple[int, str], tuple[float, Mapping[str, float]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        lanes: Mapping[tuple[int, str], int] | None = None,
        kinds: Mapping[tuple[int, str], bool] | None = None,
        after: float = 0.0,
        spent: float = 0.0,
        launched: frozenset[str] = frozenset(),
    ) -> None:
        self.total = total
        #: The workloads whose records are torchrun launches (the distributed ones): how far
        #: their records are off their figure scales them alone, never the records of a
        #: workload not yet measured. On the CPU matrix they are the verdict workers' first
        #: records: a run planned at 11:40 read "left ~9:52:03" at its second record.
        self.launched = launched
        #: Seconds the call spent before the plan's workers (its probe worker): in ``elapsed``
        #: and in ``estimate``, outside every worker's figure.
        self.spent = spent
        #: The estimate's seconds for what follows these records (the paired phase's costs),
        #: added unscaled in ``left``.
        self.after = after
        self.clock = clock
        self.done = 0
        self.estimate = estimate
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = clock() - spent
        self._width = 0
        #: (replicate, mode) -> the seconds the worker costs beyond its records, and per key
        #: the estimate's seconds for its record.
        self.planned = dict(costs or {})
        #: (replicate, mode) -> the device (index) it is planned on.
        self.lanes = dict(lanes or {})
        #: (replicate, mode) -> whether its mode runs cuDNN: the estimate prices a workload's
        #: records with cuDNN off apart (``estimate.record_cost``), so they are scaled apart.
        self.kinds = dict(kinds or {})
        priced: dict[str, dict[bool, set[float]]] = {}
        for slot, (_, records) in self.planned.items():
            for k, c in records.items():
                priced.setdefault(k, {}).setdefault(self.kinds.get(slot, True), set()).add(c)
        #: The workloads whose records the estimate prices apart with cuDNN on and off.
        self.split = {k for k, p in priced.items() if len(p) > 1 and p[True] != p[False]}
        self.started: set[tuple[int, str]] = set()
        self.finished: set[tuple[tuple[int, str], str]] = set()
        #: (key, kind) -> (measured seconds of its records so far, the estimate's for them).
        self.measured: dict[tuple[str, bool], tuple[float, float]] = {}
        self._began: dict[tuple[str | None, str], float] = {}
        self._slot: dict[str | None, tuple[int, str]] = {}

    @classmethod
    def for_plan(
        cls,
        plan: Plan,
        estimate: Estimate | float | None,
        stream: TextIO,
        launched: Iterable[str] = (),
    ) -> Progress:
        """The progress of ``plan`` along ``estimate`` (its seconds alone: records weigh alike);
        ``launched``: the keys of the workloads launched by torchrun."""
        if estimate is None or isinstance(estimate, int | float):
            return cls(plan.records, estimate, stream)
        lanes = {(s.replicate, s.mode.name): s.lane for s in plan.slots}
        kinds = {(s.replicate, s.mode.name): s.mode.cudnn_enabled for s in plan.slots}
        return cls(
            plan.records,
            estimate.seconds,
            stream,
            estimate.slot_costs,
            lanes=lanes,
            kinds=kinds,
            after=estimate.paired_seconds,
            spent=estimate.probe_seconds,
            launched=frozenset(launched),
        )

    def remaining(self, elapsed: float) -> dict[Item, float] | None:
        """The seconds each thing not yet done should take (see the class docstring); None
        before the first record, or without the estimate's figures."""
        if not (self.done and self.planned and self.measured):
            return None
        seen = self.measured.values()
        pooled: dict[bool, tuple[float, float]] = {}
        for (key, kind), (took_k, was_k) in self.measured.items():
            if key in self.launched:
                continue
            took, was = pooled.get(kind, (0.0, 0.0))
            pooled[kind] = (took + took_k, was + was_k)
        # A workload not yet measured: the ratio of the records of its kind so far; a cuDNN-off
        # record before any was measured keeps its own figure (the estimate prices those from
        # figures measured apart: how far the cuDNN records' are off says nothing of them; on
        # the published H100 run, conv records took 4-7x their figure with cuDNN, 1.3x without).
        scales = {kind: t / w if w > 0 else 1.0 for kind, (t, w) in pooled.items()}
        scales.setdefault(True, next(iter(scales.values())) if scales else 1.0)
        scales.setdefault(False, 1.0)
        # The time outside records so far (the records in flight are inside one) against the
        # estimate's figure for the workers begun.
        inside = self.spent + sum(m for m, _ in seen) + self._in_flight(elapsed)
        extra_planned = self._extras_begun()
        extra_scale = max(0.0, elapsed - inside) / extra_planned if extra_planned > 0 else 1.0
        out: dict[Item, float] = {}
        for slot, (extra, records) in self.planned.items():
            if slot not in self.started:
                out[(slot, None)] = extra * extra_scale
            kind = self.kinds.get(slot, True)
            for k, c in records.items():
                if (slot, k) not in self.finished:
                    kk = (k, kind or k not in self.split)
                    got = self.measured.get(kk)
                    out[(slot, k)] = c * (got[0] / got[1] if got and got[1] > 0 else scales[kk[1]])
        return out

    def _in_flight(self, elapsed: float) -> float:
        """Seconds so far of the records in flight."""
        return sum(elapsed - b for b in self._began.values())

    def _extras_begun(self) -> float:
        """The estimate's seconds beyond their records for the workers begun."""
        return sum(self.planned[s][0] for s in self.started if s in self.planned)

    def left(self, elapsed: float) -> float | None:
        todo = self.remaining(elapsed)
        if todo is not None:
            per_lane: dict[int, float] = {}
            for (slot, _), seconds in todo.items():
                lane = self.lanes.get(slot, 0)
                per_lane[lane] = per_lane.get(lane, 0.0) + seconds
            # The paired phase after the records: its figure as planned (priced for this host:
            # ``run.hostspeed``), and its own progress line rescales it from its first group on.
            # The verdict lanes' torchrun launches are no guide to it: on one core (``taskset``)
            # they ran 1.6x their figure and the groups 1.13x theirs, and a first record's ratio
            # once read "left ~47:09:46" for a CPU matrix planned at 20:13.
            return max(per_lane.values(), default=0.0) + self.after
        if self.done and not self.planned:
            return elapsed / self.done * (self.total - self.done)
        return None if self.estimate is None else max(0.0, self.estimate - elapsed)

    def show(
        self, slot: Slot, replicates: int, modes: int, workload: str, device: str | None = None
    ) -> None:
        """The line for ``workload`` starting; ``device``: where, when several run side by side
        (their lines interleave, each naming its device)."""
        elapsed = self.clock() - self.t0
        self._began[(device, workload)] = elapsed
        self._slot[device] = (slot.replicate, slot.mode.name)
        self.started.add(self._slot[device])
        left = self.left(elapsed)
        line = (
            f"[{self.done + 1:>{len(str(self.total))}}/{self.total} "
            f"{100 * self.done / max(1, self.total):3.0f}%] "
            + (f"{device} " if device else "")
            + f"replicate {slot.replicate + 1}/{replicates} mode {slot.position + 1}/{modes} "
            f"{slot.mode.name:<24} {workload}  elapsed {clock(elapsed)}"
            + (f" left ~{clock(left)}" if left is not None else "")
        )
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def advance(self, key: str | None = None, device: str | None = None) -> None:
        """A record of ``key`` came back (from ``device``, as ``show`` named it)."""
        self.done += 1
        slot = self._slot.get(device)
        if key is None or slot is None:
            return
        self.finished.add((slot, key))
        began = self._began.pop((device, key), None)
        planned = self.planned.get(slot, (0.0, {}))[1].get(key)
        if began is not None and planned is not None:
            kk = (key, self.kinds.get(slot, True) or key not in self.split)
            took, was = self.measured.get(kk, (0.0, 0.0))
            self.measured[kk] = (took + max(0.0, self.clock() - self.t0 - began), was + planned)

    def close(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
