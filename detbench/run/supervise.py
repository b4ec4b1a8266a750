"""One worker's life seen from the runner: spawn, messages, limits, and how it ended.

The protocol, over the worker's stdin (one line each) and a pipe of JSON lines back:

1. The runner spawns the one child main and writes the job (one JSON line, of kind
   ``WORKER_KIND``). The worker does what touches no device, sends ``loaded`` and waits for
   ``device``, then initialises CUDA, sends ``ready`` and waits for ``go``: a paired group's
   workers enter their device stage together, when the group starts.
2. After ``go`` it answers each line in turn (``run.child.pair`` lists them).
3. A worker whose CUDA context a workload left unusable says so and exits; an exit without its
   answer is a crash (the runner reads its log), a silence past the limit a timeout (killed).

With ``--devices`` each device's groups run in a thread of their own (``side_by_side``), and a
``Crew`` knows every worker alive, so that stopping the run kills them all and starts none.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from detbench.worker.cudnnlog import log_environment
from detbench.worker.protocol import child_command

TIMEOUT: dict[str, Any] = {"type": "timeout"}
#: The job's kind for the one child main (``detbench.worker.protocol``): a run's worker.
WORKER_KIND = "detbench.run.child:pair"


class WorkerProcess:
    """A worker process, its job already written, and the pipe it reports on."""

    def __init__(
        self,
        python: str,
        job: dict[str, Any],
        env: dict[str, str],
        log: Path,
        kind: str = WORKER_KIND,
    ) -> None:
        self.log = log
        if job.get("cudnn_log") is True:  # --cudnn-log: cuDNN reads its variables when it loads
            env = dict(env)
            job = {**job, "cudnn_log": log_environment(env, log.with_suffix(".cudnn.log"))}
        read_fd, write_fd = os.pipe()
        with open(log, "ab") as log_file:
            self.proc = subprocess.Popen(
                child_command(python, "-", fd=write_fd, parent=os.getpid()),
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                start_new_session=True,
            )
        os.close(write_fd)
        self.fd = read_fd
        self.buf = b""
        self.sel = selectors.DefaultSelector()
        self.sel.register(read_fd, selectors.EVENT_READ)
        self.closed = False
        self.released = False
        # ``run_pid``: to tell the run's processes on the device from others'.
        self.send(json.dumps({**job, "kind": kind, "run_pid": os.getpid()}))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, line: str) -> None:
        """One line to the worker's stdin; a worker that already exited is noticed on its pipe."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()

    def release(self) -> None:
        """Let the worker begin its device stage (CUDA's initialisation), once."""
        if not self.released:
            self.released = True
            self.send("device")

    def next(self, limit: float | None) -> dict[str, Any] | None:
        """The next message; ``TIMEOUT`` after ``limit`` seconds of silence; None once it exited."""
        deadline = None if limit is None else time.monotonic() + limit
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.sel.select(wait):
                return TIMEOUT
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)
        return msg

    def answer(
        self, limit: float | None, on_record: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        """The worker's next message that is not a ``record`` (each given to ``on_record``)."""
        while True:
            msg = self.next(limit)
            if msg is None or msg is TIMEOUT or msg.get("type") != "record":
                return msg
            on_record(msg["record"])

    def ready(self, limit: float | None) -> dict[str, Any] | None:
        """The next message but ``loaded`` (only a test waits for it), within ``limit`` in all."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = self.next(wait)
            if msg is None or msg is TIMEOUT or msg.get("type") != "loaded":
                return msg

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def finish(self) -> int | None:
        """Close the pipe and reap the process (killed if it has not exited within 60 s)."""
        if not self.closed:
            self.closed = True
            self.sel.close()
            os.close(self.fd)
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def log_tail(path: Path, lines: int = 6) -> str:
    """What a dead worker's log says: for a fatal signal, Python's error line and the innermost
    frames that faulthandler wrote (where the workload crashed); else the log's last lines."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    fatal = [i for i, line in enumerate(text) if line.startswith("Fatal Python error")]
    if fatal:
        after = text[fatal[-1] :]
        frames = [line.strip() for line in after if line.strip().startswith("File ")][:3]
        return " | ".join([after[0].strip(), *frames])
    return " | ".join(text[-lines:])


def gpu_visible(name: str, environ: Mapping[str, str]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a worker of GPU ``name`` ("cuda:N"): that GPU alone, so
    "cuda" cannot reach another. N counts among the GPUs the user's own setting leaves."""
    index = int(name.split(":")[1])
    given = environ.get("CUDA_VISIBLE_DEVICES")
    return [v.strip() for v in given.split(",")][index] if given else str(index)


class Stopped(Exception):
    """The run is being stopped (Ctrl-C, or another device's failure): no new worker starts."""


class Crew:
    """The workers alive in a run: ``halt`` kills every one and refuses new ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: set[WorkerProcess] = set()
        self._stop = threading.Event()

    def spawn(
        self,
        python: str,
        job: dict[str, Any],
        env: dict[str, str],
        log: Path,
        kind: str = WORKER_KIND,
    ) -> WorkerProcess:
        with self._lock:
            if self._stop.is_set():
                raise Stopped
            worker = WorkerProcess(python, job, env, log, kind)
            self._alive.add(worker)
        return worker

    def finish(self, worker: WorkerProcess) -> int | None:
        code = worker.finish()
        with self._lock:
            self._alive.discard(worker)
        return code

    def halt(self) -> None:
        with self._lock:
            self._stop.set()
            for w in list(self._alive):
                w.kill()


def side_by_side(lanes: Sequence[Callable[[], None]], names: Sequence[str], crew: Crew) -> None:
    """Run each of ``lanes`` in a thread of its own. Ctrl-C, or a lane that raises, halts
    ``crew``, and the first error is raised here, in the calling thread."""
    errors: list[BaseException] = []

    def main(lane: Callable[[], None]) -> None:
        try:
            lane()
        except Stopped:
            pass
        except BaseException as exc:
            errors.append(exc)
            crew.halt()

    threads = [
        threading.Thread(target=main, args=(lane,), name=f"detbench-{name}")
        for lane, name in zip(lanes, names, strict=True)
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # in slices: the calling thread must stay free to take Ctrl-C
    except BaseException:
        crew.halt()
        for t in threads:
            t.join()
        raise
    if errors:
        raise errors[0]
