"""The one record of ``results.jsonl``: its fields and their types (``FIELDS``), its version
and their history, the check of a record (``problem``, and ``check``, which raises) and the
migration of older versions (``migrate``); also the shape of ``env.json``. The constructors that
build records are in ``detbench.store.record``; every writer goes through them, ``ResultWriter``
checks each record it writes and ``load_results`` each record it reads, setting aside, by name, a
record that fails (``detbench.store.results``).

Why a ``TypedDict`` and not a dataclass: a record is one JSON object, the same dict on disk, on
the worker's pipe and in a DataFrame row. Its fields are an open set: a column per setting of
``core.settings`` (a row added there is a field here, with no edit), and a workload's extras
(``losses``, ``batch_*``, a distributed launch's). A dataclass would need a catch-all dict for
those and a conversion at every boundary. The passes fill a record field by field, some under
names made at run time (``f"{unit}_per_step"``), which mypy cannot check in either form; so the
guard is at run time: the table below, checked on every write and every load. A ``Status`` is a
``str`` and is written as its value.
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
    """What became of one (workload, mode, replicate). Equal to its value: ``Status.OK == "ok"``,
    so records read back from JSON compare with these members directly."""

    #: Both passes ran.
    OK = "ok"
    #: Not measurable here, and not a failure: an op with no deterministic implementation under
    #: deterministic algorithms, a setting this torch lacks, a backend this device refuses.
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
    # The separate design's (an earlier detbench: docs/measured.md); a paired timing has None,
    # and clock_mode "paired" ("exec" in detbench exec).
    ceiling: float | None  # the most seconds of sampling past the budget
    clock_mode: str | None  # "sustained" or "burst" (its --clocks)
    hold: dict[str, Any] | None  # what the sustained-clock hold did


class Record(TypedDict, total=False):
    """One line of ``results.jsonl``, for mypy (``FIELDS`` has every field and its types).
    Identity: ``suite``, ``workload``, ``mode``, ``replicate``; outcome: ``status`` and
    ``message``; bits: ``fingerprint`` (and the step digests); speed: ``seconds_per_step``,
    ``items_per_second``, ``timing``. Every setting of ``core.settings`` is a column too (its
    level as read back), as are the four flags."""

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


# The versions (docs/report-and-results.md, "The record", lists what each added): 1 (detbench
# 0.1); 2 added ``SCHEMA_2_FIELDS`` and, in ``timing``, the median's interval; 3 the settings
# beside the modes (``mode`` may carry overrides, ``base_mode`` is one of the 10 modes, a column
# per setting holds its level as read back, ``cublas_workspace_config`` None when unset) and
# ``SCHEMA_3_FIELDS``; fields were then added within version 3 without a bump, so a version-3
# record may lack them. 4 names those: every version-4 record carries ``ALWAYS`` (with
# ``SCHEMA_4_FIELDS``), a lost record too, and each record is checked on every write and load.
# ``migrate`` gives an older record the fields it lacks, None. Added within version 4, optional:
# ``timing_design``, "paired" where the record's timing is its copy-0 line of ``paired.jsonl``
# (``store.paired``, which ``load_results`` joins onto it); a record without it was timed in its
# own worker, the earlier separate design, whose ``timing`` may hold ``ceiling``, ``clock_mode``
# ("sustained" or "burst") and ``hold``.
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
#: Record fields added within version 3 that every version-4 record carries; None in a migrated
#: older record that lacks them.
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
    # A setting's level as read back: a boolean for on/off, a level's name, a number, None
    # (unknown), or why it could not be read ("unavailable").
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
#: Fields some records carry, with their types. A field in neither table (a workload's own) is
#: kept as it is.
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
    """What is wrong with a record: the field (``timing.median`` inside the timing), the value it
    holds (``MISSING`` where it has none) and why it is wrong."""

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
    """The first thing wrong with ``rec`` (a record of any supported version, migrated), or None:
    a field of ``REQUIRED`` missing, a version-4 record without a field of ``ALWAYS``, a field
    of ``FIELDS`` with a value of another type, a status that is not one of ``STATUSES``."""
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
    """A record of any supported version in the current version's shape: the fields a later
    version added are None in an older record (its ``schema_version`` is kept, so a reader can
    tell). A version-1 record has no peak memory and no precision; its ``memory``, where
    present, is an oom's figures, kept."""
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
