"""One worker's life seen from the runner: spawn, messages, pauses, limits, and how it ended.

The protocol, over the worker's stdin (runner to worker, one line each) and a pipe of JSON lines
(worker to runner):

1. The runner spawns ``python -m detbench.worker FD RUNNER_PID`` and writes the job (one JSON
   line). The worker imports torch, applies its mode, initialises CUDA, loads the workload files
   and sends ``ready``. Then it waits for ``go``. So the next worker can be spawned early and
   pay its start-up while the current one measures: a fresh process per (mode, replicate)
   still, with its own hash seed and CUDA context, but its start-up no longer between two
   workers.
2. After ``go``, for each workload: ``start``, then ``phase: timing`` before its timing pass. The
   worker waits for the runner's ``ok``: by then the runner has paused (SIGSTOP) any worker that
   is starting up beside it, so no other process of the run uses a core while samples are taken.
   ``phase: timed`` lets the paused one continue. Then ``record``.
3. ``done`` at the end; an exit without it is a crash (the runner reads its log), a silence longer
   than the limit is a timeout (the runner kills it).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

TIMEOUT: dict[str, Any] = {"type": "timeout"}


class WorkerProcess:
    """A worker process, its job already written, and the pipe it reports on."""

    def __init__(self, python: str, job: dict[str, Any], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.keys: list[str] = list(job["workloads"])
        read_fd, write_fd = os.pipe()
        with open(log, "ab") as log_file:
            self.proc = subprocess.Popen(
                [python, "-m", "detbench.worker", str(write_fd), str(os.getpid())],
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
        self.paused = False
        self.closed = False
        self.send(json.dumps(job))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, line: str) -> None:
        """One line to the worker's stdin; a worker that already exited is noticed on its pipe."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()

    def pause(self) -> bool:
        """Stop a worker that is starting up while another takes timing samples. True once the
        kernel reports it stopped (SIGSTOP is delivered asynchronously: waiting for it means no
        sample starts while the neighbour still runs), or when it has already exited."""
        if not self.paused and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True
        return self.stopped(wait=1.0)

    def stopped(self, wait: float = 0.0) -> bool:
        """Whether the process is stopped or gone, per /proc (waiting up to ``wait`` seconds);
        True where /proc is not there to ask (not Linux)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
            except FileNotFoundError:
                return True
            except OSError:
                return True
            state = stat.rsplit(")", 1)[1].split()[0]  # the field after the command name
            if state in ("T", "t", "Z", "X"):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)

    def resume(self) -> None:
        if self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def next(self, limit: float | None) -> dict[str, Any] | None:
        """The next message; ``TIMEOUT`` after ``limit`` seconds of silence; None when the worker
        closed its pipe (it exited)."""
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

    def kill(self) -> None:
        self.resume()  # a stopped process dies on SIGKILL too; continuing it first is tidier
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def finish(self) -> int | None:
        """Close the pipe and reap the process (killed if it has not exited within 60 s)."""
        if not self.closed:
            self.closed = True
            self.resume()
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


def exit_description(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def lost_keys(
    keys: list[str], remaining: list[str], in_flight: str | None, started: bool
) -> list[str]:
    """The workloads a worker that ended early takes down with it: the one in flight; or, when
    it died before it was ready, or between workloads without progress, all the rest (a fresh
    worker would only fail the same way). The others go to a fresh worker."""
    if in_flight is not None:
        return [in_flight]
    progressed = len(remaining) < len(keys)
    return [] if started and progressed else list(remaining)
