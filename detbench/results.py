"""The result files: ``results.jsonl`` (a record per workload x mode x replicate) and ``env.json``.

Records are plain JSON, one per line, appended with a single ``os.write`` on a file opened with
``O_APPEND``: the kernel writes the whole line or nothing, so a runner killed at any moment leaves
every completed record and no partial line.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.errors import DetbenchError

if TYPE_CHECKING:
    import pandas as pd

# Schema history:
#   1 (detbench 0.1): first version.
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1,)

RESULTS_FILE = "results.jsonl"
ENV_FILE = "env.json"

#: Record statuses. ``unsupported``: an op has no deterministic implementation; ``oom``: out of
#: memory; ``timeout``: past ``--timeout``, the worker was killed; ``crashed``: the worker process
#: died while running the workload.
STATUSES = ("ok", "unsupported", "oom", "error", "timeout", "crashed")

#: The columns ``load_results`` always returns, in this order (others follow).
COLUMNS = (
    "suite",
    "workload",
    "mode",
    "benchmark",
    "cudnn_deterministic",
    "deterministic_algorithms",
    "cudnn_enabled",
    "replicate",
    "status",
    "fingerprint",
    "seconds_per_step",
    "items_per_second",
    "message",
    "iqr",
    "items_per_step",
    "max_abs_diff",
    "device",
    "profile",
    "num_threads",
)


class ResultsError(DetbenchError):
    """A results directory or file that cannot be read (one clear line for the user)."""


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def dumps(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no NaN/Infinity (not valid JSON)."""
    return json.dumps(obj, sort_keys=True, allow_nan=False, separators=(",", ":"))


class ResultWriter:
    """Appends records to ``results.jsonl``, each in one write (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / RESULTS_FILE
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, record: Mapping[str, Any]) -> None:
        line = (dumps({"schema_version": SCHEMA_VERSION, **record}) + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # only on a full disk; never leave half a line unflagged
            raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename: a reader sees the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n")


def iter_records(directory: str | Path) -> Iterator[dict[str, Any]]:
    path = Path(directory) / RESULTS_FILE
    if not path.is_file():
        raise ResultsError(f"no {RESULTS_FILE} in {directory}")
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if not line.endswith("\n"):
                raise ResultsError(f"{path}:{lineno}: truncated record (no end of line)")
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ResultsError(f"{path}:{lineno}: malformed record: {exc.msg}") from None
            if not isinstance(rec, dict):
                raise ResultsError(f"{path}:{lineno}: a record must be a JSON object")
            version = rec.get("schema_version")
            if version not in SUPPORTED_VERSIONS:
                raise ResultsError(
                    f"{path}:{lineno}: unknown schema version {version!r} "
                    f"(this detbench reads {', '.join(map(str, SUPPORTED_VERSIONS))})"
                )
            yield rec


def load_results(directory: str | Path) -> pd.DataFrame:
    """One row per (workload, mode, replicate) record, with the columns of ``COLUMNS`` first.

    Nested fields are kept as Python objects: ``timing`` (raw samples and block size),
    ``step_fingerprints``, ``phases`` and ``params``.
    """
    import pandas as pd

    rows = []
    for rec in iter_records(directory):
        row = dict(rec)
        timing = rec.get("timing") or {}
        row["iqr"] = timing.get("iqr")
        row["timing_samples"] = timing.get("samples")
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = None
    for col in ("fingerprint", "message"):  # None, not NaN, where there is no value
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    rest = [c for c in df.columns if c not in COLUMNS]
    return df[list(COLUMNS) + rest]


def load_env(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / ENV_FILE
    if not path.is_file():
        raise ResultsError(f"no {ENV_FILE} in {directory}")
    try:
        env: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: malformed JSON: {exc.msg}") from None
    return env


# ---------------------------------------------------------------------------------------------
# Where a result came from


def git_info(repo: Path) -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it (untracked files ignored)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(repo), *args],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _lscpu_field(text: str, name: str) -> str | None:
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return None


def host_env() -> dict[str, Any]:
    """Facts about this host and torch, from ``torch.utils.collect_env`` (no CUDA context made)."""
    import torch
    from torch.utils import collect_env

    info = collect_env.get_env_info()._asdict()
    # pip/conda package lists are long and not what a reader compares; keep the rest verbatim.
    info.pop("pip_packages", None)
    info.pop("conda_packages", None)
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": _lscpu_field(info.get("cpu_info") or "", "Model name"),
        "cpu_count": os.cpu_count(),
        "driver": info.get("nvidia_driver_version"),
        "collect_env": info,
    }


#: The facts that make two runs comparable, in the order a report lists them.
ENV_FACTS = ("device", "gpu", "driver", "cuda", "cudnn", "torch", "python", "cpu", "threads")


def env_facts(env: Mapping[str, Any]) -> dict[str, str | None]:
    """The environment of a run in a few comparable strings (None where not known): the device,
    GPU model, NVIDIA driver, CUDA runtime, cuDNN, torch, Python, CPU model and torch's threads."""
    host = env.get("host") or {}
    worker = env.get("worker") or {}
    collected = host.get("collect_env") or {}

    def text(x: Any) -> str | None:
        return None if x is None or x == "" or x == "None" else str(x)

    gpu = worker.get("gpu_name") or collected.get("nvidia_gpu_models")
    return {
        "device": text(worker.get("device") or (env.get("options") or {}).get("device")),
        "gpu": text(gpu),
        "driver": text(host.get("driver") or collected.get("nvidia_driver_version")),
        "cuda": text(worker.get("cuda_runtime") or host.get("torch_cuda")),
        "cudnn": text(worker.get("cudnn_version")),
        "torch": text(host.get("torch")),
        "python": text(host.get("python")),
        "cpu": text(host.get("cpu_model") or host.get("cpu")),
        "threads": text(worker.get("num_threads")),
    }
