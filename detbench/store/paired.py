"""The owner of ``paired.jsonl``: the paired timings of a run, one line per
(workload, mode, replicate, copy), written when the group's rounds end.

Why a file of its own: the verdict records are written at once, with no timing; the costs come
later, from workers of every mode taking turns on the device, one block each per shuffled round,
so the analysis can pair each block with the baseline's of the same round. ``copy`` 1 is a
second worker of the baseline's settings: the A/A check.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.store.lines import ResultsError, append_lines, open_append, read_lines
from detbench.store.schema import (
    DICT,
    INT,
    LIST,
    NUM,
    STATUSES,
    STR,
    Problem,
    expected_words,
    holds,
    or_none,
)

if TYPE_CHECKING:
    import pandas as pd

PAIRED_FILE = "paired.jsonl"
PAIRED_VERSION = 1
#: The ``timing_design`` of a verdict record whose timing is in ``paired.jsonl``.
PAIRED = "paired"
#: A line's status: a record's (``schema.STATUSES``), "failed" (fewer than 6 blocks timed),
#: "not_timed" (its verdict record was not ok) or "same_computation" (on this device its mode runs
#: what another mode's worker timed, e.g. one differing only in cuDNN flags on a CPU).
PAIRED_STATUSES = (*STATUSES, "failed", "not_timed", "same_computation")

#: The fields every line has, with the types they may hold (JSON's: a number is never a bool).
REQUIRED: dict[str, tuple[type, ...]] = {
    "paired_version": INT,
    "suite": STR,
    "workload": STR,
    "mode": STR,
    "replicate": INT,
    "copy": INT,
    "status": STR,
}
#: The fields a line of status ok has too (a failed worker's line may lack them).
TIMED: dict[str, tuple[type, ...]] = {
    "samples": LIST,  # seconds per step, one per round, in round order
    "rounds": LIST,  # the round of each sample
    "positions": LIST,  # the worker's place (0-based) in each round's shuffled order
    "block_start": LIST,  # epoch seconds at which each block began
    "workers": or_none(INT),
    "number_per_block": or_none(INT),
    "timing": or_none((dict,)),
}
#: The rest of a line's fields, each optional, with its types.
OPTIONAL: dict[str, tuple[type, ...]] = {
    "message": or_none(STR),
    "first_step_digest": or_none(STR),
    "same_bits": or_none((bool,)),
    "worker_pid": or_none(INT),
    "device": or_none(STR),
    "device_name": or_none(STR),
    "utc": or_none(STR),
    # the settings the workload changed behind the worker's back (as a verdict record's)
    "settings_changed": or_none(LIST),
    # a line of status "same_computation": the mode whose worker timed this computation
    "timed_as": or_none(STR),
    # a merged run's (``run.merge``): the shard or the machine whose run timed the line
    "shard": or_none(STR),
    "machine": or_none(STR),
    # how busy the host was over this worker's rounds (``worker/hostload``, ``analysis.busy``)
    "host_load": or_none(DICT),
}
#: Every field of a line that the reader knows, with its types (a line may carry others).
FIELDS = {**REQUIRED, **TIMED, **OPTIONAL}
#: The lists that hold one entry per sample.
PER_SAMPLE = ("samples", "rounds", "positions", "block_start")


def problem(obj: Mapping[str, Any]) -> Problem | None:
    """The first thing wrong with a line, or None: a missing field (``TIMED`` too for status
    ok), a type, version or status unknown, per-sample lists that disagree, a bad sample or copy."""
    if obj.get("paired_version") != PAIRED_VERSION:
        return Problem(
            "paired_version", obj.get("paired_version"), f"this detbench reads {PAIRED_VERSION}"
        )
    must = {**REQUIRED, **TIMED} if obj.get("status") == "ok" else REQUIRED
    for name in must:
        if name not in obj:
            return Problem(name, None, "every line has it" if name in REQUIRED else "ok has it")
    for name, types in FIELDS.items():
        if name in obj and not holds(obj[name], types):
            return Problem(name, obj[name], f"not {expected_words(types)}")
    if obj["status"] not in PAIRED_STATUSES:
        return Problem("status", obj["status"], f"not one of {', '.join(PAIRED_STATUSES)}")
    if obj["copy"] < 0:
        return Problem("copy", obj["copy"], "0, or 1 for the baseline's second worker")
    if "samples" not in obj:
        return None
    n = len(obj["samples"])
    for name in PER_SAMPLE[1:]:
        if name in obj and len(obj[name]) != n:
            return Problem(name, obj[name], f"{len(obj[name])} entries for {n} samples")
    for name, types in (("samples", NUM), ("rounds", INT), ("positions", INT)):
        bad = [x for x in obj.get(name, []) if not holds(x, types)]
        if bad:
            return Problem(name, bad[0], f"not {expected_words(types)}")
    if any(x <= 0 for x in obj["samples"]):
        return Problem("samples", min(obj["samples"]), "a step takes some time")
    return None


def line(
    *,
    suite: str,
    workload: str,
    mode: str,
    replicate: int,
    copy: int,
    samples: Sequence[float],
    rounds: Sequence[int],
    positions: Sequence[int],
    block_start: Sequence[float],
    workers: int | None,
    number_per_block: int | None,
    timing: Mapping[str, Any] | None,
    status: str = "ok",
    message: str | None = None,
    first_step_digest: str | None = None,
    same_bits: bool | None = None,
    worker_pid: int | None = None,
    device: str | None = None,
    device_name: str | None = None,
    utc: str | None = None,
    settings_changed: Sequence[str] | None = None,
    host_load: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One line of ``paired.jsonl``, checked (a ``ResultsError`` names the field). ``timing``:
    the Timing JSON built from ``samples`` (``worker/timing.py``); None before any sample."""
    obj: dict[str, Any] = {
        "paired_version": PAIRED_VERSION,
        "suite": suite,
        "workload": workload,
        "mode": mode,
        "replicate": replicate,
        "copy": copy,
        "status": status,
        "message": message,
        "samples": [float(x) for x in samples],
        "rounds": [int(x) for x in rounds],
        "positions": [int(x) for x in positions],
        "block_start": [float(x) for x in block_start],
        "workers": workers,
        "number_per_block": number_per_block,
        "timing": None if timing is None else dict(timing),
        "first_step_digest": first_step_digest,
        "same_bits": same_bits,
        "worker_pid": worker_pid,
        "device": device,
        "device_name": device_name,
        "utc": utc,
        "settings_changed": None if settings_changed is None else list(settings_changed),
        "host_load": None if host_load is None else dict(host_load),
    }
    found = problem(obj)
    if found is not None:
        raise ResultsError(f"paired line of {suite}/{workload} [{mode}] copy {copy}: {found}")
    return obj


