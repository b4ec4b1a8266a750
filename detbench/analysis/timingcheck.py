"""Whether a run's timings can be cited: three checks, read from its records.

- (i) **No timing shared with detbench's own workers.** A record fails where the runner says
  another of its workers ran while it timed (``timed_alone`` false), where another of the run's
  processes was on its GPU (``host_load.gpu_own_processes``), where a process whose owner the
  record cannot say was on its GPU (``gpu_other_processes`` without the own/foreign split: the
  records written before the split, whose only such process was detbench's next worker), or where
  the run's own processes took ``busy.OTHER_CPU`` or more of the CPU (``other_cpu_own``). A
  foreign process is counted apart: it is the host's fault, not detbench's.
- (ii) **No worker's first workload drifts.** For the first record of each worker (a mode in a
  replicate, on its device), the median of the first quarter of its timing samples against the
  median of the last quarter: at most ``DRIFT`` apart. The later records' drift is given beside
  it, to compare.
- (iii) **Enough samples.** Of the records whose step takes 5-100 ms, at least ``REACHED`` reach
  +-``target`` (the 95% interval of the median within it: ``timing.ci_rel``).

A run of the paired design (``paired.jsonl``) keeps its timings in its paired lines, not in its
verdict records: the checks read those lines. Its workers take turns, so (i) asks that no
block began before another worker's block had ended (``overlaps``); (ii) takes each worker's
first line (``worker_pid``), whose samples are one per round; (iii) reads the lines' intervals.
A check with nothing to read fails: "0 of 0" proves nothing.

``tools/timing_check.py DIR`` prints one PASS or FAIL line per check with its numbers; it is run
by hand on a run before its timings are cited. (The GPU visit's proof step,
``tools/gpu_session.sh proof``, runs ``tools/aa_check.py``, not this.)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detbench.analysis.busy import OTHER_CPU

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


def shared(rec: Mapping[str, Any]) -> str | None:
    """Why ``rec``'s timing was shared with detbench's own processes; None: it was not."""
    if rec.get("timed_alone") is False:
        return "another worker ran"
    h = rec.get("host_load")
    if not isinstance(h, Mapping):
        return None
    if h.get("gpu_own_processes"):
        return "own process on the GPU"
    unsplit = h.get("gpu_own_processes") is None and not h.get("gpu_foreign_processes")
    if h.get("gpu_other_processes") and unsplit:
        return "unattributed process on the GPU"
    own_cpu = h.get("other_cpu_own")
    if own_cpu is not None and own_cpu >= OTHER_CPU:
        return "own processes on the CPU"
    return None


def blocks(line: Mapping[str, Any]) -> list[tuple[float, float]]:
    """The (start, end) epoch seconds of each block a paired line timed: its ``block_start``,
    and ``number_per_block`` steps of that round's sample (seconds a step)."""
    n = int(line.get("number_per_block") or 1)
    starts, samples = line.get("block_start") or [], line.get("samples") or []
    return [(float(a), float(a) + n * float(x)) for a, x in zip(starts, samples, strict=False)]


#: Seconds two blocks may seem to overlap by the clocks' disagreement alone: a block's start is
#: read by the wall clock and its length by ``perf_counter``, a few microseconds apart.
SLACK = 1e-4


def overlaps(lines: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(how many blocks of ``lines`` began before another line's block had ended, by more than
    ``SLACK``; how many blocks in all)."""
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


def check_shared(records: list[Mapping[str, Any]]) -> TimingCheck:
    if not records:
        return TimingCheck(
            "i", False, "no timing shared with detbench's own workers: no timing to check"
        )
    why = [w for w in map(shared, records) if w is not None]
    foreign = sum(
        1
        for r in records
        if isinstance(r.get("host_load"), Mapping) and r["host_load"].get("gpu_foreign_processes")
    )
    kinds = {k: why.count(k) for k in sorted(set(why))}
    text = (
        f"no timing shared with detbench's own workers: {len(why)} of {len(records)} timings "
        "shared"
        + (" (" + ", ".join(f"{n}: {k}" for k, n in kinds.items()) + ")" if kinds else "")
        + (f"; {foreign} had a foreign process on the GPU (not detbench's)" if foreign else "")
    )
    return TimingCheck("i", not why, text)


def drift(rec: Mapping[str, Any]) -> float | None:
    """The relative difference of the median of the first quarter of ``rec``'s timing samples
    and that of its last quarter; None with fewer than 4 samples."""
    samples = [float(x) for x in rec["timing"].get("samples") or []]
    q = len(samples) // 4
    if q < 1:
        return None
    first, last = statistics.median(samples[:q]), statistics.median(samples[-q:])
    return abs(first / last - 1.0) if last > 0 else None


def first_of_each_worker(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first record of each worker (its replicate, mode and device; a paired line's
    ``worker_pid``), in the file's order."""
    seen: set[tuple[Any, ...]] = set()
    firsts = []
    for r in records:
        worker: tuple[Any, ...] = (
            (r.get("replicate"), r.get("mode"), r.get("device_name"), r.get("node"))
            if r.get("worker_pid") is None
            else ("pid", r["worker_pid"], r.get("replicate"))
        )
        if worker not in seen:
            seen.add(worker)
            firsts.append(r)
    return firsts


def check_drift(
    records: list[Mapping[str, Any]], everything: list[Mapping[str, Any]]
) -> TimingCheck:
    firsts = first_of_each_worker(everything)
    ids = {id(r) for r in firsts}
    ok_firsts = [r for r in firsts if id(r) in {id(x) for x in records}]
    first = [(d, r) for r in ok_firsts if (d := drift(r)) is not None]
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


def check_timing(
    records: Iterable[Mapping[str, Any]],
    target: float = 0.01,
    paired: Iterable[Mapping[str, Any]] = (),
) -> list[TimingCheck]:
    """Checks (i)-(iii) of a run's records, or of its ``paired`` lines where it has any (the
    paired design); ``target``: the interval check (iii) asks for."""
    lines = list(paired)
    if lines:
        ok = _ok(lines)
        return [check_turns(ok), check_drift(ok, lines), check_samples(ok, target)]
    everything = list(records)
    ok = _ok(everything)
    return [check_shared(ok), check_drift(ok, everything), check_samples(ok, target)]
