"""The one record of ``results.jsonl``: its fields and their types (``FIELDS``), its version, the
check of a record (``problem``; ``check`` raises) and the migration of older versions
(``migrate``). ``store.record`` builds records; ``store.results`` checks each on write and load.

Why a ``TypedDict`` and not a dataclass: a record is the same dict on disk, on the worker's pipe
and in a DataFrame row, and its fields are an open set (a column per setting, a workload's
extras, names made at run time) that mypy cannot check in either form: hence the table below.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypedDict

from detbench.core.errors import DetbenchError
from detbench.core.settings import MODE_FLAGS
from detbench.core.settings import NAMES as SETTING_NAMES

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: the same behaviour, spelled out

    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)


class Status(StrEnum):
    """What became of one (workload, mode, replicate); equal to its value (``OK == "ok"``)."""

    #: Both passes ran.
    OK = "ok"
    #: Not measurable here (an op, setting or backend missing), and not a failure.
    UNSUPPORTED = "unsupported"
    #: Out of memory (torch's, or a library's in disguise).
    OOM = "oom"
    #: Any other exception in the workload.
    ERROR = "error"
    #: Past ``--timeout``: the worker was killed.
    TIMEOUT = "timeout"
    #: The worker process died while running the workload (a signal, an abort).
    CRASHED = "crashed"


STATUSES = tuple(s.value for s in Status)


class TimingFields(TypedDict, total=False):
    """``record["timing"]``: the timing pass (``worker/timing.py``)."""

    samples: list[float]
    median: float
    iqr: float
    ci_low: float
    ci_high: float
    ci_rel: float
    target_rel: float
    reached_target: bool
    budget: float
    min_run_time: float
    min_samples: int
    number_per_block: int
    warmup_steps: int
    warmup: dict[str, Any] | None  # what the warm-up until steady did (worker/warmup.py)
    gpu_clocks: dict[str, Any] | None  # NVML's clocks during the pass (worker/gpuclock.py)
    num_threads: int
    clock: str
    turn_steps: int | None  # paired: the untimed steps before each block (worker/paired.py)
    # The separate design's; a paired timing has None, clock_mode "paired" ("exec" in exec).
    ceiling: float | None  # the most seconds of sampling past the budget
    clock_mode: str | None  # "sustained" or "burst" (its --clocks)
    hold: dict[str, Any] | None  # what the sustained-clock hold did


class Record(TypedDict, total=False):
    """One line of ``results.jsonl``, for mypy (``FIELDS`` has every field and its types)."""

    schema_version: int
    suite: str
    workload: str
    params: dict[str, Any]
    mode: str
    base_mode: str
    replicate: int
    mode_position: int
    device: str
    device_name: str
    profile: str
    seed: int
    status: str
    message: str | None
    fingerprint: str | None
    fingerprint_method: str
    step_fingerprints: list[str] | None
    max_abs_diff: float | None
    seconds_per_step: float | None
    items_per_step: float | None
    items_per_second: float | None
    flops_per_step: float | None
    flops_per_second: float | None
    timing: TimingFields | None
    peak_memory_bytes: int | None
    memory: dict[str, Any] | None
    precision: dict[str, str] | None
    phases: dict[str, float]
    settings_changed: list[str]
    benchmark: bool
    cudnn_deterministic: bool
    deterministic_algorithms: bool
    cudnn_enabled: bool
    num_threads: int
    timed_alone: bool
    host_load: dict[str, Any] | None
    worker_pid: int
    utc: str | None
    node: str | None
    job: str | None
    exit_code: int | None
    max_abs_diff_vs_default: float | None
    attn_implementation: str | None
    ops_called: list[str] | None
    cudnn_log: bool  # run --cudnn-log only, as cudnn_engines (worker/cudnnlog.py)
    cudnn_engines: list[dict[str, Any]] | dict[str, str]


# What each version added: docs/report-and-results.md, "The record". A version-4 record carries
# every field of ``ALWAYS``; ``migrate`` gives an older one those it lacks, None.
SCHEMA_VERSION = 4
SUPPORTED_VERSIONS = (1, 2, 3, 4)
#: Record fields that schema 2 added, None in a migrated version-1 record.
SCHEMA_2_FIELDS = (
    "fingerprint_method",
    "peak_memory_bytes",
    "memory",
    "precision",
    "mode_position",
)
#: Record fields that schema 3 added, None in a migrated older record.
SCHEMA_3_FIELDS = (
    *SETTING_NAMES,
    "settings_changed",
    "compile_seconds",
    "first_step_seconds",
    "batch_invariant",
    "batch_first_variant_size",
    "batch_max_abs_diff",
)
#: Fields added within version 3 without a bump, which every version-4 record carries.
SCHEMA_4_FIELDS = (
    "device_name",
    "worker_pid",
    "node",
    "job",
    "host_load",
    "attn_implementation",
    "ops_called",
    "max_abs_diff_vs_default",
)

# The types a field may hold (JSON's: a number is an int or a float, never a bool).
_NONE = type(None)
STR, NUM, INT, BOOL = (str,), (int, float), (int,), (bool,)
DICT, LIST = (dict,), (list,)
SCALAR = (str, int, float, bool, _NONE)


def or_none(types: tuple[type, ...]) -> tuple[type, ...]:
    return (*types, _NONE)


#: Every field a version-4 record carries, with the types it may hold.
ALWAYS: dict[str, tuple[type, ...]] = {
    "schema_version": INT,
    "suite": STR,
    "workload": STR,
    "mode": STR,
    "base_mode": STR,
    "replicate": INT,
    "status": STR,
    "message": or_none(STR),
    "params": or_none(DICT),
    **dict.fromkeys(MODE_FLAGS, BOOL),
    # A setting's level as read back, None (unknown) or why it could not be read.
    **{name: SCALAR for name in SETTING_NAMES},
    "settings_changed": or_none(LIST),
    "compile_seconds": or_none(NUM),
    "batch_size": or_none(INT),
    "batch_invariant": or_none(BOOL),
    "batch_first_variant_size": or_none(INT),
    "batch_max_abs_diff": or_none(NUM),
    "seed": or_none(INT),
    "device": or_none(STR),
    "device_name": or_none(STR),
    "mode_position": or_none(INT),
    "profile": or_none(STR),
    "num_threads": or_none(INT),
    "fingerprint_method": or_none(STR),
    "fingerprint": or_none(STR),
    "step_fingerprints": or_none(LIST),
    "max_abs_diff": or_none(NUM),
    "max_abs_diff_vs_default": or_none(NUM),
    "seconds_per_step": or_none(NUM),
    "items_per_step": or_none(NUM),
    "items_per_second": or_none(NUM),
    "timing": or_none(DICT),
    "peak_memory_bytes": or_none(NUM),
    "memory": or_none(DICT),
    "precision": or_none(DICT),
    "phases": or_none(DICT),
    "host_load": or_none(DICT),
    "attn_implementation": or_none(STR),
    "ops_called": or_none(LIST),
    "worker_pid": or_none(INT),
    "node": or_none(STR),
    "job": or_none(STR),
    "utc": or_none(STR),
}
#: Fields some records carry; a field in neither table (a workload's own) is kept as it is.
OPTIONAL: dict[str, tuple[type, ...]] = {
    "exit_code": or_none(INT),  # a lost record's: the worker's exit code, None if killed
    "traceback": STR,
    "device_lost": BOOL,
    "losses": or_none(LIST),
    "diff_reference": (str, dict),
    "fingerprint_sha256": or_none(STR),
    "step_fingerprints_sha256": or_none(LIST),
    "first_step_seconds": or_none(NUM),
    "compile_stats": or_none(DICT),
    "settings_changes": DICT,
    "seeding": or_none(STR),
    "timed_alone": or_none(BOOL),
    **{
        f"{unit}_per_{per}": or_none(NUM)
        for unit in ("flops", "bytes")
        for per in ("step", "second")
    },
    "flops_source": or_none(STR),
    "flops_note": or_none(STR),
    "flops_pending": BOOL,
    "batch_same_as_smallest": or_none(DICT),
    "batch_distinct_results": or_none(INT),
    "batch_note": or_none(STR),
    # a distributed workload's (distributed/launch.py)
    "backend": or_none(STR),
    "ranks_agree": or_none(BOOL),
    "ranks_first_disagree_step": or_none(INT),
    "rank_fingerprints": or_none(LIST),
    "rank_status": or_none(DICT),
    "launch": or_none(DICT),
    "nccl_env": or_none(DICT),
    "settings_inert": or_none(DICT),
    # a merged run's (run/merge.py): which shard or machine made the record
    "shard": STR,
    "machine": STR,
    # run --cudnn-log (worker/cudnnlog.py)
    "cudnn_log": BOOL,
    "cudnn_engines": (list, dict),
    # where the record's timing is ("paired": in paired.jsonl; "separate": here)
    "timing_design": or_none(STR),
}
FIELDS = {**ALWAYS, **OPTIONAL}
#: What every record of every version names: the identity of what it measured, and its status.
REQUIRED = ("suite", "workload", "mode", "replicate", "status")
#: The timing pass's figures that analysis reads, with their types.
TIMING_FIELDS: dict[str, tuple[type, ...]] = {
    "samples": LIST,
    "median": NUM,
    "iqr": or_none(NUM),
    "number_per_block": INT,
}


@dataclass(frozen=True)
class Problem:
    """What is wrong with a record: the field (``timing.median``), its value and why."""

    field: str
    value: Any
    why: str

    def __str__(self) -> str:
        shown = "missing" if self.value is MISSING else f"{self.value!r:.80}"
        return f"field {self.field} = {shown}: {self.why}"


#: The value of a field a record lacks.
MISSING: Any = object()


def holds(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:  # a bool is an int to Python, not to JSON
        return False
    return isinstance(value, types)


def expected_words(types: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        dict: "an object",
        list: "a list",
        _NONE: "null",
    }
    if int in types and float in types:
        types = tuple(t for t in types if t is not int)
    return " or ".join(names[t] for t in types)


def problem(rec: Mapping[str, Any]) -> Problem | None:
    """The first thing wrong with ``rec`` (of any supported version, migrated), or None: a
    missing field (``ALWAYS`` in version 4, else ``REQUIRED``), a type or a status unknown."""
    version = rec.get("schema_version", MISSING)
    if not holds(version, INT) or version not in SUPPORTED_VERSIONS:
        known = ", ".join(map(str, SUPPORTED_VERSIONS))
        return Problem("schema_version", version, f"this detbench reads versions {known}")
    must = ALWAYS if version == SCHEMA_VERSION else REQUIRED
    for name in must:
        if name not in rec:
            return Problem(name, MISSING, f"every version-{version} record has it")
    for name, value in rec.items():
        types = FIELDS.get(name)
        if types is not None and not holds(value, types):
            return Problem(name, value, f"not {expected_words(types)}")
    if rec["status"] not in STATUSES:
        return Problem("status", rec["status"], f"not one of {', '.join(STATUSES)}")
    for name, types in TIMING_FIELDS.items():
        timing = rec.get("timing") or {}
        if name in timing and not holds(timing[name], types):
            return Problem(f"timing.{name}", timing[name], f"not {expected_words(types)}")
    return None


def migrate(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` in the current version's shape, later fields None (``schema_version`` kept; a
    version-1 record's ``memory``, where present, is an oom's figures)."""
    version = rec.get("schema_version")
    if version == 1:
        for name in SCHEMA_2_FIELDS:
            rec.setdefault(name, None)
    if version in (1, 2):
        rec.setdefault("base_mode", rec.get("mode"))
        for name in SCHEMA_3_FIELDS:
            if name != "cublas_workspace_config":  # schema 2 recorded the variable already
                rec.setdefault(name, None)
    if version in (1, 2, 3):
        for name in SCHEMA_4_FIELDS:
            rec.setdefault(name, None)
    return rec


class RecordError(DetbenchError):
    """A record that ``problem`` refuses: a bug in whatever built it (one clear line)."""


def check(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec``, once ``problem`` finds nothing wrong with it; else ``RecordError``."""
    found = problem(rec)
    if found is not None:
        who = f"{rec.get('suite')}/{rec.get('workload')} [{rec.get('mode')}]"
        raise RecordError(f"record of {who}: {found}")
    return rec
