"""Distributed workloads (``@detbench.workload(..., distributed=True)``): their records come from
fresh ``torchrun`` launches of ``world_size`` ranks, handed here by the worker's ``run_workload``.

At a worker's first distributed workload, one launch runs it and the distributed workloads after
it in the worker's list, each freshly seeded and built; the later ones take their records from it
at their turn, so torchrun's start-up (about 5 s on a CPU) is paid once per worker. A launch that
ends in a fault leaves the workloads after it to a fresh launch.

Processes: :mod:`~detbench.distributed.torchrun`; ranks: :mod:`~detbench.distributed.rank`; one
record from their results: :mod:`~detbench.distributed.combine`. From here the record also says
how the ranks ran: ``world_size``, ``backend``, ``bucket_cap_mb``, ``nccl_algo``/``nccl_proto``
(None when unset) and ``settings_inert`` (the NCCL settings that cannot act here, and why).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from detbench.core import settings as st
from detbench.core import torchstate as ts
from detbench.core.modes import Mode
from detbench.core.workload import Context, Workload, registry
from detbench.distributed.combine import fill, outcome
from detbench.distributed.torchrun import Launch, Running, start
from detbench.store.schema import Status
from detbench.worker.protocol import DEFAULT_TIMEOUT

#: The launch limit is this share of the job's timeout, and leaves at most LIMIT_MARGIN seconds.
LIMIT_SHARE = 0.8
LIMIT_MARGIN = 30.0


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def launch_limit(job: dict[str, Any]) -> float | None:
    """Seconds a launch may run, within the job's timeout (a worker is silent while its launch
    runs), so the launcher gives up, kills and records first; None: the run has no timeout."""
    timeout = job.get("timeout", DEFAULT_TIMEOUT)
    if timeout is None:
        return None
    return max(LIMIT_SHARE * float(timeout), float(timeout) - LIMIT_MARGIN)


def _levels(mode: Mode, device_type: str) -> dict[str, str]:
    """The mode's distributed settings, else their default on ``device_type``."""
    return {
        s.name: mode.overrides.get(s.name, st.default_level(s.name, device_type))
        for s in st.SETTINGS
        if s.scope == "distributed"
    }


def _unsupported(device_type: str, world: int) -> str | None:
    """Why this host cannot launch ``world`` ranks on ``device_type``, or None."""
    import torch

    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return f"torch {torch.__version__} was built without torch.distributed"
    if device_type == "cuda":
        if not dist.is_nccl_available():
            return f"torch {torch.__version__} has no NCCL backend"
        if world > (count := torch.cuda.device_count()):
            return f"world_size={world} needs {world} GPUs (one per rank); this host has {count}"
    elif not dist.is_gloo_available():
        return f"torch {torch.__version__} has no gloo backend"
    return None


def launch_dir(job: dict[str, Any], w: Workload, mode: Mode) -> Path:
    """``OUT/logs/distributed/r{R}-{mode}-{suite}__{name}``: the launch's files, kept."""
    name = f"r{job['replicate']}-{mode.name}-{w.key.replace('/', '__')}"
    base = Path(job["reference_dir"]).parent / "logs" / "distributed" / name
    d, n = base, 1
    while d.exists():  # a resumed run measures this record again: keep the first one's files
        n += 1
        d = base.with_name(f"{name}.{n}")
    return d


#: Launches whose later workloads await their turn: (run dir, mode, replicate, key) -> (ln, i).
_PENDING: dict[tuple[str, str, int, str], tuple[Launch, int]] = {}


def _group(w: Workload, job: dict[str, Any], ws: Any) -> list[str]:
    """``w``, then the distributed workloads after it in this worker's list that this mode can
    run."""
    keys = list(job.get("workloads") or [w.key])
    later = keys[keys.index(w.key) + 1 :] if w.key in keys else []
    known = registry()
    return [w.key] + [
        k for k in later if k in known and known[k].distributed and ws.unsupported(known[k]) is None
    ]


def run_distributed(
    w: Workload,
    ctx: Context,
    job: dict[str, Any],
    mode: Mode,
    ws: Any,
    rec: dict[str, Any],
) -> None:
    """Fill ``rec`` from a torchrun launch: a fresh one, or an earlier workload's that ran ``w``
    too. Never raises for a fault of the workload or its ranks."""
    levels = _launchable(w, ctx, mode, ws, rec)
    if levels is None:
        return
    ident = (str(job["reference_dir"]), mode.name, int(job["replicate"]), w.key)
    pending = _PENDING.pop(ident, None)
    if pending is not None:  # ran in the launch of an earlier workload of this worker
        ln, i = pending
        fill(rec, ln, i, launched=False)
        return
    keys = _group(w, job, ws)
    ln = _start_ranks(w, ctx, job, mode, levels, rec, keys).end(launch_limit(job))
    for i, key in enumerate(keys[1:], start=1):
        if outcome(ln, i) is not None:
            _PENDING[(*ident[:3], key)] = (ln, i)
    fill(rec, ln, 0, launched=True)


