"""One rank of a launch of distributed workloads: the process that ``torchrun`` starts, per rank.

Started as ``python -m detbench.distributed.rank DIR`` by ``torch.distributed.run`` (see
``detbench.distributed.launch``), with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in its
environment. It
reads ``DIR/job.json``, writes its output to ``DIR/rank{R}.log`` and, for the ``I``-th workload of
the launch, its result to ``DIR/rank{R}.{I}.json`` (atomically, once the workload is done). Once:

1. apply the mode and its settings (``detbench.worker.applied.WorkerSettings``) before any CUDA
work;
2. ``init_process_group``: ``gloo`` on CPU; ``nccl`` on CUDA, on the GPU of its local rank.

Then for each workload, as a worker does, in the process group:

3. seed every generator with the run's seed (the same on every rank: DDP broadcasts rank 0's
   parameters anyway; a workload draws its per-rank data from ``ctx.rank``), build the workload;
4. the fingerprint pass: each step's outputs digested (``fingerprint.step_digest``), and the
   parameters of the modules wrapped with ``ctx.ddp`` digested apart, so the launcher can say
   whether every rank holds the same parameters after every step (``ranks_agree``);
5. the FLOP count (the first replicate), then the timing pass on a clock shared by the ranks:
   each read is the latest of the ranks' ``perf_counter`` (an all-reduce MAX), so every rank
   takes the same samples and stops at the same check (a rank that ran one step more would wait
   for the others in a collective forever), and a sample is the block's time on the slowest
   rank; settings a workload changed are put back before the next.

``destroy_process_group()`` at the end. A failure is data here too: the rank writes the
workload's status (``classify``: ``oom``, ``unsupported``, ``error``) with the time it failed, and
exits with ``EXIT_FAILED``, so torchrun stops the other ranks at once instead of leaving them
waiting in a collective; the launcher takes the earliest failure as the cause, and launches the
workloads after it afresh. A rank asks Linux to kill it when torchrun's agent dies (even by
SIGKILL), so a killed launch leaves no rank behind.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detbench.core.modes import Mode
from detbench.core.torchstate import NCCL_ENV
from detbench.core.workload import Context, load_file, registry
from detbench.store.results import write_text_atomic
from detbench.store.schema import Status
from detbench.worker.applied import WorkerSettings
from detbench.worker.protocol import die_with_parent, jsonable

#: The exit status of a rank that recorded a failure in its result file.
EXIT_FAILED = 3
#: Words of an NCCL error that, with NCCL_ALGO or NCCL_PROTO set, mean the installed NCCL (or
#: this GPU) cannot run what was asked: NCCL reports an algorithm or protocol it cannot use as
#: "invalid usage" (its WARN line, with NCCL_DEBUG=WARN, says "no algorithm/protocol available").
#: Recorded as ``unsupported``, like an op without a deterministic kernel.
NCCL_REFUSALS = ("NCCL_ALGO", "NCCL_PROTO", "no algorithm/protocol available", "invalid usage")


def nccl_refusal(job: dict[str, Any], text: str) -> str | None:
    """The NCCL variables the job set, when ``text`` (an error) says NCCL refused them."""
    given = {k: v for k, v in (job.get("nccl") or {}).items() if v}
    if not given or "nccl" not in text.lower():
        return None
    if not any(m.lower() in text.lower() for m in NCCL_REFUSALS):
        return None
    return ", ".join(f"{k}={v}" for k, v in sorted(given.items()))


def _log_to(path: Path) -> None:
    """Send this process's stdout and stderr (its prints, torch's warnings, faulthandler's stack
    on a fatal signal) to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(jsonable(data), sort_keys=True, allow_nan=False))


def _say(rank: int, what: str) -> None:
    """A progress line in the rank's log: its tail then says where a crash happened."""
    print(f"detbench rank {rank}: {what}", flush=True)


