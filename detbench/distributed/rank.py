"""One rank of a launch of distributed workloads: a job of kind ``detbench.distributed.rank:main``
for the one child main (``detbench.worker.protocol``), logging to ``DIR/rank{R}.log``, its
messages to ``DIR/rank{R}.jsonl``. Per workload it runs the worker's passes with a rank's hooks:

- every rank is seeded alike (a workload draws its per-rank data from ``ctx.rank``);
- the fingerprint pass also digests the ``ctx.ddp`` modules' parameters (``ranks_agree``);
- the timing pass reads a clock the ranks share (``_shared_clock``), so every rank stops at the
  same check (one step more would wait in a collective forever); a sample is the slowest rank's.

A failure is data: the rank writes the workload's status with the time it failed and exits with
``EXIT_FAILED``, so torchrun stops the other ranks at once instead of leaving them in a
collective; the launcher blames the earliest failure and launches the workloads after it afresh.
"""

from __future__ import annotations

import datetime
import inspect
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from detbench.core.modes import Mode
from detbench.core.torchstate import NCCL_ENV
from detbench.core.workload import Context, load_file, registry
from detbench.store.schema import Status
from detbench.worker import fingerprint as fp
from detbench.worker.applied import WorkerSettings
from detbench.worker.measure import classify
from detbench.worker.paired import PairedTiming
from detbench.worker.passes import Hooks, Passes
from detbench.worker.protocol import Channel

#: The exit status of a rank that recorded a failure in its result file.
EXIT_FAILED = 3
#: Words of an NCCL error that, with NCCL_ALGO or NCCL_PROTO set, mean this NCCL or GPU cannot run
#: what was asked (NCCL calls it "invalid usage"): recorded as ``unsupported``.
NCCL_REFUSALS = ("NCCL_ALGO", "NCCL_PROTO", "no algorithm/protocol available", "invalid usage")


def nccl_refusal(job: dict[str, Any], text: str) -> str | None:
    """The NCCL variables the job set, when ``text`` (an error) says NCCL refused them."""
    given = {k: v for k, v in (job.get("nccl") or {}).items() if v}
    low = text.lower()
    if not given or "nccl" not in low or not any(m.lower() in low for m in NCCL_REFUSALS):
        return None
    return ", ".join(f"{k}={v}" for k, v in sorted(given.items()))


def _log_to(path: Path) -> None:
    """Send this process's stdout and stderr (faulthandler's stack included) to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _say(rank: int, what: str) -> None:
    """A progress line in the rank's log: its tail then says where a crash happened."""
    print(f"detbench rank {rank}: {what}", flush=True)


