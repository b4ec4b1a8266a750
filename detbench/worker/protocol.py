"""The one protocol every detbench child process speaks with its parent, described here once.

**One main, one job in, JSON lines out.** Every child is ``python -m detbench.worker.child``
(``child_command``). It reads one job, a JSON object, from the first line of stdin (``--job -``)
or a file; the job's ``kind`` names the function that does it (``package.module:function``,
imported only in the child, so this layer names no module above it), which takes the job and a
``Channel``. Every message back is one strict JSON object on a line, with a ``type``, flushed
at once, to a pipe (``--fd``) or appended to a file (``--out``):

- ``detbench.run.child:pair``, a run's worker (``run.supervise``): its job on stdin; ``loaded``,
  ``ready``, then the answers to each line of stdin (``run.child.pair`` lists them); ``exit``,
  the end of stdin (``done``) or a ``prepared`` with ``lost`` (its CUDA context is unusable)
  ends it.
- ``detbench.distributed.rank:main``, a torchrun rank (``distributed.launch``): ``DIR/job.json``;
  ``ready`` (its pid), a ``record`` per workload (with its ``index`` in the launch); ``done``.
- ``detbench.locate.worker:main``, ``detbench.run.probe:main``, ``detbench.locate.audit:main``,
  one-shot children: a job file; one ``result``, which ``run_child`` takes, else ``ChildFailed``.

A line cut short by a crash is the file's last, and ``read_messages`` leaves it out.

**What is not a message**:

- *The runner's lines on stdin* after the job: ``run.supervise`` describes them.
- *Dying with the parent*: before its imports the child asks Linux for SIGKILL when its parent
  dies (``die_with_parent``; ``dies_with_us`` for a ``Popen``), then names itself ``ARMED_NAME``
  (/proc/PID/comm), so ``ps`` and /proc tell detbench's workers apart.
- *The exit status*: 0 after the last message (``done``, ``lost`` or a ``result``). A rank exits
  3 after a recorded failure, so that torchrun, which reads no message, stops the other ranks at
  once. A child that ends without its last message crashed (``exit_description``).
- *The log*: a child's stdout and stderr (prints, faulthandler's stack) go to a log file its
  parent chose, whose tail the parent quotes for a child that died without its message.

Two children are not started by this main. **exec's boot** (``locate.scripted``): the
interpreters of ``detbench exec -- COMMAND`` import a ``sitecustomize`` (``run.execrun``) that
applies the mode of the job ``EXEC_JOB_ENV`` names, and each writes its facts to
``boot-PID.json`` at exit, since stdout and stderr are the user's. And
``store.results.collect_env_later`` runs ``torch.utils.collect_env`` in a ``python -c`` script.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

#: The directory holding the ``detbench`` package (a checkout's root, or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
#: Seconds a workload's worker may take before it is killed, unless the run says otherwise: a
#: wedged GPU or a deadlocked DataLoader must not stall a run forever.
DEFAULT_TIMEOUT = 900.0
#: The name (/proc/PID/comm) a worker takes once it dies with its runner.
ARMED_NAME = b"detbench-worker"
#: exec's boot: the job file of a run of the user's command, and the pid of its first
#: interpreter (which it sets for the interpreters it starts).
EXEC_JOB_ENV = "DETBENCH_EXEC_JOB"
EXEC_ROOT_ENV = "DETBENCH_EXEC_ROOT"

_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int | None = None, name: bytes | None = None) -> None:
    """Ask Linux to kill this process when its parent dies, even by SIGKILL; exit now if
    ``parent_pid`` (default: the current parent) died already. ``name``: the /proc/PID/comm to
    take once the request is in place, so the parent can tell it was made. Nothing off Linux."""
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
    """For ``Popen(preexec_fn=...)``: SIGKILL the child when this process dies; None off Linux."""
    prctl = _prctl()
    if prctl is None:
        return None

    def request() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))

    return request


def jsonable(obj: Any) -> Any:
    """``obj`` as strict JSON: NaN and infinities None, unknown objects their ``str``."""
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


#: The caches that would carry a compiled graph from one process to the next, turned off.
NO_CACHE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def fresh_compile_caches(env: dict[str, str]) -> str:
    """Give ``env`` inductor and Triton caches in a new directory (returned, for the caller to
    remove), the FX-graph and autograd caches off: a cached choice or graph from another process
    would hide the nondeterminism of compiling (importing ``torch._dynamo`` makes the cache)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="detbench-inductor-")
    env["TORCHINDUCTOR_CACHE_DIR"] = root
    env["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
    env.update(NO_CACHE_ENV)
    return root


@contextlib.contextmanager
def child_environment() -> Iterator[dict[str, str]]:
    """A non-worker child's environment: this checkout on ``PYTHONPATH``, caches of its own."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    root = fresh_compile_caches(env)
    try:
        yield env
    finally:
        shutil.rmtree(root, ignore_errors=True)


class ChildFailed(Exception):
    """A one-shot child ended without its result: why, in one line (with its stderr's tail)."""


class Channel:
    """Where a child's messages go: one strict JSON object per line, flushed at once."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    @classmethod
    def open(cls, path: str | None, fd: int | None) -> Channel:
        """``path`` may hold ``{rank}``: torchrun's ``RANK`` (each rank a file of its own)."""
        if fd is not None:
            return cls(os.fdopen(fd, "wb"))
        assert path is not None
        return cls(open(path.replace("{rank}", os.environ.get("RANK", "0")), "ab"))

    def send(self, msg: dict[str, Any], sort_keys: bool = True) -> None:
        line = json.dumps(jsonable(msg), sort_keys=sort_keys, allow_nan=False) + "\n"
        self.stream.write(line.encode())
        self.stream.flush()  # a buffered writer's flush writes the whole message, however large

    def result(self, result: dict[str, Any]) -> int:
        """A one-shot child's one ``result`` message, keys in the child's order; exit status 0."""
        self.send({"type": "result", "result": result}, sort_keys=False)
        return 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()


def read_messages(path: Path) -> list[dict[str, Any]]:
    """The messages a child appended to ``path``, but a last line cut short by its death."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def read_job(where: str) -> dict[str, Any]:
    """The job: the first line of stdin (``-``: the rest stays for later lines), or a JSON file."""
    text = sys.stdin.buffer.readline() if where == "-" else Path(where).read_bytes()
    job: dict[str, Any] = json.loads(text)
    return job


def resolve(kind: str) -> Callable[[dict[str, Any], Channel], int]:
    """The function a job's ``kind`` names (``package.module:function``), imported only now."""
    module, _, name = kind.partition(":")
    if not module or not name:
        raise ValueError(f"a job's kind is 'package.module:function', not {kind!r}")
    found = importlib.import_module(module)
    work: Callable[[dict[str, Any], Channel], int] = getattr(found, name)
    return work


def child_command(
    python: str,
    job: str = "-",
    out: str | None = None,
    fd: int | None = None,
    parent: int | None = None,
) -> list[str]:
    """The command line of the one child main (``detbench.worker.child``)."""
    cmd = [python, "-m", "detbench.worker.child", "--job", job]
    cmd += ["--fd", str(fd)] if fd is not None else ["--out", str(out)]
    return cmd + ([] if parent is None else ["--parent", str(parent)])


def run_child(
    kind: str,
    job: dict[str, Any],
    workdir: Path,
    name: str,
    timeout: float,
    environment: Callable[[dict[str, str]], dict[str, str]] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """Run a one-shot child of ``kind`` in ``workdir`` and ``child_environment()``: its
    ``result``, or ``ChildFailed`` (naming it ``label``). ``environment`` edits the child's
    environment (a mode's ``Mode.environment``)."""
    import subprocess

    label = label or f"the {kind} process"
    out = workdir / f"{name}.jsonl"
    path = workdir / f"{name}.job.json"
    path.write_text(json.dumps(jsonable({**job, "kind": kind, "out": str(out)}), sort_keys=True))
    with child_environment() as env:
        if environment is not None:
            env = environment(env)
        try:
            proc = subprocess.run(
                child_command(sys.executable, str(path), str(out), parent=os.getpid()),
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise ChildFailed(f"{label} took over {timeout:.0f} s") from None
    results = [m["result"] for m in read_messages(out) if m.get("type") == "result"]
    if proc.returncode != 0 or not results:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise ChildFailed(f"{label} failed ({proc.returncode}): {tail}")
    result: dict[str, Any] = results[-1]
    return result