def _shared_clock(device: Any) -> Any:
    """A clock every rank reads alike: the latest ``perf_counter`` of the ranks (CLOCK_MONOTONIC,
    one clock for every process of a host), after the rank's device has finished its work."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(1, dtype=torch.float64, device=device)

    def clock() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t.fill_(time.perf_counter())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    return clock


def _init_group(backend: str, device: Any, timeout: float | None) -> None:
    """``init_process_group`` with the rank's device bound where this torch can (``device_id``,
    2.3+: NCCL then connects eagerly, on that GPU), and a collective timeout from the launch's."""
    import datetime
    import inspect

    import torch.distributed as dist

    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=timeout)
    takes = inspect.signature(dist.init_process_group).parameters
    if device.type == "cuda" and "device_id" in takes:
        kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)


def _agreement(ctx: Any, outputs: list[Any], loss_output: int | None) -> list[Any]:
    """What must be equal on every rank after a step: the parameters of the modules wrapped with
    ``ctx.ddp``; without any, every output but the loss (each rank's loss is of its own data)."""
    if ctx.ddp_modules:
        return [p.detach() for m in ctx.ddp_modules for p in m.parameters()]
    return [o for i, o in enumerate(outputs) if i != loss_output]


@dataclass
class RankState:
    """What a rank sets up once for all the workloads of its launch."""

    job: dict[str, Any]
    rank: int
    world: int
    mode: Any
    ws: Any
    device: Any
    #: The NCCL variables as this rank read them right after ``init_process_group`` (None:
    #: unset): torch may set ``NCCL_ALGO`` itself (``^NVLS`` under deterministic algorithms, in
    #: some versions), so the record says what NCCL ran under, not what the launcher set.
    nccl_env: dict[str, str | None] | None = None