def _shared_clock(device: Any) -> Any:
    """A clock every rank reads alike: the ranks' latest ``perf_counter`` (CLOCK_MONOTONIC, one
    per host), after the rank's device has finished its work."""
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
    2.3+: NCCL then connects eagerly, on that GPU)."""
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=timeout)
    takes = inspect.signature(dist.init_process_group).parameters
    if device.type == "cuda" and "device_id" in takes:
        kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)


def _agreement(ctx: Any, outputs: list[Any], loss_output: int | None) -> list[Any]:
    """What must be equal on every rank after a step: the ``ctx.ddp`` modules' parameters; without
    any, every output but the loss (each rank's loss is of its own data)."""
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
    #: The NCCL variables as read after ``init_process_group``: torch may set ``NCCL_ALGO`` itself
    #: (``^NVLS`` under deterministic algorithms), so the record says what NCCL ran under.
    nccl_env: dict[str, str | None] | None = None


def setup(job: dict[str, Any], rank: int, local_rank: int, world: int) -> RankState:
    """The mode (before any CUDA work), the device, the workload files, the process group."""
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


def context(st: RankState, w: Any) -> Context:
    """The workload's context in this rank."""
    return Context(
        device=st.device,
        profile=st.job["profile"],
        seed=int(st.job["seed"]),
        rank=st.rank,
        world_size=st.world,
        bucket_cap_mb=st.job.get("bucket_cap_mb"),
        batch_size=w.batch_size,
    )


def run(st: RankState, key: str, res: dict[str, Any], keep: Any = None) -> None:
    """Every pass of workload ``key`` in this rank; fills ``res``, a failure included.
    ``keep``: given the step the passes built (a paired member times it after its verdict)."""
    job, rank = st.job, st.rank
    res["device"] = str(st.device)
    res["nccl_env"] = st.nccl_env
    w = registry()[key]
    ctx = context(st, w)
    agree: list[str] = res.setdefault("agreement_digests", [])
    method = res["fingerprint_method"]

    def after_step(i: int, outputs: list[Any]) -> None:
        agree.append(fp.step_digest(_agreement(ctx, outputs, w.loss_output), method))

    hooks = Hooks(
        say=lambda what: _say(rank, what),
        after_step=after_step,
        reference=f".rank{rank}",
        invariance=False,
        check_device=False,
        classify=lambda e: _classify(job, e),
        on_failure=_failed,
        keep=keep,
    )
    Passes(w, ctx, job, st.mode, st.ws, res, hooks).run()
    res.setdefault("losses", None)
    if isinstance(res.get("diff_reference"), dict):  # the launcher takes the largest over ranks
        res["diff_reference"]["max_abs_diff"] = res.get("max_abs_diff")


def _classify(job: dict[str, Any], exc: BaseException) -> tuple[str, str]:
    """``classify``, with NCCL's refusal of a variable the job set as ``unsupported``."""
    status, message = classify(exc)
    refused = nccl_refusal(job, message) if status == Status.ERROR else None
    if refused is not None:
        status, message = Status.UNSUPPORTED, f"NCCL refused {refused}: {message}"
    return status, message


def _failed(res: dict[str, Any], exc: BaseException) -> None:
    """When the failure happened (the launcher blames the earliest); its traceback to the log."""
    res["failed_at"] = time.time()
    traceback.print_exc()


def _result(job: dict[str, Any], st_ids: tuple[int, int, int], key: str) -> dict[str, Any]:
    """A rank's result for workload ``key``, before its passes: (rank, local rank, world)."""
    rank, local_rank, world = st_ids
    return {
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world,
        "pid": os.getpid(),
        "key": key,
        "status": Status.OK,
        "message": None,
        "phases": {},
        "settings_changed": [],
        "fingerprint_method": job["fingerprint_method"],
    }


def _failure(job: dict[str, Any], res: dict[str, Any], where: str, exc: BaseException) -> None:
    """A failure outside the passes (theirs are in ``res`` already) into ``res``."""
    status, message = _classify(job, exc)
    res.update(status=status, message=f"{where}: {message}")
    res["traceback"] = traceback.format_exc(limit=-8)
    _failed(res, exc)


def serve(job: dict[str, Any], out: Channel, ids: tuple[int, int, int]) -> int:
    """The ranks of a paired member (``job["paired"]``), kept for every distributed workload its
    worker times, obeying each word the worker sets in its store (``c0``, ``c1``, ...):
    ``verdict KEY`` (the passes, then the step warmed up), ``prepare KEY`` (the step built and
    warmed up), ``block``, ``finish``, ``exit``. Rank 0 answers (``prepared``, ``block``,
    ``timed``). A failure ends the launch."""
    rank, local_rank, world = ids
    t0 = time.perf_counter()
    try:
        st = setup(job, rank, local_rank, world)
    except Exception:  # the worker sees the launch end before its answer
        traceback.print_exc()
        return EXIT_FAILED
    setup_seconds = time.perf_counter() - t0
    address = job["paired"]
    store = dist.TCPStore(
        "127.0.0.1",
        int(address["port"]),
        is_master=False,
        timeout=datetime.timedelta(seconds=float(address["wait"])),
    )
    clock = _shared_clock(st.device)
    timing: PairedTiming | None = None
    n, index = 0, 0
    while True:
        word, _, key = store.get(f"c{n}").decode().partition(" ")
        n += 1
        _say(rank, f"{word} {key}")
        if word in ("verdict", "prepare"):
            w = registry()[key]
            ctx = context(st, w)
            kept: list[Any] = []
            if word == "verdict":
                res = _result(job, ids, key)
                if index == 0:  # the first record carries the rank's set-up
                    res["phases"]["rank_setup"] = setup_seconds
                try:
                    run(st, key, res, kept.append)
                except Exception as exc:
                    _failure(job, res, "start", exc)
                out.send({"type": "record", "index": index, "record": res})
                index += 1
                if res["status"] != Status.OK:
                    return EXIT_FAILED
            timing, said = (
                PairedTiming.from_verdict(w, job, st.mode, kept.pop(), res, ctx, clock)
                if kept
                else PairedTiming.prepare(w, job, st.mode, st.ws, ctx, clock)
            )
            # The first step's digest over the ranks, combined as a record's step digests are
            # (``combine.merge``), so the line's ``same_bits`` compares like with like.
            digests: list[Any] = [None] * st.world
            dist.all_gather_object(digests, said.get("first_step_digest"))
            if all(digests):
                said["first_step_digest"] = fp.combine(digests)
            if rank == 0:
                out.send({"type": "prepared", "workload": key, **said})
            if timing is None:
                return EXIT_FAILED
        elif word == "block" and timing is not None:
            got = timing.block()
            if rank == 0:
                out.send({"type": "block", **got})
        elif word == "finish" and timing is not None:
            got = timing.finish()
            timing = None
            st.ws.restore()  # a step that set a flag set it again in the rounds
            if rank == 0:
                out.send({"type": "timed", **got})
        else:  # exit
            break
    dist.destroy_process_group()
    out.send({"type": "done"})
    return 0


def main(job: dict[str, Any], out: Channel) -> int:
    """Each workload of the launch in turn, one ``record`` message each; the first failure ends
    the rank."""
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    world = int(os.environ["WORLD_SIZE"])
    _log_to(Path(job["directory"]) / f"rank{rank}.log")
    out.send({"type": "ready", "pid": os.getpid(), "rank": rank})
    keys: list[str] = list(job["keys"])
    _say(rank, f"pid {os.getpid()}, world size {world}, {', '.join(keys) or 'paired turns'}")
    if job.get("paired"):
        return serve(job, out, (rank, local_rank, world))
    st: RankState | None = None
    t_start = time.perf_counter()
    for i, key in enumerate(keys):
        res = _result(job, (rank, local_rank, world), key)
        where = "start"
        try:
            if st is None:  # the first workload's record carries the rank's set-up
                where = "init_process_group"
                st = setup(job, rank, local_rank, world)
                res["phases"]["rank_setup"] = time.perf_counter() - t_start
                where = "start"
            run(st, key, res)
        except Exception as exc:
            _failure(job, res, where, exc)
        out.send({"type": "record", "index": i, "record": res})
        _say(rank, f"{key}: result written ({res['status']})")
        if res["status"] != Status.OK:
            return EXIT_FAILED
    if dist.is_initialized():
        dist.destroy_process_group()
    out.send({"type": "done"})
    return 0
