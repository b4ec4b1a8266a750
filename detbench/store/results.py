"""The result files: ``results.jsonl`` (a record per workload x mode x replicate, appended a
whole line at a time: ``store.lines``) and ``env.json``, with the host's facts it keeps."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from detbench.core.settings import MODE_FLAGS
from detbench.core.settings import NAMES as SETTING_NAMES
from detbench.store import paired
from detbench.store.lines import ResultsError, append_lines, dumps, open_append, read_lines
from detbench.store.schema import SCHEMA_VERSION, SUPPORTED_VERSIONS, Record, migrate, problem

if TYPE_CHECKING:
    import pandas as pd

_log = logging.getLogger("detbench.store")

RESULTS_FILE = "results.jsonl"
#: Where a writer keeps a record that is not valid (``ResultWriter.append``).
SET_ASIDE_FILE = "set_aside.jsonl"
ENV_FILE = "env.json"

#: The columns schema 2 and 3 added (None in older records), which hold None, not NaN, where a
#: record has no value, as do ``fingerprint`` and ``message``.
LATER_COLUMNS = (
    "peak_memory_bytes",
    "timing_ci_rel",
    "timing_reached_target",
    "fingerprint_method",
    "matmul_fp32",
    "conv_fp32",
    "base_mode",
    *SETTING_NAMES,
    "settings_changed",
)
#: The columns ``load_results`` always returns, in this order (others follow).
COLUMNS = (
    "suite",
    "workload",
    "mode",
    *MODE_FLAGS,
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
    *LATER_COLUMNS,
)
NONE_NOT_NAN = ("fingerprint", "message", *LATER_COLUMNS)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ResultWriter:
    """Appends records to ``results.jsonl``, each in one write (``lines.append_lines``)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / RESULTS_FILE
        self._fd = open_append(self.path)

    def append(self, record: Mapping[str, Any]) -> bool:
        """Append ``record`` if ``schema.problem`` passes it: True. Else warn in one line and keep
        it in ``SET_ASIDE_FILE`` with its problem, so the run goes on, nothing measured is lost
        and a resume measures it again: False."""
        rec = {"schema_version": SCHEMA_VERSION, **record}
        found = problem(rec)
        if found is not None:
            aside = self.path.with_name(SET_ASIDE_FILE)
            with aside.open("a", encoding="utf-8") as f:
                f.write(dumps({**rec, "problem": str(found)}) + "\n")
            who = f"{rec.get('suite')}/{rec.get('workload')} [{rec.get('mode')}]"
            _log.warning(
                "detbench: the record of %s is not valid (%s): kept in %s, not in %s",
                who,
                found,
                aside,
                self.path.name,
            )
            return False
        append_lines(self._fd, self.path, [rec])
        return True

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


def iter_records(directory: str | Path, aside: list[str] | None = None) -> Iterator[Record]:
    """The records of ``directory``'s results file, migrated and checked. One that fails the
    check is named in one line, added to ``aside`` where a list is given, else raised as
    ``ResultsError``; an unreadable line or an unknown version always raises."""
    path = Path(directory) / RESULTS_FILE
    if not path.is_file():
        raise ResultsError(f"no {RESULTS_FILE} in {directory}")
    for lineno, rec in read_lines(path):
        version = rec.get("schema_version")
        if version not in SUPPORTED_VERSIONS:
            raise ResultsError(
                f"{path}:{lineno}: unknown schema version {version!r} "
                f"(this detbench reads {', '.join(map(str, SUPPORTED_VERSIONS))})"
            )
        found = problem(migrate(rec))
        if found is None:
            yield cast(Record, rec)
            continue
        who = f"{rec.get('suite')}/{rec.get('workload')} [{rec.get('mode')}]"
        said = f"{path}:{lineno}: record of {who} set aside: {found}"
        if aside is None:
            raise ResultsError(said)
        aside.append(said)


def load_results(directory: str | Path) -> pd.DataFrame:
    """One row per record, the columns of ``COLUMNS`` first; nested fields kept as Python
    objects, a few flattened from ``timing`` and ``precision`` (None where a record has none).
    A paired record takes its timing from its copy-0 line of ``paired.jsonl`` (``paired.joined``).
    A record that fails its check is left out, logged as a warning and listed in
    ``df.attrs["set_aside"]``, which the report counts."""
    import pandas as pd

    rows = []
    aside: list[str] = []
    lines: dict[paired.Key, dict[str, Any]] | None = None
    for rec in iter_records(directory, aside):
        row = dict(rec)
        if rec.get("timing_design") == paired.PAIRED:
            lines = paired.copy0_lines(directory) if lines is None else lines
            row = paired.joined(row, lines)
        timing = cast(dict[str, Any], row.get("timing") or {})
        row["iqr"] = timing.get("iqr")
        row |= {f"timing_{k}": timing.get(k) for k in ("samples", "ci_rel", "reached_target")}
        precision = rec.get("precision") or {}
        row |= {k: precision.get(k) for k in ("matmul_fp32", "conv_fp32")}
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = None
    for col in NONE_NOT_NAN:
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    rest = [c for c in df.columns if c not in COLUMNS]
    df = df[list(COLUMNS) + rest]
    for said in aside:
        _log.warning("detbench: %s", said)
    df.attrs["set_aside"] = aside
    return df


