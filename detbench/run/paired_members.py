"""The members of a paired group (``run/paired.py``): who they are, the order of their turns,
what each measured of the workload in hand, and its line of ``paired.jsonl``."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.core.modes import DEFAULT_MODE, Mode
from detbench.run.schedule import clock
from detbench.run.supervise import WorkerProcess
from detbench.store.paired import PairedWriter
from detbench.store.results import utc_now
from detbench.worker.protocol import exit_description

if TYPE_CHECKING:
    from detbench.run.estimate import Estimate

#: A CPU worker's OpenMP threads spin this many times waiting for work before they sleep
#: (libgomp's ``GOMP_SPINCOUNT``; its default is 300,000, about 10 ms here). Measured on the
#: 2-core development VM (11 workers taking turns, a 512x512 float32 matmul, blocks against
#: ``blocked_autorange`` in the same workers, alternated): by default a block of 5 steps read
#: 1.69x and one of 1 step 2.20x the reference, the worker before it still spinning on the
#: cores; at 30,000 (about 1 ms) 0.99x and 1.00x. Within a step the gaps between parallel regions
#: are microseconds, so the step itself spins as before. A count the user set is kept.
SPIN_ENV = {"GOMP_SPINCOUNT": "30000"}


def baseline_of(modes: Iterable[Mode]) -> Mode:
    """The mode every cost is relative to: torch's default where the run has it, else its first
    mode (as ``analysis.labels.baseline_mode`` reads the records)."""
    modes = list(modes)
    return next((m for m in modes if m.name == DEFAULT_MODE.name), modes[0])


def round_order(seed: int, key: str, replicate: int, index: int, n: int) -> list[int]:
    """The order in which ``n`` workers take their turns in round ``index``: a permutation drawn
    from a generator of its own, seeded from SHA-256 of the run's seed and the round's name, so
    the same run plans the same rounds on every host and a resumed run repeats them. Index -1:
    the order in which the members other than the baseline's copy prepare."""
    name = f"{seed}|{key}|{replicate}|{index}"
    rng = random.Random(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big"))
    order = list(range(n))
    rng.shuffle(order)
    return order


@dataclass
class Member:
    """One worker of a group: its mode, its copy (1: the A/A second worker), its process, and
    what it measured of the workload in hand."""

    mode: Mode
    copy: int
    worker: WorkerProcess | None = None
    prepared: dict[str, Any] | None = None
    samples: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    references: list[float] = field(default_factory=list)
    reference_timer: str | None = None
    timed: dict[str, Any] | None = None  # the ``timed`` message, once finished
    subgroup: int = 0
    workers: int = 0  # members timed side by side in its subgroup
    failure: tuple[str, str] | None = None  # (status, message) of the workload in hand
    exit_code: int | None = None  # its worker's, where the worker died on it
    #: The mode whose worker times this one's computation on the device (``acts.timed_as``):
    #: set where that is another mode, which makes this member sit the rounds out.
    timed_as: str | None = None

    @property
    def label(self) -> str:
        return self.mode.name + (" (A/A copy)" if self.copy else "")

    def reset(self) -> None:
        self.prepared, self.failure, self.timed, self.reference_timer = None, None, None, None
        self.exit_code = None
        self.samples, self.rounds, self.positions, self.starts = [], [], [], []
        self.references, self.subgroup, self.workers = [], 0, 0

    def by_round(self) -> dict[int, float]:
        return dict(zip(self.rounds, self.samples, strict=True))


@dataclass
class PairedStats:
    """Where the paired phase's time went (seconds), for env.json's ``run_stats``: ``prepare``
    includes the verdict passes of the members that owed one (``verdicts`` of them), and
    ``rounds_taken`` counts the rounds the groups took (against ``rounds`` each at most)."""

    groups: int = 0
    workers: int = 0
    startup: float = 0.0
    prepare: float = 0.0
    rounds: float = 0.0
    finish: float = 0.0
    wall: float = 0.0
    verdicts: int = 0
    subgroups: int = 0
    rounds_taken: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def line_of(
    m: Member, key: str, replicate: int, recs: Mapping[tuple[str, str, int], Mapping[str, Any]]
) -> dict[str, Any]:
    """``m``'s line of ``paired.jsonl`` for ``key``: its samples and summary, or why it has
    none; ``recs``: the run's verdict records (its ``same_bits``)."""
    suite, name = key.split("/", 1)
    line: dict[str, Any] = {
        "suite": suite,
        "workload": name,
        "mode": m.mode.name,
        "replicate": replicate,
        "copy": m.copy,
        "workers": m.workers,
        "subgroup": m.subgroup,
        "utc": utc_now(),
    }
    timed = m.timed
    if m.prepared is not None and timed is not None and timed.get("timing"):
        p = m.prepared
        verdict = recs.get((key, m.mode.name, replicate)) or {}
        digest = (verdict.get("step_fingerprints") or [None])[0]
        line.update(
            status="ok",
            message=None,
            samples=m.samples,
            rounds=m.rounds,
            positions=m.positions,
            block_start=m.starts,
            number_per_block=p["number_per_block"],
            timing=timed["timing"],
            first_step_digest=p["first_step_digest"],
            same_bits=None if digest is None else digest == p["first_step_digest"],
            settings_changed=p.get("settings_changed") or [],
            worker_pid=m.worker.pid if m.worker is not None else None,
            footprint_bytes=p.get("footprint_bytes"),
            host_load=timed.get("host_load"),
        )
        if m.references:
            line.update(reference=m.references, reference_timer=m.reference_timer)
        return line
    status, message = m.failure or ("failed", "fewer than 6 blocks were timed")
    line.update(status=status, message=message, samples=m.samples, rounds=m.rounds)
    if status == "same_computation":
        line["timed_as"] = m.timed_as
    return line


def weights_of(estimate: Estimate, replicates: int) -> dict[str, float]:
    """Each group's weight for the time left: its workload's records in one replicate and a
    group's share of the paired phase's own seconds, as ``estimate`` prices them."""
    records: dict[str, float] = {}
    for _, costs in estimate.slot_costs.values():
        for k, cost in costs.items():
            records[k] = records.get(k, 0.0) + cost
    groups = max(1, (estimate.paired or {}).get("groups") or 1)
    share = estimate.paired_seconds / groups
    return {k: v / max(1, replicates) + share for k, v in records.items()}


def cudnn_off_timed(members_of: list[tuple[Mode, int]], timed_as: Mapping[str, str]) -> int:
    """How many of a group's members with cuDNN off take turns: the A/A copies and each mode
    timed as itself (``timed_as``: mode name -> the mode whose worker times its computation)."""
    return sum(
        1 for m, c in members_of if not m.cudnn_enabled and (c or timed_as[m.name] == m.name)
    )


def done_groups(
    lines: Iterable[Mapping[str, Any]], members_of: list[tuple[Mode, int]]
) -> set[tuple[str, int]]:
    """The (workload key, replicate) groups whose every member has a line in ``lines``."""
    done: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for line in lines:
        key = (f"{line['suite']}/{line['workload']}", int(line["replicate"]))
        done.setdefault(key, set()).add((line["mode"], int(line.get("copy", 0))))
    every = {(m.name, c) for m, c in members_of}
    return {k for k, got in done.items() if got >= every}


def not_timed(verdict: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(status, why) of a member that sits a workload out because its verdict record is missing
    or not ok; None where the record is ok."""
    if verdict is not None and verdict.get("status") == "ok":
        return None
    why = "no verdict record" if verdict is None else f"a verdict {verdict['status']}"
    return "not_timed", f"{why}: not timed"


def same_words(rep: str, device: str) -> tuple[str, str]:
    """(status, why) of a member that sits the rounds out: its mode runs the same computation as
    ``rep`` on ``device`` (``acts.timed_as``)."""
    return (
        "same_computation",
        f"the same computation as {rep} on {device} (the switches it changes act on nothing "
        f"here): timed as {rep}",
    )


def stop_words(failed: int, out: Path) -> str:
    """Why a run stops when its groups' workers do not start."""
    return (
        f"{failed} workers in a row did not start; stopping. Records kept in {out}; resume "
        f"with: detbench run --resume {out}"
    )


def time_left(
    weights: tuple[float, float],
    elapsed: float,
    startups: tuple[float, int, int],
    priced: bool = False,
) -> float | None:
    """Seconds left: the groups' time so far, start-ups apart, at the pace of the plan's seconds
    done (``weights`` = (planned, done)) for those left; plus, for each replicate's group still
    to start, a start-up as long as those so far (``startups`` = (seconds, started, in all)).
    Before a group is done, the plan's seconds less those spent where ``priced`` (the weights
    are the estimate's seconds, so the first line agrees with the plan line), else None."""
    (planned, spent), (startup, started, groups) = weights, startups
    if spent <= 0 or started <= 0:
        return max(0.0, planned - elapsed) if priced else None
    pace = max(0.0, elapsed - startup) / spent
    return pace * (planned - spent) + startup / started * (groups - started)


def group_line(
    verdicts: bool,
    count: tuple[int, int],
    replicate: tuple[int, int],
    key: str,
    workers: tuple[int, int],
    time: tuple[float, float | None],
) -> str:
    """The progress line of group ``count`` = (n, total) starting, which makes ``verdicts``
    or only costs: ``workers`` = (the group's workers, those of them that take turns);
    ``time`` = (elapsed, the seconds left, None where not known)."""
    (n, total), (r, replicates), (elapsed, left) = count, replicate, time
    started, turns = workers
    side = (
        f"{started} workers side by side"
        if turns == started
        else f"{started} workers, {turns} timed side by side"
    )
    width = len(str(total))
    rest = f" left ~{clock(left)}" if left is not None else ""
    what = "verdicts and costs" if verdicts else "costs"
    return (
        f"{what} [{n:>{width}}/{total}] replicate {r + 1}/{replicates} {key}: {side}  "
        f"elapsed {clock(elapsed)}{rest}\n"
    )


#: What the runner gives the phase for the verdicts it owes: ``store(record)`` writes one;
#: ``lost(key, mode, replicate, status, message, exit_code)`` makes the record of one a worker
#: took down with it.
Store = Callable[[dict[str, Any]], None]
Lost = Callable[[str, Mode, int, str, str, "int | None"], dict[str, Any]]


class Writer:
    """``PairedWriter`` as a context manager."""

    def __init__(self, out: Path) -> None:
        self.writer = PairedWriter(out)

    def __enter__(self) -> PairedWriter:
        return self.writer

    def __exit__(self, *exc: object) -> None:
        self.writer.close()


def lost_words(what: str, code: int | None, timeout: Any, status: str) -> tuple[str, str]:
    """(status, why) of a member whose worker is gone, in a verdict worker's words
    (``supervise.ending``): ``what`` it did ("was silent", "ended", ...), its exit ``code``."""
    if what == "was silent":
        return "timeout", f"exceeded the --timeout of {timeout:g} s; worker killed"
    if what == "ended":
        return status, f"worker {exit_description(code)} while running this workload"
    return status, f"the worker {what} ({exit_description(code)})"
