"""The typed shape of what detbench writes: a record of ``results.jsonl``, the job a worker is
given, and ``env.json``. The JSON on disk is as ``results.py``'s schema history describes; these
types name its fields for readers and for mypy, and change nothing on disk (a ``Status`` is a
``str`` and is written as its value).
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any, TypedDict

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


class Timing(TypedDict, total=False):
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


class Record(TypedDict, total=False):
    """One line of ``results.jsonl`` (schema 3). Identity: ``suite``, ``workload``, ``mode``,
    ``replicate``; outcome: ``status`` and ``message``; bits: ``fingerprint`` (and the step
    digests); speed: ``seconds_per_step``, ``items_per_second``, ``timing``. Every setting of
    ``core.settings`` is a column too (its level as read back), as are the four flags."""

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
    timing: Timing | None
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
    #: ``run --cudnn-log`` only: True (the timings ran with cuDNN's API log on, so they are not
    #: costs), and the engine each convolution settled on (``worker/cudnnlog.py``): a list of
    #: {op, shapes, engine, candidates, executions}, or {"unsupported": reason}.
    cudnn_log: bool
    cudnn_engines: list[dict[str, Any]] | dict[str, str]


class Job(TypedDict, total=False):
    """What the runner sends a worker (one JSON line) for its (mode, replicate)."""

    keys: list[str]
    sources: list[str]
    mode: dict[str, Any]
    replicate: int
    device: str
    profile: str
    seed: int
    budget: float
    target_rel: float
    min_samples: int
    fingerprint: str
    fingerprint_steps: int
    warmup_steps: int
    timeout: float | None
    reference_dir: str
    #: True from the runner (``--cudnn-log``); the worker's log file once it is spawned.
    cudnn_log: bool | str


class Env(TypedDict, total=False):
    """``env.json``: where a run came from (host, worker, GPU state, git), its options, the
    modes' shuffled order, and where its time went."""

    schema_version: int
    started_utc: str
    finished_utc: str | None
    host: dict[str, Any]
    worker: dict[str, Any]
    gpu_state: dict[str, Any]
    git: dict[str, Any]
    options: dict[str, Any]
    mode_order: dict[str, Any]
    run_stats: dict[str, Any]
    study: dict[str, Any] | None
    located: list[dict[str, Any]]