def load_env(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / ENV_FILE
    if not path.is_file():
        raise ResultsError(f"no {ENV_FILE} in {directory}")
    try:
        env: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: malformed JSON: {exc.msg}") from None
    return env


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


#: ``torch.utils.collect_env``'s facts as JSON, in a child process: collect_env initialises CUDA,
#: whose context would otherwise stay in the runner for the whole run.
_COLLECT_ENV = """
import json
from torch.utils import collect_env
info = collect_env.get_env_info()._asdict()
info.pop("pip_packages", None)
info.pop("conda_packages", None)
print(json.dumps(info, default=str))
"""
COLLECT_ENV_TIMEOUT = 120.0  # seconds: it runs pip and nvidia-smi, each of which can be slow
#: A file that keeps collect_env's facts for later runs (2.5 s of CPU each); the test suite
#: sets it, and unset (users) every run collects its own.
COLLECT_ENV_CACHE = "DETBENCH_COLLECT_ENV_CACHE"


def collect_env_later(
    timeout: float = COLLECT_ENV_TIMEOUT,
) -> Callable[[], tuple[dict[str, Any], str | None]]:
    """Start collect_env in a child now; the function returned waits for (facts, None), or
    ({}, why) when the child fails or outlives ``timeout`` seconds."""
    cache = os.environ.get(COLLECT_ENV_CACHE)
    if cache:
        try:
            kept = json.loads(Path(cache).read_text())
            return lambda: (kept, None)
        except (OSError, ValueError):
            pass  # none kept yet: collect, and keep it below
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _COLLECT_ENV],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
        return lambda: ({}, error)
    started = time.monotonic()

    def result() -> tuple[dict[str, Any], str | None]:
        try:
            out, err = proc.communicate(timeout=max(0.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            return {}, f"TimeoutExpired: {exc}"
        if proc.returncode != 0:
            lines = err.strip().splitlines()
            return {}, f"exit code {proc.returncode}: {lines[-1] if lines else 'no message'}"
        try:
            info = json.loads(out.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError) as exc:
            return {}, f"unreadable output: {exc}"
        if not isinstance(info, dict):
            return {}, "unreadable output: not a JSON object"
        if cache:
            with contextlib.suppress(OSError):
                write_json_atomic(Path(cache), info)
        return info, None

    return result


#: Set by ``detbench submit`` in each job it launches: the job's id, as the scheduler names it.
JOB_ENV = "DETBENCH_JOB"


def where(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """This process's node and batch job (``DETBENCH_JOB``, else Slurm's array task
    ``JOBID_TASK`` or job id; None outside a job), as every record and env.json carry them."""
    env = os.environ if environ is None else environ
    job = env.get(JOB_ENV)
    if not job and env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return {"node": platform.node() or None, "job": job or env.get("SLURM_JOB_ID") or None}


def host_env_later() -> Callable[[], dict[str, Any]]:
    """``host_env`` started now (its child process runs meanwhile), its facts when called."""
    collected = collect_env_later()

    def result() -> dict[str, Any]:
        import torch

        info, error = collected()
        return {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_model": _lscpu_field(info.get("cpu_info") or "", "Model name"),
            "cpu_count": os.cpu_count(),
            "driver": info.get("nvidia_driver_version"),
            **where(),
            "collect_env": info,
            **({"collect_env_error": error} if error else {}),
        }

    return result


def host_env() -> dict[str, Any]:
    """Facts about this host and torch (``collect_env_error`` where collect_env failed)."""
    return host_env_later()()


def env_facts(env: Mapping[str, Any]) -> dict[str, str | None]:
    """The environment of a run in a few comparable strings (None where not known)."""
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
        # ``cuda_build``; runs before schema 2 called it ``cuda_runtime``.
        "cuda": text(
            worker.get("cuda_build") or worker.get("cuda_runtime") or host.get("torch_cuda")
        ),
        "cudnn": text(worker.get("cudnn_version")),
        "torch": text(host.get("torch")),
        "python": text(host.get("python")),
        "cpu": text(host.get("cpu_model") or host.get("cpu")),
        "cpu_capability": text(worker.get("cpu_capability")),
        "threads": text(worker.get("num_threads")),
    }


#: The facts that make two runs comparable, in the order a report lists them.
ENV_FACTS = tuple(env_facts({}))


def stamped_dir(label: str) -> Path:
    """``results/STAMP-LABEL``: a new run's default directory, stamped with the UTC time."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{stamp}-{label}"
