"""The worker: one fresh process for one (mode, replicate) of a paired group, running many
workloads (``supervise.WORKER_KIND``). ``detbench.run.supervise`` describes its exchange with the
runner, ``pair`` the lines it answers. It applies the mode before any CUDA work; the runner
alone writes the results file."""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import time
from typing import Any

import torch

from detbench.core.modes import Mode, current_flags
from detbench.core.workload import load_file, registry
from detbench.distributed.launch import (
    LaunchedTiming,
    PairedLaunch,
    close_kept,
    run_distributed,
)
from detbench.store.results import where
from detbench.worker.applied import WorkerSettings
from detbench.worker.devenv import device_env
from detbench.worker.memory import footprint_bytes, free_bytes, warm_libraries
from detbench.worker.paired import PairedTiming
from detbench.worker.passes import run_workload
from detbench.worker.protocol import Channel


def _first_stage(job: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What touches no device: the mode applied and read back, torch's threads, the workload
    files loaded. Returns (mode, the worker's settings, the registry of workloads)."""
    mode = Mode(**job["mode"])
    ws = WorkerSettings.start(mode)  # read back at once: each workload is compared with it
    flags = current_flags()
    if flags != {k: getattr(mode, k) for k in flags}:
        raise RuntimeError(f"mode {mode.name} did not apply: torch reports {flags}")
    if job.get("num_threads"):  # parallel CPU workers: each its share of the cores
        torch.set_num_threads(int(job["num_threads"]))
    # torch.optim and use_deterministic_algorithms import torch._dynamo (about 1 s, once per
    # process): paid here, in no workload's build time, and under gc.freeze.
    with contextlib.suppress(Exception):  # without it, the workloads will say so if they need it
        importlib.import_module("torch._dynamo")
    for source in job["sources"]:
        load_file(source)
    return mode, ws, registry()


def _device_stage(device: Any) -> dict[str, Any]:
    """CUDA's context, cuBLAS's and cuDNN's handles (nothing on a CPU); the device's facts."""
    if device.type == "cuda":
        torch.cuda.init()
        torch.empty(1, device=device)  # create the context now: it belongs to start-up
        warm_libraries(device)  # so the first workload's peak memory is its own
    # What lives now lives as long as the process: the collection after each workload scans
    # only that workload's objects.
    gc.freeze()
    return device_env(device)


def _start(job: dict[str, Any], out: Channel) -> tuple[Any, Any, Any, Any] | None:
    """Both stages of start-up, each when the runner says: (mode, settings, workloads,
    device), or None where the runner ended the run before this worker's turn."""
    stdin = sys.stdin.buffer
    mode, ws, workloads = _first_stage(job)
    device = torch.device(job["device"])
    waited = time.time()
    out.send({"type": "loaded", "seconds": waited - float(job["launched_at"])})
    if stdin.readline().strip() != b"device":  # the runner ended the run meanwhile
        return None
    stage = time.time()
    facts = _device_stage(device)
    out.send(
        {
            "type": "ready",
            "startup_seconds": time.time() - float(job["launched_at"]),
            "startup_cpu_seconds": time.process_time(),  # its own work, not its waits
            "device_env": facts,
            "pid": os.getpid(),
            "device_stage": [stage, time.time()],
            "device_wait_seconds": stage - waited,
        },
    )
    if stdin.readline().strip() != b"go":  # the runner ended the run before this worker's turn
        return None
    return mode, ws, workloads, device


def _stamped(record: dict[str, Any], job: dict[str, Any], device: Any) -> dict[str, Any]:
    """What a worker adds to each record it sends: pid, order, device name and node."""
    record["worker_pid"] = os.getpid()  # to tell this run's processes from others (NVML)
    record["mode_position"] = job.get("mode_position")
    record["device_name"] = job.get("device_name") or f"{device.type}:0"
    record.update(where())  # the node and batch job (detbench submit) it ran in
    return record


Held = tuple[dict[str, Any], list[Any]]
"""What ``hold KEY`` keeps for its ``warm KEY``: the verdict's record and the step it built."""


def _hold(
    w: Any, job: dict[str, Any], mode: Mode, ws: Any, device: Any, out: Channel
) -> tuple[Held | None, dict[str, Any]]:
    """``hold KEY``: the verdict's passes, its record sent, the step it built kept but not
    warmed up. (the record and the steps kept, or None; the ``prepared`` fields)."""
    kept: list[Any] = []
    record, device_lost = run_workload(w, job, mode, ws, keep=kept.append)
    out.send({"type": "record", "record": _stamped(record, job, device)})
    gc.freeze()
    if device_lost:
        return None, {"status": "failed", "message": record.get("message"), "lost": True}
    if record.get("status") != "ok":
        kept.clear()
        return None, {"status": record.get("status"), "message": record.get("message")}
    return (record, kept), {"status": "ok"}


def _warm(
    w: Any, job: dict[str, Any], mode: Mode, ws: Any, held: Held
) -> tuple[PairedTiming | None, dict[str, Any]]:
    """``warm KEY``: the step ``_hold`` kept warmed up (built again where it kept none)."""
    record, kept = held
    if kept:
        return PairedTiming.from_verdict(w, job, mode, kept.pop(), record)
    return PairedTiming.prepare(w, job, mode, ws)


def _one(
    word: str,
    w: Any,
    job: dict[str, Any],
    state: tuple[Mode, Any, Any],
    out: Channel,
    held: Held | None,
) -> tuple[PairedTiming | LaunchedTiming | None, dict[str, Any], Held | None]:
    """``pair``'s answer to ``word KEY``: (the timing, the ``prepared`` fields, what this
    ``hold KEY`` kept or None); ``state`` = (mode, settings, device)."""
    mode, ws, device = state
    timing: PairedTiming | LaunchedTiming | None
    said: dict[str, Any]
    kept: Held | None = None
    if word == "record":  # the verdict alone: another member times this computation
        record, device_lost = run_workload(w, job, mode, ws, launch=run_distributed)
        out.send({"type": "record", "record": _stamped(record, job, device)})
        gc.freeze()
        status = "failed" if device_lost else record.get("status")
        timing, said = None, {"status": status, "message": record.get("message")}
        # The runner sizes the next members it asks at once by these (``copies_at_once``).
        said.update(
            lost=device_lost,
            footprint_bytes=footprint_bytes(device, record.get("memory")),
            free_bytes=free_bytes(device),
        )
    elif w.distributed:  # its ranks, launched for it, take the turns
        member = PairedLaunch(verdict=word == "verdict")
        record, _ = run_workload(w, job, mode, ws, launch=member)
        if word == "verdict":
            out.send({"type": "record", "record": _stamped(record, job, device)})
        timing, said = member.timing, member.said
    elif word == "hold":  # the verdict now, its warm-up when the runner says
        timing, (kept, said) = None, _hold(w, job, mode, ws, device, out)
        if kept is not None:  # as ``record KEY`` says them, but with its step kept
            said.update(
                held=True,
                footprint_bytes=footprint_bytes(device, kept[0].get("memory")),
                free_bytes=free_bytes(device),
            )
    elif word == "warm" and held is not None:
        timing, said = _warm(w, job, mode, ws, held)
    elif word == "verdict":
        verdict, said = _hold(w, job, mode, ws, device, out)
        timing, said = (None, said) if verdict is None else _warm(w, job, mode, ws, verdict)
    else:
        timing, said = PairedTiming.prepare(w, job, mode, ws)
    return timing, said, kept


def pair(job: dict[str, Any], out: Channel) -> int:
    """A timing worker of the paired phase (``detbench.worker.paired``): after start-up it does
    what each line of stdin says, in turn. Answered by ``prepared``: ``prepare KEY`` (build and
    warm up), ``record KEY`` (the verdict's passes alone, with its status, footprint and free
    memory), ``hold KEY`` (the same, its step kept: ``held``), ``warm KEY`` (the held step warmed
    up), ``verdict KEY`` (``hold`` then ``warm``); the verdicts send their ``record`` first.
    ``block`` and ``reference SECONDS`` are answered in kind, ``finish`` by ``timed`` (the
    workload freed); ``exit`` or the end of stdin ends it. A distributed workload is never held."""
    stdin = sys.stdin.buffer
    started = _start(job, out)
    if started is None:
        return 0
    mode, ws, workloads, device = started
    timing: PairedTiming | LaunchedTiming | None = None
    holding: tuple[str, Held] | None = None  # the workload held for its ``warm KEY``
    for raw in stdin:
        word, _, arg = raw.decode().strip().partition(" ")
        if word in ("prepare", "verdict", "record", "hold", "warm"):  # the rest: the key
            key = arg
            w = workloads.get(key)
            if w is None:
                raise RuntimeError(f"workload {key} is not defined in this worker's sources")
            held, holding = holding, None  # whatever the line, a held step is used or dropped
            if word in ("hold", "warm") and w.distributed:
                raise RuntimeError(f"paired worker: {word} {key}: a distributed workload")
            if word == "warm" and (held is None or held[0] != key):
                raise RuntimeError(f"paired worker: warm {key}, but {key} is not held")
            step = None if held is None else held[1]
            timing, said, kept = _one(word, w, job, (mode, ws, device), out, step)
            if kept is not None:
                holding = (key, kept)
            out.send({"type": "prepared", "workload": key, **said})
            if said.get("lost"):  # the CUDA context is unusable: a fresh worker takes over
                print(f"detbench worker: the CUDA context is unusable after {key}; exiting")
                return 0
        elif word == "reference" and timing is not None:
            out.send({"type": "reference", **timing.reference(float(arg))})
        elif word == "block" and timing is not None:
            try:
                out.send({"type": "block", **timing.block()})
            except Exception as exc:  # the runner drops this worker from the rounds left
                timing.free()
                timing = None
                out.send({"type": "block", "error": f"{type(exc).__name__}: {exc}"})
        elif word == "finish" and timing is not None:
            out.send({"type": "timed", **timing.finish()})
            timing = None
            ws.restore()  # the rounds may have set a flag again: the next workload starts in mode
            gc.freeze()
        elif word == "exit":  # the runner is closing this worker's pipe: nothing more to say
            close_kept()
            return 0
        else:
            raise RuntimeError(f"paired worker: unexpected line {raw!r}")
    close_kept()  # the ranks kept for its distributed workloads end with it
    out.send({"type": "done"})
    return 0