def _launchable(
    w: Workload, ctx: Context, mode: Mode, ws: Any, rec: dict[str, Any]
) -> dict[str, str] | None:
    """The mode's distributed levels (``rec`` described); None where this host cannot launch
    them (``rec`` is then ``unsupported``, with why)."""
    levels = _levels(mode, ctx.device.type)
    _describe(w, ctx, mode, levels, rec)
    reason = ws.unsupported(w) or _unsupported(ctx.device.type, rec["world_size"])
    if reason is not None:
        rec.update(status=Status.UNSUPPORTED, message=f"build: {reason}")
        return None
    return levels


def _nccl(levels: dict[str, str]) -> dict[str, str | None]:
    """The NCCL settings as given (None: unset)."""
    return {k: (None if levels[k] == "unset" else levels[k]) for k in ts.NCCL_ENV}


def _describe(
    w: Workload, ctx: Context, mode: Mode, levels: dict[str, str], rec: dict[str, Any]
) -> None:
    """What the record says before any launch."""
    world = int(levels["world_size"])
    rec.update(
        world_size=world,
        backend=backend_for(ctx.device.type),
        bucket_cap_mb=int(levels["bucket_cap_mb"]),
        ranks_agree=None,
        rank_fingerprints=None,
        launch=None,
        **_nccl(levels),
    )
    rec["settings_inert"] = st.inert_settings(
        ts.NCCL_ENV, ctx.device.type, levels, mode.deterministic_algorithms
    )
    rec["items_per_step"] = w.items(ctx) * world
    rec["bytes_per_step"] = None if (b := w.bytes(ctx)) is None else b * world
    rec["seeding"] = w.seeding


#: What the ranks' job takes from the worker's job as it is.
_FROM_JOB = (
    "seed",
    "profile",
    "device",
    "sources",
    "fingerprint_steps",
    "warmup_steps",
    "budget",
    "target_rel",
    "replicate",
    "reference_dir",
    # Whether the paired phase times the records (else, in ``detbench audit``, nothing does).
    "paired_timing",
)


def _start_ranks(
    w: Workload,
    ctx: Context,
    job: dict[str, Any],
    mode: Mode,
    levels: dict[str, str],
    rec: dict[str, Any],
    keys: list[str],
    **extra: Any,
) -> Running:
    """A fresh launch of ``w``'s ranks for the workloads ``keys``, ``extra`` added to their job."""
    limit = launch_limit(job)
    nccl = _nccl(levels)
    world = int(levels["world_size"])
    rank_job = {
        **{k: job[k] for k in _FROM_JOB if k in job},
        "keys": keys,
        "mode": asdict(mode),
        "backend": backend_for(ctx.device.type),
        "bucket_cap_mb": float(levels["bucket_cap_mb"]),
        "fingerprint_method": rec["fingerprint_method"],
        "fingerprint": job.get("fingerprint"),
        "nccl": {var: nccl[name] for name, var in ts.NCCL_ENV.items()},
        "count_flops": bool(job.get("count_flops", True)),
        "device_index": ctx.device.index if world == 1 and ctx.device.index else 0,
        # Past the launch's limit: the launcher, not a rank's collective, decides a timeout.
        "collective_timeout": None if limit is None else limit + 60,
        **extra,
    }
    env = ts.nccl_environment(dict(os.environ), levels)
    return start(rank_job, launch_dir(job, w, mode), rec["world_size"], env, limit)


#: Seconds between two reads of rank 0's result file while a paired member waits for its answer.
POLL_SECONDS = 0.005
#: Seconds a member's launch may take to end once its ranks are told to exit.
KILL_AFTER = 30.0
#: Seconds a member's ranks wait for their next word: between its turns the group's other
#: members make their verdicts, unbounded. The ranks die with their worker, never outlive it.
RANKS_WAIT = 24 * 3600.0


