"""Whether a run's timings can be cited: three checks of the lines of its ``paired.jsonl``, which
``tools/timing_check.py DIR`` prints as PASS or FAIL lines: (i) no worker's block began before
another's had ended, (ii) no worker's first workload drifts more than ``DRIFT``, (iii) enough of
the 5-100 ms steps reach their target. A check with nothing to read fails: "0 of 0" proves
nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The most a worker's first workload may drift (first quarter of its samples against the last).
DRIFT = 0.01
#: The share of the records with 5-100 ms steps that must reach the target.
REACHED = 0.90
#: The steps (seconds) check (iii) is about.
STEPS = (0.005, 0.100)


@dataclass(frozen=True)
class TimingCheck:
    """One check's verdict and its sentence."""

    name: str
    passed: bool
    text: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} ({self.name}) {self.text}"


def _ok(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("status") == "ok" and isinstance(r.get("timing"), Mapping)]


def blocks(line: Mapping[str, Any]) -> list[tuple[float, float]]:
    """The (start, end) epoch seconds of each block a paired line timed."""
    n = int(line.get("number_per_block") or 1)
    starts, samples = line.get("block_start") or [], line.get("samples") or []
    return [(float(a), float(a) + n * float(x)) for a, x in zip(starts, samples, strict=False)]


#: Seconds two blocks may seem to overlap by the clocks' disagreement alone: a block's start is
#: read by the wall clock and its length by ``perf_counter``, a few microseconds apart.
SLACK = 1e-4


def overlaps(lines: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(blocks of ``lines`` begun over ``SLACK`` before another line's block ended, blocks)."""
    spans = sorted((a, b, i) for i, line in enumerate(lines) for a, b in blocks(line))
    count, end, owner = 0, float("-inf"), -1
    for a, b, i in spans:
        if a < end - SLACK and i != owner:
            count += 1
        if b > end:
            end, owner = b, i
    return count, len(spans)


def check_turns(lines: list[Mapping[str, Any]]) -> TimingCheck:
    """Check (i) of a paired run: its workers' blocks never overlapped."""
    count, total = overlaps(lines)
    text = (
        f"no timing shared with detbench's own workers: {count} of {total} blocks of "
        f"{len(lines)} paired lines began before another worker's block had ended"
    )
    return TimingCheck("i", total > 0 and count == 0, text)


def drift(rec: Mapping[str, Any]) -> float | None:
    """The relative drift from the first quarter of ``rec``'s samples to the last (median)."""
    samples = [float(x) for x in rec["timing"].get("samples") or []]
    q = len(samples) // 4
    if q < 1:
        return None
    first, last = statistics.median(samples[:q]), statistics.median(samples[-q:])
    return abs(first / last - 1.0) if last > 0 else None


def first_of_each_worker(lines: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first line of each worker (``worker_pid`` in a replicate), in the file's order."""
    seen: set[tuple[Any, ...]] = set()
    firsts = []
    for r in lines:
        worker = (r.get("worker_pid"), r.get("replicate"))
        if worker not in seen:
            seen.add(worker)
            firsts.append(r)
    return firsts


def check_drift(
    records: list[Mapping[str, Any]], everything: list[Mapping[str, Any]]
) -> TimingCheck:
    ids = {id(r) for r in first_of_each_worker(everything)}
    first = [(d, r) for r in records if id(r) in ids and (d := drift(r)) is not None]
    later = [d for r in records if id(r) not in ids and (d := drift(r)) is not None]
    over = [(d, r) for d, r in first if d > DRIFT]
    if not first:
        return TimingCheck(
            "ii", False, "first workload's drift: no first record has 4 samples or more"
        )
    worst_d, worst = max(first, key=lambda x: x[0])
    middle = statistics.median(d for d, _ in first)
    text = (
        f"no worker's first workload drifts more than {100 * DRIFT:g}%: {len(over)} of "
        f"{len(first)} workers' first records did (median {100 * middle:.2f}%, "
        f"max {100 * worst_d:.1f}% in {worst['suite']}/{worst['workload']}, replicate "
        f"{int(worst['replicate']) + 1} {worst['mode']})"
        + (f"; later records: median {100 * statistics.median(later):.2f}%" if later else "")
    )
    return TimingCheck("ii", not over, text)


def check_samples(records: list[Mapping[str, Any]], target: float) -> TimingCheck:
    lo, hi = STEPS
    mid = [r for r in records if lo <= _step(r) <= hi]
    reached = [r for r in mid if (r["timing"].get("ci_rel") or float("inf")) <= target]
    share = len(reached) / len(mid) if mid else 0.0
    text = (
        f"at least {100 * REACHED:g}% of the records with {1000 * lo:g}-{1000 * hi:g} ms steps "
        f"reach +-{100 * target:g}%: {len(reached)} of {len(mid)} did ({100 * share:.0f}%)"
    )
    return TimingCheck("iii", bool(mid) and share >= REACHED, text)


def _step(rec: Mapping[str, Any]) -> float:
    step = rec.get("seconds_per_step")
    return float(step) if step is not None else float(rec["timing"].get("median") or 0.0)


def check_timing(paired: Iterable[Mapping[str, Any]], target: float = 0.01) -> list[TimingCheck]:
    """Checks (i)-(iii) of a run's ``paired`` lines; ``target``: for check (iii)."""
    lines = list(paired)
    ok = _ok(lines)
    return [check_turns(ok), check_drift(ok, lines), check_samples(ok, target)]
