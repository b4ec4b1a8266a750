"""How busy the host was while a workload was timed: the record's ``host_load``.

A timing taken while other processes compete for the CPU (or the GPU) measures them as much as
the workload. The worker reads the host's counters right before and right after the timing pass
(``Probe.start`` / ``Probe.stop``) and records:

- ``cpus``: the host's logical CPUs (the ``cpuN`` lines of ``/proc/stat``);
- ``load1``: the 1-minute load average at the end (``os.getloadavg``; it counts this worker too,
  and lags: a minute's exponential average);
- ``other_cpu``: the CPU time that other processes used during the pass, as a fraction of all the
  host's CPU time (busy jiffies of ``/proc/stat`` minus this process's own CPU time, over
  wall time x ``cpus``): 0.5 on a 2-core host means another process kept one core busy;
- ``steal``: the fraction of the host's CPU time the hypervisor gave to other guests;
- ``seconds``: the wall time between the two readings;
- on CUDA, ``gpu_other_processes`` (compute processes other than this one on the worker's GPU,
  from NVML) and ``gpu_other_util`` (the highest SM utilisation NVML sampled for any of them
  during the pass, percent), or ``gpu_note`` with the reason where NVML cannot say.

Linux only for the CPU counters: elsewhere the CPU keys are None and ``note`` says why. Nothing
here raises: a probe that cannot read is a note, never a failed workload.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")
#: /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal (guest time is
#: already inside user and nice, so it is not added again).
IDLE_FIELDS = (3, 4)  # idle, iowait
STEAL_FIELD = 7


def _stat() -> tuple[list[int], int] | None:
    """The aggregate ``cpu`` line's counters (jiffies) and the number of ``cpuN`` lines; None
    where /proc/stat cannot be read."""
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
    """This process's CPU seconds (user + system, every thread)."""
    t = os.times()
    return t.user + t.system


class Probe:
    """Counters read at ``start`` and turned into ``host_load`` at ``stop``; ``device``: "cpu" or
    "cuda" (the GPU part only on CUDA)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._t0 = 0.0
        self._own0 = 0.0
        self._stat0: tuple[list[int], int] | None = None
        self._nvml_t0 = 0

    def start(self) -> None:
        self._t0, self._own0, self._stat0 = time.monotonic(), _own_cpu(), _stat()
        self._nvml_t0 = int(time.time() * 1e6)  # NVML's sample timestamps are in microseconds

    def stop(self) -> dict[str, Any]:
        seconds = time.monotonic() - self._t0
        own = _own_cpu() - self._own0
        out: dict[str, Any] = {"seconds": seconds, "cpus": None, "load1": None,
                               "other_cpu": None, "steal": None}  # fmt: skip
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
                out["other_cpu"] = min(1.0, max(0.0, (busy - own) / (jiffies / hz)))
                out["steal"] = delta[STEAL_FIELD] / jiffies
            out["cpus"] = cpus
        if self.device == "cuda":
            out.update(_gpu_others(self._nvml_t0))
        return out


def _gpu_others(since_us: int) -> dict[str, Any]:
    """Other processes on this worker's GPU during the pass, from NVML (nvidia-ml-py)."""
    try:
        import pynvml as nvml  # nvidia-ml-py
        import torch

        nvml.nvmlInit()
    except Exception as exc:  # not installed, or no driver library
        return {"gpu_note": f"NVML unavailable ({type(exc).__name__}: {exc})"[:200]}
    try:
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        me = os.getpid()
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        others = {int(p.pid) for p in procs if int(p.pid) != me}
        out: dict[str, Any] = {"gpu_other_processes": len(others), "gpu_other_util": None}
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
            utils = [int(s.smUtil) for s in samples if int(s.pid) != me]
            out["gpu_other_util"] = max(utils) if utils else 0
        except Exception as exc:  # NVML_ERROR_NOT_FOUND: no samples in the window
            out["gpu_note"] = f"no per-process utilisation ({type(exc).__name__})"
        return out
    except Exception as exc:
        return {"gpu_note": f"NVML could not say ({type(exc).__name__}: {exc})"[:200]}
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
