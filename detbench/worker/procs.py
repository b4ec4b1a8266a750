"""Whose processes share the host and the GPU during a timing pass: the run's own (the runner,
whose pid every worker is given, and its descendants) or foreign ones, from ``/proc`` and NVML.
Nothing here raises: what cannot be read is None or a note.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from detbench.worker import nvml as nv

#: Ancestors followed up to the runner, at most (a deeper tree is not one detbench made).
MAX_DEPTH = 64


def proc_stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the name (1: ppid, 11: utime, 12: stime), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _parent(pid: int) -> int | None:
    stat = proc_stat(pid)
    return None if stat is None else int(stat[1])


def is_own(pid: int, run_pid: int) -> bool:
    """Whether ``pid`` is the runner ``run_pid`` or one of its descendants."""
    for _ in range(MAX_DEPTH):
        if pid == run_pid:
            return True
        if pid <= 1:
            return False
        parent = _parent(pid)
        if parent is None:
            return False
        pid = parent
    return False


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid``, from every thread's ``children`` file (a runner's lanes spawn
    workers from threads of their own); None where the kernel does not say."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    kids: list[int] = []
    for task in tasks:
        try:
            kids += [int(x) for x in (task / "children").read_text().split()]
        except FileNotFoundError:
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue  # the thread ended meanwhile
    return kids


def _by_scan(root: int) -> list[int]:
    """``root``'s descendants from every process's parent in /proc (slower: a fallback)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = _parent(int(entry.name))
            if ppid is not None:
                parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [root], [root]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def descendants(root: int) -> list[int] | None:
    """``root`` and every process below it; None where /proc does not have ``root``."""
    if not Path(f"/proc/{root}").exists():
        return None
    out, todo = [root], [root]
    while todo:
        kids = _children(todo.pop())
        if kids is None:
            return _by_scan(root)
        out += kids
        todo += kids
    return out


def _cuda() -> Any:
    import torch

    return torch.device("cuda")


def gpu_processes(run_pid: int | None) -> dict[int, bool] | None:
    """The processes on this worker's GPU, each with whether it is the run's own; or None."""
    nvml, handle, _ = nv.device_handle(_cuda())
    if nvml is None:
        return None
    try:
        pids = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    except Exception:
        return None
    return {p: run_pid is not None and is_own(p, run_pid) for p in pids}


def _utilisation(nvml: Any, handle: Any, since_us: int) -> dict[int, int] | str:
    """The highest SM utilisation NVML sampled for each process since ``since_us``, or why not."""
    try:
        got = nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except Exception as exc:  # NVML_ERROR_NOT_FOUND: no samples in the window
        return f"no per-process utilisation ({type(exc).__name__})"
    util: dict[int, int] = {}
    for s in got:
        util[int(s.pid)] = max(util.get(int(s.pid), 0), int(s.smUtil))
    return util


def gpu_others(since_us: int, at_start: dict[int, bool], run_pid: int | None) -> dict[str, Any]:
    """``host_load``'s GPU part: the other processes on this GPU, whose they are, their SM use."""
    nvml, handle, reason = nv.device_handle(_cuda())
    if nvml is None:
        return {"gpu_note": f"NVML unavailable ({reason})"[:200]}
    now = gpu_processes(run_pid)
    if now is None:
        return {"gpu_note": "NVML could not list the GPU's processes"}
    me = os.getpid()
    listed = {**at_start, **now}
    util = _utilisation(nvml, handle, since_us)
    sampled = util if isinstance(util, dict) else {}
    others = (set(listed) | set(sampled)) - {me}

    def peak(pids: set[int]) -> int | None:
        return None if isinstance(util, str) else max((sampled.get(p, 0) for p in pids), default=0)

    out: dict[str, Any] = {"gpu_other_processes": len(others), "gpu_other_util": peak(others)}
    if isinstance(util, str):
        out["gpu_note"] = util
    if me not in listed or run_pid is None:
        # NVML does not list this worker, so its pids are another namespace's (a container)
        keys = ("gpu_own_processes", "gpu_foreign_processes", "gpu_own_util", "gpu_foreign_util")
        out.update(dict.fromkeys(keys))
        why = (
            "no runner is known"
            if run_pid is None
            else "NVML's process ids are not this container's"
        )
        out["gpu_note"] = "; ".join(filter(None, (out.get("gpu_note"), f"whose: unknown ({why})")))
        return out
    own = {p for p in others if listed.get(p) or is_own(p, run_pid)}
    out.update(
        gpu_own_processes=len(own),
        gpu_foreign_processes=len(others - own),
        gpu_own_util=peak(own),
        gpu_foreign_util=peak(others - own),
    )
    return out
