"""The worker: one fresh process for one (mode, replicate), running many workloads.

Started by the runner as ``python -m detbench.run.child FD RUNNER_PID``; the protocol (the job and
``go`` on stdin, JSON messages on file descriptor ``FD``) is described in
``detbench.run.supervise``. It
applies the mode before any CUDA work, then for each workload: seeds every generator, builds the
workload, runs the fingerprint pass and the timing pass, and sends one record per workload. Its
stdout and stderr (the workloads' own prints and warnings) go to a log file the runner chose. The
runner alone writes the results file.

Its start-up has two stages. The first (imports, the mode, the workload files) touches no device
and runs while the worker before it measures (stopped by the runner during that worker's timing
passes). The second (CUDA's initialisation, the context, cuBLAS's and cuDNN's handles) waits for
the runner's ``device`` line, which comes once the worker before it has taken its last timing
sample: so no timing shares its GPU with detbench's next worker, not even one that is stopped
while holding a context (issue 29: the H100 and H200 runs of 2026-11-26 showed the next worker's
context beside 146 of 736 and 102 of 824 timings).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import os
import sys
import time
from typing import Any, BinaryIO

from detbench.core.modes import Mode, current_flags
from detbench.core.workload import load_file, registry
from detbench.store.results import where
from detbench.worker.applied import WorkerSettings
from detbench.worker.protocol import ARMED_NAME, EXIT_DEVICE_LOST, die_with_parent, jsonable


def _send(out: BinaryIO, msg: dict[str, Any]) -> None:
    out.write((json.dumps(jsonable(msg), sort_keys=True, allow_nan=False) + "\n").encode())
    out.flush()  # a buffered writer's flush writes the whole message, however large


def _first_stage(job: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What touches no device: the mode applied and read back, torch's threads, the workload
    files loaded. Returns (mode, the worker's settings, the registry of workloads)."""
    import torch

    mode = Mode(**job["mode"])
    # The flags, then the settings (a setting this torch lacks is noted, and its workloads are
    # recorded unsupported); read back at once, so each workload is compared with this state.
    ws = WorkerSettings.start(mode)
    flags = current_flags()
    expected = {k: getattr(mode, k) for k in flags}
    if flags != expected:
        raise RuntimeError(f"mode {mode.name} did not apply: torch reports {flags}")
    if job.get("num_threads"):
        # Parallel CPU workers (--devices cpu,cpu) share the host's cores: each its share of
        # torch's threads, recorded in every record's num_threads and in device_env.
        torch.set_num_threads(int(job["num_threads"]))
    # torch.optim imports torch._dynamo at the first optimizer, and use_deterministic_algorithms
    # imports inductor's config (about 1 s in torch 2.13): a one-off of the process, paid here so
    # it lands in no workload's build time and gc.freeze covers it.
    with contextlib.suppress(Exception):  # without it, the workloads will say so if they need it
        import torch._dynamo
    for source in job["sources"]:
        load_file(source)
    return mode, ws, registry()


def _device_stage(device: Any) -> dict[str, Any]:
    """CUDA's initialisation, its context, cuBLAS's and cuDNN's handles (nothing on a CPU); the
    device's facts for env.json."""
    # torch and the passes load after main() has armed die_with_parent (see main)
    import torch

    from detbench.worker.devenv import device_env
    from detbench.worker.memory import warm_libraries

    if device.type == "cuda":
        torch.cuda.init()
        torch.empty(1, device=device)  # create the context now: it belongs to start-up
        # cuBLAS's and cuDNN's process-lifetime handles and workspaces, now, so the first
        # measured workload's peak memory is its own (issue 21 item 8).
        warm_libraries(device)
    # Everything alive now (torch, the suites) lives as long as the process: move it out of the
    # collector's sight, so the collection after each workload scans only that workload's objects.
    gc.freeze()
    return device_env(device)


def main(argv: list[str]) -> int:
    # Before the 2 s of imports: a runner that dies meanwhile takes this worker with it.
    # Say so where the runner can read it without a message (ARMED_NAME): it pauses a starting
    # worker only once armed, or a worker stopped before this would outlive a killed runner.
    if len(argv) > 1:
        die_with_parent(int(argv[1]), name=ARMED_NAME)
    # On SIGSEGV, SIGABRT, SIGFPE or SIGBUS, Python's stack goes to the log, whose tail the
    # runner puts in the 'crashed' record: the line of the workload that crashed.
    faulthandler.enable()
    # Now the 2 s of imports: torch and the passes that use it (armed above).
    import torch

    from detbench.distributed.launch import run_distributed
    from detbench.worker.measure import run_workload

    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline())
    if len(argv) > 1:  # whose processes share the device during a timing: the run's or others'
        job["run_pid"] = int(argv[1])
    out = os.fdopen(int(argv[0]), "wb")
    mode, ws, workloads = _first_stage(job)
    device = torch.device(job["device"])
    # The device stage waits for the runner's go-ahead (see the module docstring).
    waited = time.time()
    _send(out, {"type": "loaded", "seconds": waited - float(job["launched_at"])})
    if stdin.readline().strip() != b"device":  # the runner ended the run meanwhile
        return 0
    stage = time.time()
    facts = _device_stage(device)
    _send(
        out,
        {
            "type": "ready",
            "startup_seconds": time.time() - float(job["launched_at"]),
            # The start-up's own work (imports, CUDA init), whatever time it spent paused.
            "startup_cpu_seconds": time.process_time(),
            "device_env": facts,
            "pid": os.getpid(),
            # When the device stage began and ended (epoch seconds), and how long the worker
            # waited for it with its first stage done.
            "device_stage": [stage, time.time()],
            "device_wait_seconds": stage - waited,
        },
    )
    if stdin.readline().strip() != b"go":  # the runner ended the run before this worker's turn
        return 0

    def notify(phase: str) -> None:
        _send(out, {"type": "phase", "phase": phase})
        if phase == "timing":
            stdin.readline()  # the runner's "ok": nothing else of the run is using a core now

    for key in job["workloads"]:
        _send(out, {"type": "start", "workload": key})
        w = workloads.get(key)
        if w is None:
            raise RuntimeError(f"workload {key} is not defined in this worker's sources")
        record, device_lost = run_workload(w, job, mode, notify, ws, launch=run_distributed)
        record["worker_pid"] = os.getpid()  # to tell this run's processes from others (NVML)
        record["mode_position"] = job.get("mode_position")
        # Which device ran it ("cuda:1", "cpu:0"); ``device`` stays the device type.
        record["device_name"] = job.get("device_name") or f"{device.type}:0"
        record.update(where())  # the node and batch job (detbench submit) it ran in
        _send(out, {"type": "record", "record": record})
        # What the workload imported or cached for good (its own objects are freed by now) joins
        # the frozen generation, so each later collection scans only the next workload's objects.
        gc.freeze()
        if device_lost:
            print(f"detbench worker: the CUDA context is unusable after {key}; exiting")
            return EXIT_DEVICE_LOST
    _send(out, {"type": "done"})
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Everything is sent: skip the interpreter's teardown of torch (about a second on a CPU),
    # which would otherwise be paid once per (mode, replicate).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
