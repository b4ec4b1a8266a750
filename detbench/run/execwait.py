"""The wait for one run of a user's command to end, for ``detbench exec``.

A run is killed (its process group and every process below it: torchrun starts each rank in a
session of its own) past its limit, and when it is **stuck** (``Stuck``, read from ``/proc``):

* **hung at exit**: an interpreter wrote its at-exit report (``boot-PID.json``) and still lives
  ``EXIT_GRACE`` seconds later;
* **a rank left behind**: a torchrun rank (``RANK`` in its environment, but not its parent's)
  lives on after another rank ended, under ``IDLE_SHARE`` of a core for ``RANK_GRACE`` seconds
  (gloo's thread wakes every 10 ms, so a deadlocked rank is not at 0). A DDP rank on gloo
  deadlocks so at exit: the process group's destructor joins gloo's thread holding the GIL,
  which that thread waits for (``docs/measured.md``).

Either can hang the untimed first run, which has no limit of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Seconds an interpreter may take to end after its at-exit report. A plain interpreter ends in
#: well under a second; one that frees a large CUDA context takes seconds.
EXIT_GRACE = 30.0
#: Seconds a rank may stay idle after another rank ended: a rank at work uses a core, if only to
#: launch kernels; one uploading its checkpoint waits on the network, and gets a minute.
RANK_GRACE = 60.0
IDLE_SHARE = 0.01
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: How often the run's folder and processes are looked at while the run lasts.
POLL = 0.5


@dataclass(frozen=True)
class Proc:
    """One process of the run, as ``/proc`` shows it."""

    pid: int
    ppid: int
    cpu_ticks: int
    zombie: bool


def tree(root: int) -> dict[int, Proc]:
    """``root`` and every process below it; empty where there is no ``/proc``."""
    every: dict[int, Proc] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                f = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()
                every[int(name)] = Proc(int(name), int(f[1]), int(f[11]) + int(f[12]), f[0] == "Z")
    below: dict[int, list[int]] = {}
    for p in every.values():
        below.setdefault(p.ppid, []).append(p.pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in every and pid not in out:
            out[pid] = every[pid]
            todo += below.get(pid, [])
    return out


def _has_rank(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"\0RANK=" in b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    return False


class Stuck:
    """What the run's processes did while it lasted: ``check`` names one stuck."""

    def __init__(self, folder: Path, root: int, grace: float, rank_grace: float) -> None:
        self.folder = folder
        self.root = root
        self.grace = grace
        self.rank_grace = rank_grace
        self.reported: dict[int, float] = {}  # pid: when its at-exit report was first seen
        self.ranks: set[int] = set()  # every rank seen
        self.window: dict[int, tuple[int, float]] = {}  # rank: (its CPU ticks, when read)
        self.ranked: dict[int, bool] = {}  # pid: whether it has RANK in its environment

    def check(self, now: float) -> tuple[str, int] | None:
        """("hung at exit" | "left behind", pid), or None."""
        procs = {p.pid: p for p in tree(self.root).values() if not p.zombie}
        for path in self.folder.glob("boot-*.json"):
            with contextlib.suppress(ValueError):
                self.reported.setdefault(int(path.stem.split("-", 1)[1]), now)
        for pid, since in self.reported.items():
            if pid in procs and now - since > self.grace:
                return "hung at exit", pid
        for pid in procs:
            if not self.ranked.get(pid):  # read again: a child just forked has its parent's
                self.ranked[pid] = _has_rank(pid)
        ranks = {
            pid
            for pid, p in procs.items()
            if self.ranked[pid] and not self.ranked.get(p.ppid, False)
        }
        self.ranks |= ranks
        if not self.ranks - ranks:  # no rank has ended yet
            return None
        for pid in ranks:
            ticks = procs[pid].cpu_ticks
            first, since = self.window.setdefault(pid, (ticks, now))
            if now - since < self.rank_grace:
                continue
            if (ticks - first) / TICKS < IDLE_SHARE * (now - since):
                return "left behind", pid
            self.window[pid] = (ticks, now)  # it worked: a fresh window
        return None


def stuck_words(stuck: dict[str, Any]) -> str:
    """What ``Stuck.check`` found, in words: ``hung at exit (pid 4242 ...)``."""
    if stuck["how"] == "hung at exit":
        return (
            f"hung at exit (pid {stuck['pid']} still lived {EXIT_GRACE:g} s after its at-exit "
            "report)"
        )
    return (
        f"left a rank behind (pid {stuck['pid']} idle {RANK_GRACE:g} s after another rank "
        "ended: deadlocked)"
    )


def kill_tree(root: int) -> None:
    """SIGKILL to ``root``'s process group and to every process below it (``tree``)."""
    below = tree(root)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    kill_tree(proc.pid)
    proc.wait()


def wait(
    proc: subprocess.Popen[bytes], limit: tuple[float, str] | None, folder: Path
) -> tuple[str, int | None, tuple[str, int] | None]:
    """(status, exit code, what was stuck): ("ok", code, None), (``limit``'s status, None,
    None) once killed past ``limit`` (seconds, status), or ("hung", None, (how, pid)). A Ctrl-C
    kills the process group and goes on up: the command's own session hears none."""
    deadline = time.monotonic() + limit[0] if limit else None
    watch = Stuck(folder, proc.pid, EXIT_GRACE, RANK_GRACE)
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return "ok", proc.wait(timeout=POLL), None
            now = time.monotonic()
            if deadline is not None and now > deadline:
                assert limit is not None
                _kill(proc)
                return limit[1], None, None
            stuck = watch.check(now)
            if stuck is not None:
                _kill(proc)
                return "hung", None, stuck
    except BaseException:
        _kill(proc)
        raise
