"""One ``torchrun`` launch of a worker's distributed workloads, and its processes::

    python -m torch.distributed.run --nnodes 1 --nproc-per-node N --rdzv-backend c10d
        --rdzv-endpoint 127.0.0.1:PORT --rdzv-id UUID --max-restarts 0
        -m detbench.worker.child --job DIR/job.json --out DIR/rank{rank}.jsonl

A launch runs in a session of its own, and every process it starts carries a unique marker in its
environment (``DETBENCH_LAUNCH``). Past its limit torchrun gets SIGTERM (it stops its ranks), then
the rest SIGKILL. In every case every process with the marker is killed and waited for, so
nothing of the launch (no port) is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from detbench.store.schema import Status
from detbench.worker.protocol import dies_with_us, read_messages

#: The environment variable that marks every process of one launch (value: the launch's id).
LAUNCH_ENV = "DETBENCH_LAUNCH"
#: The job's kind for the one child main (``detbench.worker.protocol``): a torchrun rank.
RANK_KIND = "detbench.distributed.rank:main"
#: What torchrun gets after SIGTERM to stop its ranks before everything left gets SIGKILL.
TERM_GRACE = 5.0
#: How long the launcher waits for the launch's processes to be gone after SIGKILL.
KILL_WAIT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(world_size: int, marker: str, directory: Path) -> list[str]:
    """torchrun's command line (module docstring)."""
    options = {
        "--nnodes": "1",
        "--nproc-per-node": str(world_size),
        "--rdzv-backend": "c10d",
        "--rdzv-endpoint": f"127.0.0.1:{_free_port()}",
        "--rdzv-id": marker,
        "--max-restarts": "0",
        "--monitor-interval": "0.1",
    }
    job = {"--job": str(directory / "job.json"), "--out": str(directory / "rank{rank}.jsonl")}
    rank = ["-m", "detbench.worker.child", *chain(*job.items())]
    return [sys.executable, "-m", "torch.distributed.run", *chain(*options.items()), *rank]


def marked(marker: str) -> list[int]:
    """The live processes (not zombies) whose environment carries ``LAUNCH_ENV=marker``."""
    needle = f"{LAUNCH_ENV}={marker}".encode()
    out = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        if state not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_launch(proc: subprocess.Popen[bytes], marker: str, directory: Path) -> list[int]:
    """SIGKILL torchrun's session, each rank's own session and anything else with the marker,
    then reap torchrun and wait until nothing of the launch is alive. Returns what still was."""
    _kill_group(proc.pid, signal.SIGKILL)
    for messages in directory.glob("rank*.jsonl"):
        for pid in [m["pid"] for m in read_messages(messages) if m.get("type") == "ready"]:
            _kill_group(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
        alive = marked(marker)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if (not alive and proc.poll() is not None) or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@dataclass
class Launch:
    """How one launch ended: ``code`` is torchrun's exit code (None: killed at the limit),
    ``results`` workload index -> rank -> result."""

    directory: Path
    keys: list[str]
    world_size: int
    code: int | None
    timed_out: bool
    seconds: float
    limit: float | None
    results: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    leftovers: list[int] = field(default_factory=list)

    def done(self, i: int) -> bool:
        """Whether every rank finished workload ``i`` and recorded it ok."""
        res = self.results.get(i, {})
        return len(res) == self.world_size and all(
            r.get("status") == Status.OK for r in res.values()
        )

    @property
    def ended_at(self) -> int:
        """The index of the workload the launch ended in (``len(keys)`` when all were done)."""
        return next((i for i in range(len(self.keys)) if not self.done(i)), len(self.keys))

    def log_tail(self, name: str, lines: int = 6) -> str:
        try:
            text = (self.directory / name).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        fatal = [i for i, line in enumerate(text) if line.startswith("Fatal Python error")]
        if fatal:
            text = text[fatal[-1] :][:6]
        return " | ".join(line.strip() for line in text[-lines:] if line.strip())


@dataclass
class Running:
    """A launch whose ranks still run (``start``)."""

    proc: subprocess.Popen[bytes]
    marker: str
    directory: Path
    keys: list[str]
    world_size: int
    limit: float | None
    t0: float

    def alive(self) -> bool:
        return self.proc.poll() is None

    def snapshot(self) -> Launch:
        """The launch as it stands: the results the ranks wrote so far."""
        return self._launch(None, False, [])

    def _launch(self, code: int | None, timed_out: bool, leftovers: list[int]) -> Launch:
        """The ``Launch``, with the results the ranks' files hold now."""
        seconds = time.monotonic() - self.t0
        out = Launch(
            self.directory, self.keys, self.world_size, code, timed_out, seconds, self.limit
        )
        out.leftovers = leftovers
        for r in range(self.world_size):
            for m in read_messages(self.directory / f"rank{r}.jsonl"):
                if m.get("type") == "record":
                    out.results.setdefault(int(m["index"]), {})[r] = m["record"]
        return out

    def end(self, wait: float | None, timed_out: bool = False) -> Launch:
        """Wait up to ``wait`` seconds for torchrun to end (then SIGTERM, as on Ctrl-C), kill
        whatever is left of the launch, and read the ranks' results."""
        code: int | None = None
        try:
            try:
                code = self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(self.proc.pid, signal.SIGTERM)  # torchrun stops its ranks
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=TERM_GRACE)
        finally:  # also on Ctrl-C or a failure here: nothing of the launch outlives it
            leftovers = kill_launch(self.proc, self.marker, self.directory)
        return self._launch(None if timed_out else code, timed_out, leftovers)


def start(
    job: dict[str, Any], directory: Path, world_size: int, env: dict[str, str], limit: float | None
) -> Running:
    """Start one torchrun launch of ``world_size`` ranks for the workloads ``job["keys"]``."""
    directory.mkdir(parents=True, exist_ok=True)
    job = {**job, "kind": RANK_KIND, "directory": str(directory)}
    (directory / "job.json").write_text(json.dumps(job, sort_keys=True))
    marker = uuid.uuid4().hex
    cmd = _command(world_size, marker, directory)
    t0 = time.monotonic()
    with open(directory / "launcher.log", "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**env, LAUNCH_ENV: marker},
            start_new_session=True,
            preexec_fn=dies_with_us(),
        )
    return Running(proc, marker, directory, list(job["keys"]), world_size, limit, t0)
