"""What every detbench child process shares with its parent, whoever starts it: the runner's
workers, torchrun's ranks, locate's recording processes and audit's probe.

- how a child dies with its parent (``die_with_parent`` in the child; ``dies_with_us`` as a
  ``Popen(preexec_fn=...)`` in the parent), so no orphan measures beside a run that resumes it;
- how it writes a message (``jsonable``: strict JSON, NaN as None) and a file the parent reads
  (``write_json_atomic`` from the store: the parent sees the old file or the new one);
- how its exit reads in a record (``exit_description``);
- its environment when it is not a runner's worker (``child_environment``): this checkout on
  ``PYTHONPATH`` and compile caches of its own (``fresh_compile_caches``).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from detbench.store.results import write_text_atomic

#: The directory holding the ``detbench`` package (a checkout's root, or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
#: Seconds a workload's worker may take before it is killed, unless the run says otherwise.
DEFAULT_TIMEOUT = 900.0
#: The exit status of a worker whose CUDA context is no longer usable after a workload's error:
#: the runner gives the workloads it has not run to a fresh worker.
EXIT_DEVICE_LOST = 75
#: The name (/proc/PID/comm) a worker takes once it dies with its runner.
ARMED_NAME = b"detbench-worker"

_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15


def _prctl() -> Callable[..., int] | None:
    """Linux's prctl(2), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int | None = None, name: bytes | None = None) -> None:
    """Ask Linux to kill this process when its parent dies, even by SIGKILL. ``parent_pid``: the
    parent expected (default: the current one); if it died before the request was made, exit
    now. ``name``: a process name (/proc/PID/comm) to take once the request is in place, so the
    parent can tell from /proc that it was made. Nothing off Linux."""
    prctl = _prctl()
    if prctl is None:
        return
    parent = os.getppid() if parent_pid is None else parent_pid
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:
        os._exit(1)
    if name is not None:
        prctl(_PR_SET_NAME, name)


def dies_with_us() -> Callable[[], None] | None:
    """For ``Popen(preexec_fn=...)``: the child gets SIGKILL when this process dies, even by
    SIGKILL. prctl is looked up here, before the fork. None off Linux."""
    prctl = _prctl()
    if prctl is None:
        return None

    def request() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))

    return request


def jsonable(obj: Any) -> Any:
    """``obj`` as strict JSON: NaN and infinities become None, unknown objects (a torch.dtype in
    a workload's params) their ``str``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    return str(obj)


def exit_description(code: int | None) -> str:
    """How a child's exit status reads in a record: "exit code 3", "killed by signal SIGKILL"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


#: The environment variables that say where a process's compile caches live, and turn off the
#: caches that would carry a compiled graph from one process to the next.
COMPILE_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
NO_CACHE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def fresh_compile_caches(env: dict[str, str]) -> str:
    """Give a child's environment ``env`` compile caches of its own, in a new empty directory
    (returned, for the caller to remove when the child is done): inductor's cache and Triton's
    inside it, the FX-graph and autograd caches off. Every worker gets them, compiling or not:
    importing ``torch._dynamo`` (the worker does at start) makes inductor's cache directory, by
    default a ``torchinductor_<user>`` directory in the temporary directory shared by every
    process of the user; and a cached autotuning choice or graph from another process would
    hide the nondeterminism of compiling."""
    import tempfile

    root = tempfile.mkdtemp(prefix="detbench-inductor-")
    env["TORCHINDUCTOR_CACHE_DIR"] = root
    env["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
    env.update(NO_CACHE_ENV)
    return root


@contextlib.contextmanager
def child_environment() -> Iterator[dict[str, str]]:
    """The environment of a detbench child process that is not a runner's worker (locate's
    recording processes, audit's probe): this checkout on ``PYTHONPATH`` and compile caches of
    its own (``fresh_compile_caches``), removed when the block ends."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    root = fresh_compile_caches(env)
    try:
        yield env
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- one-shot children: a job file in, a result file out --------------------------------------
#
# locate's recording processes and audit's probe (and, in the same shape, torchrun's ranks:
# ``distributed/rank.py`` reads ``job.json`` and writes its result atomically) are started with
# the path of a JSON job; the job names the result file (``"out"``), which the child writes in one
# rename, so the parent reads a whole result or none. A runner's worker is the one child that
# talks while it runs (several records, a go-ahead before each timing pass): it streams the same
# strict JSON (``jsonable``) as lines over a pipe instead (``run/child.py``).


class ChildFailed(Exception):
    """A one-shot child ended without its result: why, in one line (with its stderr's tail)."""


def run_child(
    module: str,
    job: dict[str, Any],
    workdir: Path,
    name: str,
    timeout: float,
    environment: Callable[[dict[str, str]], dict[str, str]] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """Start ``python -m MODULE JOB.json`` in ``child_environment()``, with ``job`` written to
    ``workdir/NAME.job.json`` and its result expected in ``workdir/NAME.json``; the result, or
    ``ChildFailed``. The child dies with this process (``child_main`` asks for it).
    ``environment``: what to make of the child environment before the child starts (a mode's
    ``Mode.environment``: its ``CUBLAS_WORKSPACE_CONFIG``, as a run's worker gets it); None
    keeps it as it is. ``label``: what the child is called in ``ChildFailed``'s message
    (default: its module)."""
    import json
    import subprocess

    label = label or f"the {module} process"
    out = workdir / f"{name}.json"
    path = workdir / f"{name}.job.json"
    path.write_text(json.dumps(jsonable({**job, "out": str(out)}), sort_keys=True))
    with child_environment() as env:
        if environment is not None:
            env = environment(env)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", module, str(path), str(os.getpid())],
                capture_output=True, text=True, env=env, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise ChildFailed(f"{label} took over {timeout:.0f} s") from None
    if proc.returncode != 0 or not out.exists():
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise ChildFailed(f"{label} failed ({proc.returncode}): {tail}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def child_main(work: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str]) -> int:
    """The child side of ``run_child``: die with the parent, read the job (``argv``: JOB.json and
    the parent's pid), do ``work(job)`` and write its result atomically where the job says."""
    import json

    die_with_parent(int(argv[1]) if len(argv) > 1 else None)
    job = json.loads(Path(argv[0]).read_text())
    result = work(job)
    write_text_atomic(Path(job["out"]), json.dumps(jsonable(result), allow_nan=False))
    return 0
