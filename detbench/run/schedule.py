"""Which (mode, replicate) makes which verdicts, in what order, and on which device: the plan,
which the estimate reckons and the paired phase's verdicts follow (``Slot``, ``make_plan``), and
the shards of a plan (``--shard K/N``).

The plan is fixed before the first worker starts, so ``--dry-run`` can print it without writing
anything, and a resumed run rebuilds the same order from the same seed.

Order: replicates are the outer loop, so every mode's replicates are spread over the whole run.
Within a replicate the modes run in a shuffled order, drawn from a generator seeded by the run's
``--seed`` (and recorded in env.json). With a fixed order, a machine that slows down for a minute
makes whichever modes always run at that point of a replicate look expensive; shuffled, the same
drift falls on different modes in each replicate and shows as spread between replicates instead of
a bias (the report shows that spread).

Devices (``--devices``): every slot is given a device in plan order, for the estimate's share of
each device: the device that has run the fewest replicates of the slot's mode so far (replicates
of one mode spread over the devices, never stacked on one while another has none), then the one
with the least work (records) planned, then the lowest index.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detbench.core.modes import Mode
from detbench.run.config import RunError


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
    """Every (replicate, mode) that still has a workload to measure, in run order; ``done`` holds
    the (workload, mode, replicate) records a resumed run already has. ``only_for`` limits a
    mode (by name) to some of the workloads (an attribution study's attention-backend variants
    run only on the workloads that use attention). ``lanes``: the devices that run workers side
    by side, each slot given one (see the module docstring); ``placed``: for a resumed run, the
    devices its kept records ran on: the rest of a replicate goes where it began when that
    stacks nothing, and the other replicates spread beside them. ``shard`` (K, N): only the
    (workload, replicate) groups ``shard_groups`` gives shard K of N (``run --shard K/N``); where
    not ``by_group`` (the plan of an earlier detbench's run that timed nothing paired, read back),
    the workers ``shard_slots`` gives it."""
    if shard is not None:
        full = make_plan(keys, modes, replicates, seed, only_for=only_for)
        if by_group:
            groups = shard_groups(full, shard)
            mine = {(k, m.name, r) for k, r in groups for m in modes}
        else:  # an earlier detbench's shard of a run that timed nothing paired: its workers
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


def clock(seconds: float) -> str:
    """``M:SS`` (or ``H:MM:SS``) for people."""
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
