"""The one protocol every detbench child process speaks with its parent, described here once.

**One main, one job in, JSON lines out.** Every child is ``python -m detbench.worker.child``
(``child_command``). It reads one job, a JSON object, from the first line of stdin (``--job -``)
or a file (``--job PATH``); the job's ``kind`` names the function that does it
(``package.module:function``, imported only in the child, so this layer names no module above
it; the job's writer names its own), which takes the job and a ``Channel``. Every message back
is one strict JSON object on a line (``jsonable``: NaN as None), with a ``type``, flushed at
once, to a file descriptor (``--fd``: a pipe) or appended to a file (``--out``):

- ``detbench.run.child:pair``, a run's worker (spawned by ``run.supervise``), a member of a
  paired group: its job on stdin; ``loaded``, ``ready``, then the messages that answer each line
  of stdin (``run.child.pair`` lists them); ``exit`` or the end of stdin ends it (``done`` at the
  end of stdin). A ``prepared`` with ``lost`` ends it too: its CUDA context is unusable, and a
  fresh worker takes over.
- ``detbench.distributed.rank:main``, a torchrun rank (``distributed.launch``): ``DIR/job.json``;
  ``ready`` (its pid), a ``record`` per workload (with its ``index`` in the launch); ``done``.
- ``detbench.locate.worker:main`` (locate's recording process), ``detbench.run.probe:main`` (the
  op probe), ``detbench.locate.audit:main`` (audit's probe), one-shot children: a job file; one
  ``result``, which the parent (``run_child``) takes, or ``ChildFailed`` where there is none.

A line cut short by a crash is the file's last, and ``read_messages`` leaves it out.

**What is not a message**, each for a reason:

- *The runner's lines on stdin*: after the job, a worker reads ``device`` (begin CUDA's
  initialisation) and ``go`` (begin measuring); ``run.supervise`` describes the exchange. The
  other kinds read nothing after the job.
- *Dying with the parent*: the child asks Linux for SIGKILL when its parent dies
  (``die_with_parent``; ``dies_with_us`` for a parent's ``Popen``), before its imports, then names
  itself ``ARMED_NAME`` (/proc/PID/comm), so ``ps`` and /proc tell detbench's workers apart.
- *The exit status*: 0 after the last message (``done``, ``lost`` or a ``result``). A rank exits
  3 after a recorded failure, so that torchrun, which reads no message, stops the other ranks at
  once. A child that ends without its last message crashed, and its status says how
  (``exit_description``).
- *The log*: a child's stdout and stderr (the workloads' prints, faulthandler's stack on a fatal
  signal) go to a log file its parent chose; of a child that died without its message, the
  parent quotes the log's tail in the record (``crashed``).

Two children are not started by this main. **exec's boot**: ``detbench exec -- COMMAND`` runs
the user's own command, whose interpreters import a ``sitecustomize`` that ``run.execrun`` put
first on their path; where ``EXEC_JOB_ENV`` names a job file, the boot (``locate.scripted``)
applies the job's mode before the script's first line, the first interpreter marks itself in
``EXEC_ROOT_ENV`` (its pid) for the ones it starts, and each writes its facts to a
``boot-PID.json`` file at its exit: the command's stdout and stderr are the user's. And
``store.results.collect_env_later`` runs ``torch.utils.collect_env`` as a ``python -c`` script
that prints one JSON object (the store sits below this layer, and that child runs no detbench
code).
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
#: interpreter (set by that interpreter for the ones it starts).
EXEC_JOB_ENV = "DETBENCH_EXEC_JOB"
EXEC_ROOT_ENV = "DETBENCH_EXEC_ROOT"

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


#: The caches that would carry a compiled graph from one process to the next, turned off.
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


# --- the one protocol: a job in, JSON lines out ---------------------------------------------


class ChildFailed(Exception):
    """A one-shot child ended without its result: why, in one line (with its stderr's tail)."""


class Channel:
    """Where a child's messages go (``--out PATH``, appended; ``--fd N``): one strict JSON object
    per line (``jsonable``), flushed at once, so the parent reads every message whole."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    @classmethod
    def open(cls, path: str | None, fd: int | None) -> Channel:
        """``path`` may hold ``{rank}``: torchrun's ``RANK`` of this process (one command line
        starts every rank, each with a file of its own)."""
        if fd is not None:
            return cls(os.fdopen(fd, "wb"))
        assert path is not None
        return cls(open(path.replace("{rank}", os.environ.get("RANK", "0")), "ab"))

    def send(self, msg: dict[str, Any], sort_keys: bool = True) -> None:
        line = json.dumps(jsonable(msg), sort_keys=sort_keys, allow_nan=False) + "\n"
        self.stream.write(line.encode())
        self.stream.flush()  # a buffered writer's flush writes the whole message, however large

    def result(self, result: dict[str, Any]) -> int:
        """A one-shot child's answer, its one ``result`` message, its keys in the order the child
        made them (a probe's workloads in the run's order); the exit status 0."""
        self.send({"type": "result", "result": result}, sort_keys=False)
        return 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()


def read_messages(path: Path) -> list[dict[str, Any]]:
    """The messages a child appended to ``path`` (none if it wrote none), but a last line cut
    short (the child died while writing it)."""
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
    """The job: the first line of stdin (``-``: the rest of stdin stays for the parent's later
    lines), or a JSON file."""
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
    """Run a one-shot child: the job of ``kind`` (see ``resolve``) written to
    ``workdir/NAME.job.json``, its messages in ``workdir/NAME.jsonl``, in
    ``child_environment()``; its ``result`` message, or ``ChildFailed``. The child dies with this
    process. ``environment``: what to make of the child environment before the child starts (a
    mode's ``Mode.environment``: its ``CUBLAS_WORKSPACE_CONFIG``, as a run's worker gets it);
    None keeps it as it is. ``label``: what the child is called in ``ChildFailed``'s message
    (default: its kind)."""
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
