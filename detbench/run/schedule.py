"""Which (mode, replicate) makes which verdicts, in what order, and on which device (``Slot``,
``make_plan``), and the shards of a plan (``--shard K/N``). The plan is fixed before the first
worker starts, so ``--dry-run`` can print it and a resumed run rebuilds it from the same seed.

Order: replicates are the outer loop; within one the modes run in an order shuffled from
``--seed``. With a fixed order, a machine that slows down for a minute makes whichever modes run
at that point look expensive; shuffled, the drift shows as spread between replicates, not a bias.

Devices (``--devices``): every slot is given, in plan order, the device that has run the fewest
replicates of its mode so far, then the one with the least records planned, then the lowest index.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from detbench.core.modes import Mode
from detbench.run.config import RunError

_T = TypeVar("_T")


@dataclass(frozen=True)
class Slot:
    """One worker's share of the run: one mode in one replicate, and its workloads in order."""

    replicate: int
    position: int  # the mode's place in this replicate's order
    mode: Mode
    keys: tuple[str, ...]
    lane: int = 0  # the index of the device that runs it, in the plan's devices


def mode_order(modes: Sequence[Mode], replicates: int, seed: int) -> list[list[Mode]]:
    """The modes of each replicate in run order. Seeded with a string, which Python hashes with
    sha512 (not the per-process hash seed): the same order in every process and machine."""
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
    by_group: bool = True,
) -> Plan:
    """Every (replicate, mode) that still has a workload to measure, in run order, but the
    records ``done``. ``only_for``: per mode name, the only workloads it runs. ``placed``: the
    devices a resumed run's kept records ran on. ``shard`` (K, N): the groups ``shard_groups``
    gives shard K, or where not ``by_group`` (an earlier detbench's run that timed nothing
    paired) the workers ``shard_slots`` gives it."""
    if shard is not None:
        full = make_plan(keys, modes, replicates, seed, only_for=only_for)
        if by_group:
            mine = {(k, m.name, r) for k, r in shard_groups(full, shard) for m in modes}
        else:
            mine = {(k, name, r) for r, name in shard_slots(full, shard) for k in keys}
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
    # (workload, mode, device) -> the replicates that device has run or is planned to run.
    spread = Counter(
        (k, m, lane) for (k, m, _), lane in (placed or {}).items() if 0 <= lane < lanes
    )
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
                    key=lambda d: (
                        sum(spread[(k, mode.name, d)] for k in todo),
                        d != here,
                        load[d],
                        d,
                    ),
                )
                spread.update((k, mode.name, lane) for k in todo)
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
    """The (replicate, mode) workers of shard K of N: the fresh run's, dealt in plan order."""
    k, n = shard
    if n > len(full.slots):
        raise RunError(
            f"--shard {k}/{n}: the plan has {len(full.slots)} workers, fewer than "
            f"{n} shards; give at most {len(full.slots)}"
        )
    return _deal((((s.replicate, s.mode.name), len(s.keys)) for s in full.slots), shard)


def shard_groups(full: Plan, shard: tuple[int, int]) -> set[tuple[str, int]]:
    """The (workload, replicate) groups of shard K of N, dealt as ``shard_slots`` deals workers,
    whole groups so a group's modes are timed together. The workloads' order turns by one place
    each replicate, so a shard lost costs each workload a replicate, not every replicate of some."""
    k, n = shard
    sizes = Counter((key, s.replicate) for s in full.slots for key in s.keys)
    order: list[tuple[str, int]] = []
    for r in sorted({g[1] for g in sizes}):
        keys = [g for g in sizes if g[1] == r]
        order += keys[r % len(keys) :] + keys[: r % len(keys)]
    if n > len(order):
        raise RunError(
            f"--shard {k}/{n}: the plan has {len(order)} (workload, replicate) groups, fewer "
            f"than {n} shards; give at most {len(order)}"
        )
    return _deal(((g, sizes[g]) for g in order), shard)


def _deal(items: Iterable[tuple[_T, int]], shard: tuple[int, int]) -> set[_T]:
    """The items of shard K of N: each (item, records) dealt to the shard with the fewest records
    so far (ties: the lowest K)."""
    k, n = shard
    load = [0] * n
    mine: set[_T] = set()
    for item, size in items:
        i = min(range(n), key=lambda j: (load[j], j))
        load[i] += size
        if i == k - 1:
            mine.add(item)
    return mine


def clock(seconds: float) -> str:
    """``M:SS`` (or ``H:MM:SS``) for people."""
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