def setup(job: dict[str, Any], rank: int, local_rank: int, world: int) -> RankState:
    """The mode (before any CUDA work), the rank's device, the workload files, the process
    group."""
    import torch

    mode = Mode(**job["mode"])
    ws = WorkerSettings.start(mode)
    if job["device"].startswith("cuda"):
        device = torch.device("cuda", int(job.get("device_index") or 0) + local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    for source in job["sources"]:
        load_file(source)
    _init_group(job["backend"], device, job.get("collective_timeout"))
    return RankState(job, rank, world, mode, ws, device, nccl_read_back())


def nccl_read_back() -> dict[str, str | None]:
    """``NCCL_ALGO`` and ``NCCL_PROTO`` as this process's environment has them now."""
    return {var: os.environ.get(var) for var in NCCL_ENV.values()}


def run(st: RankState, key: str, res: dict[str, Any]) -> None:
    """Every pass of workload ``key`` in this rank; fills ``res`` (raises on a failure, with
    ``res["phase"]`` saying where)."""
    # torch and the passes load after main() has armed die_with_parent, as in run.child
    from detbench.worker import fingerprint as fp
    from detbench.worker.devenv import fp32_precision
    from detbench.worker.measure import (
        build_pass,
        count_pass,
        finish_pass,
        reference_path,
        sync,
        timing_pass,
    )
    from detbench.worker.memory import PeakWatch

    job, rank, world, mode, ws, device = st.job, st.rank, st.world, st.mode, st.ws, st.device
    phases: dict[str, float] = res["phases"]
    res["device"] = str(device)
    res["nccl_env"] = st.nccl_env
    w = registry()[key]
    watch = PeakWatch(device)
    watch.start()
    t0 = time.perf_counter()
    step: Any = None
    try:
        seed = int(job["seed"])
        ctx = Context(device=device, profile=job["profile"], seed=seed, rank=rank,
                      world_size=world, bucket_cap_mb=job.get("bucket_cap_mb"))  # fmt: skip
        res["items_per_step"] = w.items(ctx)
        res["phase"] = "build"
        step = build_pass(w, ctx, ws, mode, res)
        phases["build"] = time.perf_counter() - t0

        res["phase"] = "fingerprint"
        t0 = time.perf_counter()
        method = job["fingerprint_method"]
        digests, agree, losses = [], [], []
        outputs: list[Any] = []
        for i in range(w.steps(ctx, int(job["fingerprint_steps"]))):
            _say(rank, f"{key}: fingerprint step {i}")
            t1 = time.perf_counter()
            outputs = fp.step_outputs(step())
            if i == 0:
                sync(device)
                res["first_step_seconds"] = time.perf_counter() - t1
            digests.append(fp.step_digest(outputs, method))
            agree.append(fp.step_digest(_agreement(ctx, outputs, w.loss_output), method))
            if w.loss_output is not None:
                losses.append(float(outputs[w.loss_output].item()))
        res["step_fingerprints"] = digests
        res["agreement_digests"] = agree
        res["losses"] = losses if w.loss_output is not None else None
        # Each rank keeps its own reference: later replicates measure how far they drifted.
        ref = reference_path(Path(job["reference_dir"]), w.key, f"{mode.name}.rank{rank}")
        mine = fp.combine(digests)
        diff = fp.diff_against_reference(ref, mine, outputs, int(job["replicate"]))
        if diff is None:
            fp.save_reference(ref, mine, outputs, int(job["replicate"]))
        res["diff_reference"] = "self" if diff is None else diff
        outputs = []
        phases["fingerprint"] = time.perf_counter() - t0

        res["phase"] = "count"
        t0 = time.perf_counter()
        _say(rank, f"{key}: FLOP count")
        count_pass(w, ctx, step, res, bool(job.get("count_flops", True)))
        phases["count"] = time.perf_counter() - t0

        res["phase"] = "timing"
        t0 = time.perf_counter()
        _say(rank, f"{key}: timing")
        timing = timing_pass(step, job, device, clock=_shared_clock(device))
        phases["timing"] = time.perf_counter() - t0
        res["timing"] = {**timing.to_json(), "clock": f"perf_counter, latest of {world} ranks"}
        res["num_threads"] = timing.num_threads
        sync(device)
        res["phase"] = "done"
    finally:
        finish_pass(res, ws, watch)
        res["precision"] = fp32_precision(device)
        step = None
        gc.collect()  # this workload's model, its DDP buckets and inputs go before the next
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()


def _failed(res: dict[str, Any], job: dict[str, Any], exc: BaseException) -> None:
    """``res`` as a recorded failure of ``exc``."""
    from detbench.worker.measure import classify  # torch: after die_with_parent, as in run()

    status, message = classify(exc)
    refused = nccl_refusal(job, message) if status == Status.ERROR else None
    if refused is not None:
        status, message = Status.UNSUPPORTED, f"NCCL refused {refused}: {message}"
    res.update(status=status, message=f"{res['phase']}: {message}",
               traceback=traceback.format_exc(limit=-8), failed_at=time.time())  # fmt: skip
    traceback.print_exc()


def main(argv: list[str]) -> int:
    """Each workload of the launch in turn, one result file each (``rank{R}.{I}.json``); the
    first failure ends the rank (the launcher launches the workloads after it afresh)."""
    directory = Path(argv[0])
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    world = int(os.environ["WORLD_SIZE"])
    _log_to(directory / f"rank{rank}.log")
    die_with_parent()
    (directory / f"rank{rank}.pid").write_text(str(os.getpid()))
    faulthandler.enable()
    job = json.loads((directory / "job.json").read_text())
    keys: list[str] = list(job["keys"])
    _say(rank, f"pid {os.getpid()}, world size {world}, {', '.join(keys)}")
    st: RankState | None = None
    t_start = time.perf_counter()
    for i, key in enumerate(keys):
        res: dict[str, Any] = {
            "rank": rank, "local_rank": local_rank, "world_size": world, "pid": os.getpid(),
            "key": key, "status": Status.OK, "message": None, "phase": "start", "phases": {},
            "settings_changed": [],
        }  # fmt: skip
        try:
            if st is None:  # the first workload's record carries the rank's set-up
                res["phase"] = "init_process_group"
                st = setup(job, rank, local_rank, world)
                res["phases"]["rank_setup"] = time.perf_counter() - t_start
            run(st, key, res)
        except Exception as exc:  # the failure is data: written, then torchrun stops the others
            _failed(res, job, exc)
        _write_json(directory / f"rank{rank}.{i}.json", res)
        _say(rank, f"{key}: result written ({res['status']})")
        if res["status"] != Status.OK:
            return EXIT_FAILED
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    # The results are written: skip the interpreter's teardown of torch (about a second on a CPU).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
