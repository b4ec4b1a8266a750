"""How busy the host was while a workload was timed: the record's ``host_load`` (fields in
docs/report-and-results.md). ``other_cpu`` is the busy jiffies of ``/proc/stat`` less this
process's own CPU time, over wall time x ``cpus``, split into the run's own processes and
foreign ones; the GPU's part is ``procs.gpu_others``'s. Linux only; nothing here raises.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from detbench.worker import procs

PROC_STAT = Path("/proc/stat")
#: /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal (guest time is
#: inside user and nice already).
IDLE_FIELDS = (3, 4)  # idle, iowait
STEAL_FIELD = 7


def _stat() -> tuple[list[int], int] | None:
    """The ``cpu`` line's counters (jiffies) and the number of CPUs; None where unreadable."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    total = next((ln for ln in lines if ln.startswith("cpu ")), None)
    if total is None:
        return None
    cpus = sum(1 for ln in lines if ln.startswith("cpu") and ln[3:4].isdigit())
    return [int(x) for x in total.split()[1:9]], max(cpus, 1)


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Probe:
    """Counters read at ``start`` and turned into ``host_load`` at ``stop``; ``run_pid``: the
    runner's pid, whose descendants are the run's own processes."""

    def __init__(self, device: str, run_pid: int | None = None) -> None:
        self.device = device
        self.run_pid = run_pid
        self._t0 = 0.0
        self._own0 = 0.0
        self._stat0: tuple[list[int], int] | None = None
        self._unix0 = 0.0
        self._run0: dict[int, int] | None = None
        self._gpu0: dict[int, bool] = {}

    def start(self) -> None:
        self._run0 = run_cpu_ticks(self.run_pid)
        if self.device == "cuda":
            self._gpu0 = procs.gpu_processes(self.run_pid) or {}
        self._t0, self._own0, self._stat0 = time.monotonic(), _own_cpu(), _stat()
        self._unix0 = time.time()

    def stop(self) -> dict[str, Any]:
        seconds = time.monotonic() - self._t0
        own = _own_cpu() - self._own0
        end = time.time()
        run_after = run_cpu_ticks(self.run_pid)
        cpu_keys = ("cpus", "load1", "other_cpu", "other_cpu_own", "other_cpu_foreign", "steal")
        out: dict[str, Any] = dict.fromkeys(cpu_keys)
        out.update(seconds=seconds, start_unix=self._unix0, end_unix=end)
        with contextlib.suppress(OSError):
            out["load1"] = os.getloadavg()[0]
        now = _stat()
        if self._stat0 is None or now is None:
            out["note"] = "no /proc/stat on this host: CPU use by other processes unknown"
        else:
            before, cpus = self._stat0
            after = now[0]
            delta = [b - a for a, b in zip(before, after, strict=True)]
            jiffies = sum(delta)
            if jiffies > 0:
                hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
                busy = (jiffies - sum(delta[i] for i in IDLE_FIELDS) - delta[STEAL_FIELD]) / hz
                out["other_cpu"] = other = min(1.0, max(0.0, (busy - own) / (jiffies / hz)))
                out["steal"] = delta[STEAL_FIELD] / jiffies
                if self._run0 is not None and run_after is not None:
                    ticks = sum(t - self._run0.get(p, 0) for p, t in run_after.items())
                    out["other_cpu_own"] = mine = min(other, max(0, ticks) / jiffies)
                    out["other_cpu_foreign"] = other - mine
            out["cpus"] = cpus
        if self.device == "cuda":
            out.update(procs.gpu_others(int(self._unix0 * 1e6), self._gpu0, self.run_pid))
        return out


def run_cpu_ticks(run_pid: int | None) -> dict[int, int] | None:
    """CPU ticks of each of the run's processes but this one; None where /proc cannot say."""
    family = None if run_pid is None else procs.descendants(run_pid)
    if family is None:
        return None
    me = os.getpid()
    ticks = {}
    for pid in family:
        if pid == me:
            continue
        stat = procs.proc_stat(pid)
        if stat is not None:
            ticks[pid] = int(stat[11]) + int(stat[12])  # utime, stime (fields 14 and 15)
    return ticks