class PairedWriter:
    """Appends lines to ``paired.jsonl``, a group in one write (``lines.append_lines``)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / PAIRED_FILE
        self._fd = open_append(self.path)

    def append(self, obj: Mapping[str, Any]) -> None:
        """Append ``obj`` (a ``line``), checked again: a bad line is its builder's bug, raised."""
        self.append_all([obj])

    def append_all(self, objs: Sequence[Mapping[str, Any]]) -> None:
        """A group's lines in one write, all or none: a bad one raises before any is written (a
        line without ``paired_version`` gets this version's)."""
        out = [{"paired_version": PAIRED_VERSION, **o} for o in objs]
        for o in out:
            found = problem(o)
            if found is not None:
                raise ResultsError(f"{self.path}: not a paired line: {found}")
        append_lines(self._fd, self.path, out)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> PairedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_paired(directory: str | Path) -> Iterator[dict[str, Any]]:
    """The lines of ``directory``'s ``paired.jsonl`` (none without one), each checked."""
    path = Path(directory) / PAIRED_FILE
    if not path.is_file():
        return
    for lineno, obj in read_lines(path):
        found = problem(obj)
        if found is not None:
            raise ResultsError(f"{path}:{lineno}: {found}")
        yield obj


#: The columns of ``load_paired``, in this order.
COLUMNS = tuple(FIELDS)


def load_paired(directory: str | Path) -> pd.DataFrame:
    """One row per line of ``paired.jsonl`` (empty, with ``COLUMNS``, where there is none)."""
    import pandas as pd

    rows = list(iter_paired(directory))
    extra = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in FIELDS]
    return pd.DataFrame(rows, columns=[*COLUMNS, *extra])


Key = tuple[str, str, str, int, "str | None"]


def copy0_lines(directory: str | Path) -> dict[Key, dict[str, Any]]:
    """(suite, workload, mode, replicate, machine) -> the copy-0 line of status ok, or
    "same_computation" (the mode timed for it); ``machine`` is None outside a merged set. A
    later line of the same key (a resumed run) replaces an earlier one."""
    return {
        (o["suite"], o["workload"], o["mode"], o["replicate"], o.get("machine")): o
        for o in iter_paired(directory)
        if o["copy"] == 0
        and (
            (o["status"] == "ok" and o.get("samples"))
            or (o["status"] == "same_computation" and o.get("timed_as"))
        )
    }


def _per_second(per_step: Any, median: float) -> float | None:
    if isinstance(per_step, bool) or not isinstance(per_step, (int, float)):
        return None
    return per_step / median


def joined(rec: Mapping[str, Any], found: Mapping[Key, Mapping[str, Any]]) -> dict[str, Any]:
    """A paired verdict record with its copy-0 timing where ``found`` has it: ``timing`` (with
    the line's rounds and block starts, to pair samples by round), ``seconds_per_step`` (its
    median) and the rates; ``timed_as`` where another mode was timed for it."""
    out = dict(rec)
    key = (
        rec.get("suite"),
        rec.get("workload"),
        rec.get("mode"),
        rec.get("replicate"),
        rec.get("machine"),
    )
    obj = found.get(key)  # type: ignore[arg-type]
    if obj is not None and obj.get("timed_as"):
        out["timed_as"] = obj["timed_as"]
    timing = None if obj is None else obj.get("timing")
    if not timing or not timing.get("median"):
        return out
    median = float(timing["median"])
    out["timing"] = {
        **timing,
        "paired_rounds": obj["rounds"],  # type: ignore[index]
        "paired_block_start": obj["block_start"],  # type: ignore[index]
    }
    out["seconds_per_step"] = median
    for unit in ("items", "flops", "bytes"):
        out[f"{unit}_per_second"] = _per_second(rec.get(f"{unit}_per_step"), median)
    return out