class KeptLaunch:
    """The ranks of one paired member (``rank.serve``), kept for its worker's distributed
    workloads: words set in the worker's store, answered by rank 0 in its result file.
    ``verdicts``: the workloads whose verdicts the ranks made, in order."""

    def __init__(self, running: Running, store: Any, wait: float | None) -> None:
        self.running, self.store, self.wait = running, store, wait
        self.asked = 0
        self.verdicts: list[str] = []
        #: How far rank 0's result file has been read, and its whole lines not yet taken.
        self.offset = 0
        self.pending: list[dict[str, Any]] = []

    def _new_lines(self) -> None:
        """Rank 0's whole lines appended since the last read: only new bytes, read once the file
        has grown, since the wait polls while the ranks time a block on the same cores."""
        path = self.running.directory / "rank0.jsonl"
        try:
            if path.stat().st_size <= self.offset:
                return
            with open(path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.splitlines():
            with contextlib.suppress(ValueError):
                self.pending.append(json.loads(line))

    def answer(self, kind: str) -> dict[str, Any]:
        """Rank 0's next message of type ``kind``; ``RuntimeError`` where the launch ends or
        stays silent past the wait first."""
        t0 = time.monotonic()
        while True:
            self._new_lines()
            while self.pending:
                m = self.pending.pop(0)
                if m.get("type") == kind:
                    return {k: v for k, v in m.items() if k != "type"}
            if not self.running.alive():
                raise RuntimeError(f"the ranks ended before their {kind} message")
            if self.wait is not None and time.monotonic() - t0 > self.wait:
                raise RuntimeError(f"no {kind} message from rank 0 within {self.wait:g} s")
            time.sleep(POLL_SECONDS)

    def say(self, word: str) -> None:
        self.store.set(f"c{self.asked}", word)
        self.asked += 1

    def snapshot(self) -> Launch:
        """The launch as it stands, for a verdict's record: its verdicts so far."""
        ln = self.running.snapshot()
        ln.keys = list(self.verdicts)
        return ln

    def end(self) -> Launch:
        """The ranks told to exit, and the launch ended (killed where it lingers)."""
        if self.running.alive():
            with contextlib.suppress(Exception):
                self.say("exit")
        ln = self.running.end(KILL_AFTER)
        ln.keys = list(self.verdicts)
        return ln


class LaunchedTiming:
    """``worker.paired.PairedTiming``'s ``block``, ``finish`` and ``free``, asked of the ranks."""

    def __init__(self, kept: KeptLaunch) -> None:
        self.kept = kept

    def block(self) -> dict[str, Any]:
        self.kept.say("block")
        return self.kept.answer("block")

    def reference(self, seconds: float) -> dict[str, Any]:
        raise RuntimeError("no reference timer for the ranks of a distributed workload")

    def finish(self) -> dict[str, Any]:
        self.kept.say("finish")
        return self.kept.answer("timed")

    def free(self) -> None:
        """After a failed block: the launch ended, the next workload launched afresh."""
        close_kept()


#: The launch a paired worker keeps for its distributed workloads (one at a time).
_KEPT: list[KeptLaunch] = []


def close_kept() -> None:
    """End the kept launch, if any (the worker's end, or a fault of its ranks)."""
    while _KEPT:
        _KEPT.pop().end()


class PairedLaunch:
    """``passes.run_workload``'s ``launch`` for a paired member: the workload asked of the
    worker's kept launch (started afresh where needed), its verdict made in the ranks where
    ``verdict``, then the step warmed up for the turns. ``timing``: its ``LaunchedTiming`` (None
    where it cannot be timed); ``said``: the ``prepared`` message's fields."""

    def __init__(self, verdict: bool) -> None:
        self.verdict = verdict
        self.timing: LaunchedTiming | None = None
        self.said: dict[str, Any] = {}

    def __call__(
        self,
        w: Workload,
        ctx: Context,
        job: dict[str, Any],
        mode: Mode,
        ws: Any,
        rec: dict[str, Any],
    ) -> None:
        levels = _launchable(w, ctx, mode, ws, rec)
        if levels is None:
            self.said = {"status": Status.UNSUPPORTED, "message": rec["message"]}
            return
        if _KEPT and not _KEPT[0].running.alive():
            close_kept()
        if not _KEPT:
            _KEPT.append(_start_kept(w, ctx, job, mode, levels, rec))
        kept = _KEPT[0]
        if self.verdict:
            kept.verdicts.append(w.key)
        kept.say(f"{'verdict' if self.verdict else 'prepare'} {w.key}")
        try:
            said = kept.answer("prepared")
        except RuntimeError as exc:
            said = {"status": Status.CRASHED, "message": str(exc)}
        index = len(kept.verdicts) - 1
        if said.get("status") != "ok":  # the ranks end on a failure: the record says how
            _KEPT.remove(kept)
            ln = kept.end()
            if self.verdict:
                fill(rec, ln, index, launched=index == 0)
                if rec.get("status") != Status.OK:
                    said = {"status": rec["status"], "message": rec["message"]}
            self.said = said
            return
        if self.verdict:
            fill(rec, kept.snapshot(), index, launched=index == 0)
            rec["timing_design"] = "paired"
        self.timing, self.said = LaunchedTiming(kept), said


def _start_kept(
    w: Workload,
    ctx: Context,
    job: dict[str, Any],
    mode: Mode,
    levels: dict[str, str],
    rec: dict[str, Any],
) -> KeptLaunch:
    """A fresh launch of the ranks of a paired member, and the store its worker holds."""
    import torch.distributed as dist

    limit = launch_limit(job)
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=limit if limit is not None else RANKS_WAIT),
    )
    paired = {"port": store.port, "wait": RANKS_WAIT}
    extra = {k: job.get(k) for k in ("rounds", "block_seconds", "run_pid")}
    running = _start_ranks(w, ctx, job, mode, levels, rec, [], paired=paired, **extra)
    return KeptLaunch(running, store, limit)
