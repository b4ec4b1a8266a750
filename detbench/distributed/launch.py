"""Distributed workloads: their records come from fresh ``torchrun`` launches of ``world_size``
ranks, one launch per worker (that is, per mode and replicate).

A workload declared ``@detbench.workload(..., distributed=True)`` is handed here by
``measure.run_workload`` in the worker; the worker itself runs none of its steps. At the first
distributed workload of a worker, one launch runs it and the distributed workloads after it in
that worker's list, in order, each freshly seeded and built, as a worker runs its workloads; the
later ones take their records from it when their turn comes. torchrun and the ranks' start-up
(about 5 s on a CPU, mostly importing torch three times) is so paid once per worker, not once per
record. A launch that ends early (a fault) leaves the workloads after the one it ended in to a
fresh launch at their turn. The launcher is PyTorch's own, as a user launches training::

    python -m torch.distributed.run --nnodes 1 --nproc-per-node N --rdzv-backend c10d
        --rdzv-endpoint 127.0.0.1:PORT --rdzv-id UUID --max-restarts 0 -m detbench.distributed.rank
        DIR

(``--standalone`` is the same rendezvous, but before torch 2.1 it always took port 29400, so two
launches at once would collide: the launcher binds a free port itself and passes it.) Each rank
(``detbench.distributed.rank``) applies the mode, joins the process group (``gloo`` on CPU,
``nccl`` on CUDA,
one GPU per local rank), runs the fingerprint and timing passes of each workload and writes
``DIR/rank{R}.{I}.json``. The launcher turns each workload's files into ONE record, with the
usual fields, so analysis and the report treat it like any other (a fresh launch is one
replicate; run-to-run verdicts come from replicates as usual), plus:

- ``world_size`` (int), ``backend``, ``bucket_cap_mb``, ``nccl_algo``/``nccl_proto`` (None when
  unset) as the ranks ran them (with NCCL: as rank 0 read them after ``init_process_group``,
  ``nccl_env``); ``settings_inert``: the NCCL settings that cannot act here, and why;
- ``fingerprint`` over every rank's outputs: step ``i``'s digest is ``combine`` of the ranks'
  digests of step ``i`` in rank order, and the fingerprint ``combine`` of those;
  ``rank_fingerprints`` has each rank's own;
- ``ranks_agree``: True when after every fingerprint step every rank held bitwise the same
  parameters (of the modules wrapped with ``ctx.ddp``), False otherwise, a bug worth reporting;
  ``ranks_first_disagree_step`` the first step where they did not;
- throughput: the ranks time on a shared clock (``detbench.distributed.rank``), so
``seconds_per_step`` is the
  slowest rank's; ``items_per_step`` is the sum over ranks of what one rank's step processes, so
  ``items_per_second`` = total items across ranks / the slowest rank's seconds per step (a data
  parallel job goes as fast as its slowest rank). FLOPs and bytes per step are totals likewise.
- ``losses``: rank 0's; ``peak_memory_bytes``: the largest rank's; ``max_abs_diff`` against the
  first replicate: the largest over ranks (each rank keeps its own reference).

Faults stay data. A launch runs in a session of its own, and every process it starts carries a
unique marker in its environment (``DETBENCH_LAUNCH``). A rank that records a failure gives the
record its status (``oom``, ``unsupported``, ``error``; the earliest failing rank's). A rank that
dies (a signal, an exit without its result) makes the record ``crashed``, with the tail of its
log. A launch that outlives its limit is ``timeout`` (for the workload it was in): torchrun gets
SIGTERM (it stops its ranks), then whatever is left of the launch gets SIGKILL. In every case, at
the end, every process that carries the marker is killed and the launcher waits until none is
alive, so no rank, no torchrun and no port it held is left behind, and the worker goes on with its
next workload.

The launch limit: ``LIMIT_SHARE`` of the job's ``timeout`` (the runner's ``--timeout``: the
longest silence of a worker before the runner kills it, and a worker is silent while its launch
runs), at most ``LIMIT_MARGIN`` seconds less, so the launcher always gives up, kills and records
first; ``DEFAULT_TIMEOUT`` when the job does not say; none when the run has none.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from detbench.core import settings as st
from detbench.core import torchstate as ts
from detbench.core.modes import Mode
from detbench.core.workload import Context, Workload, registry
from detbench.store.schema import Status
from detbench.worker import fingerprint as fp
from detbench.worker.protocol import DEFAULT_TIMEOUT, dies_with_us, exit_description

#: The environment variable that marks every process of one launch (value: the launch's id).
LAUNCH_ENV = "DETBENCH_LAUNCH"
#: The launch limit is this share of the job's timeout, and leaves at most LIMIT_MARGIN seconds.
LIMIT_SHARE = 0.8
LIMIT_MARGIN = 30.0
#: What torchrun gets after SIGTERM to stop its ranks before everything left gets SIGKILL.
TERM_GRACE = 5.0
#: How long the launcher waits for the launch's processes to be gone after SIGKILL.
KILL_WAIT = 10.0


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def launch_limit(job: dict[str, Any]) -> float | None:
    """Seconds a launch may run: ``LIMIT_SHARE`` of the job's timeout, and at least the timeout
    less ``LIMIT_MARGIN``; None when the run has no timeout."""
    timeout = job.get("timeout", DEFAULT_TIMEOUT)  # an explicit None: the run has no timeout
    if timeout is None:
        return None
    timeout = float(timeout)
    return max(LIMIT_SHARE * timeout, timeout - LIMIT_MARGIN)


def _levels(mode: Mode, device_type: str) -> dict[str, str]:
    """The mode's distributed settings, else their default on ``device_type``."""
    given = mode.overrides
    return {s.name: given.get(s.name, st.default_level(s.name, device_type))
            for s in st.SETTINGS if s.scope == "distributed"}  # fmt: skip


# -- the processes of a launch ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    """SIGKILL every process of the launch: torchrun's session, each rank's session (torchrun
    starts each rank in a session of its own), and anything else carrying the marker; then reap
    torchrun and wait until nothing of the launch is alive. Returns what was still alive at the
    end (empty unless a process could not be killed)."""
    _kill_group(proc.pid, signal.SIGKILL)
    for pid_file in directory.glob("rank*.pid"):
        with contextlib.suppress(OSError, ValueError):
            _kill_group(int(pid_file.read_text()), signal.SIGKILL)
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
    """How one launch ended: its workloads (``keys``, in the order the ranks ran them),
    torchrun's exit code (None: killed at the limit), the ranks' result files as read (workload
    index -> rank -> result), and the seconds it took."""

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
        """The index of the workload the launch ended in (``len(keys)`` when all were done):
        the workloads after it did not run."""
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


def launch(job: dict[str, Any], directory: Path, world_size: int, env: dict[str, str],
           limit: float | None) -> Launch:  # fmt: skip
    """Run one torchrun launch of ``world_size`` ranks for the workloads ``job["keys"]`` (the
    job is written to ``directory/job.json``), wait for it up to ``limit`` seconds, kill
    whatever is left of it, and read the ranks' results."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "job.json").write_text(json.dumps(job, sort_keys=True))
    marker = uuid.uuid4().hex
    env = {**env, LAUNCH_ENV: marker}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", str(world_size), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", marker,
           "--max-restarts", "0", "--monitor-interval", "0.1",
           "-m", "detbench.distributed.rank", str(directory)]  # fmt: skip
    t0 = time.monotonic()
    timed_out = False
    with open(directory / "launcher.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True,
                                preexec_fn=dies_with_us())  # fmt: skip
    try:
        try:
            code: int | None = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out, code = True, None
            _kill_group(proc.pid, signal.SIGTERM)  # torchrun stops its ranks, as on Ctrl-C
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=TERM_GRACE)
    finally:  # also on Ctrl-C or a failure here: nothing of the launch outlives it
        leftovers = kill_launch(proc, marker, directory)
    out = Launch(directory, list(job["keys"]), world_size, code, timed_out,
                 time.monotonic() - t0, limit, leftovers=leftovers)  # fmt: skip
    for i in range(len(out.keys)):
        for r in range(world_size):
            with contextlib.suppress(OSError, ValueError):
                res = json.loads((directory / f"rank{r}.{i}.json").read_text())
                out.results.setdefault(i, {})[r] = res
    return out


# -- one record from the ranks' results ------------------------------------------------------


_FAILURE = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def exit_codes(ln: Launch) -> dict[int, int]:
    """Rank -> exit code of each failed rank, from torchrun's failure summary in its log."""
    text = ""
    with contextlib.suppress(OSError):
        text = (ln.directory / "launcher.log").read_text(errors="replace")
    start = text.rfind("Failures:")
    if start < 0:
        return {}
    return {int(r): int(c) for r, c in _FAILURE.findall(text, start)}


def outcome(ln: Launch, i: int) -> tuple[str, str | None] | None:
    """(status, message) of workload ``i`` of a launch, or None where it did not run (the
    launch ended in an earlier one). Before the one the launch ended in: ``ok``. In it:
    ``timeout`` at the limit; else a rank that died without its result, other than by the
    SIGTERM with which torchrun stops the others after a failure (a signal, an exit of its
    own): ``crashed`` (the others' errors, "connection closed by peer", follow from it); else
    the earliest failure a rank recorded (``oom``, ``unsupported``, ``error``)."""
    end = ln.ended_at
    if i < end:
        return Status.OK, None
    if i > end:
        return None
    results = ln.results.get(i, {})
    failed = [r for r in results.values() if r.get("status") != Status.OK]
    if ln.timed_out:
        where = {r: ln.log_tail(f"rank{r}.log", 1) for r in range(ln.world_size)}
        return Status.TIMEOUT, (
            f"the launch of {ln.world_size} ranks exceeded its limit of {ln.limit:g} s; torchrun "
            "and every rank killed; last words: "
            + "; ".join(f"rank {r}: {w or 'nothing'}" for r, w in where.items())
        )
    codes = exit_codes(ln)
    missing = [r for r in range(ln.world_size) if r not in results]
    dead = [r for r in missing if codes.get(r) != -signal.SIGTERM] if codes else missing
    if dead and (codes or not failed):
        rank = dead[0]
        how = exit_description(codes.get(rank, ln.code))
        tail = ln.log_tail(f"rank{rank}.log") or ln.log_tail("launcher.log")
        return Status.CRASHED, f"rank {rank} {how} before writing its result; log: {tail}"
    first = min(failed, key=lambda r: float(r.get("failed_at") or 0.0))
    return str(first["status"]), f"rank {first['rank']}: {first.get('message')}"


def merge(rec: dict[str, Any], ln: Launch, i: int) -> None:
    """The ranks' results for workload ``i`` (which ran) into its record, in rank order."""
    said = outcome(ln, i)
    assert said is not None
    status, message = said
    if status == Status.OK and ln.code:  # every result is in; torchrun's own end was not clean
        message = f"the ranks ended, then torchrun {exit_description(ln.code)}"
    rec["status"], rec["message"] = status, message
    results = ln.results.get(i, {})
    ranks = [results[r] for r in sorted(results)]
    rec["rank_status"] = {str(r["rank"]): r.get("status") for r in ranks}
    if ln.leftovers:
        rec["message"] = (message or "") + f" [processes still alive: {ln.leftovers}]"
    if not ranks:
        return
    first = ranks[0]
    # What every record carries, as rank 0 ran it (the same settings on every rank).
    for k in ("precision", "num_threads", "settings_changed", "settings_changes"):
        if k in first:
            rec[k] = first[k]
    ts.nccl_read_back(rec, first.get("nccl_env"))
    rec["peak_memory_bytes"] = max((r.get("peak_memory_bytes") or 0 for r in ranks), default=None)
    rec["memory"] = first.get("memory")
    rec["phases"] = {**rec.get("phases", {}), **first.get("phases", {})}
    if "traceback" in first or status != Status.OK:
        failed = [r for r in ranks if r.get("traceback")]
        if failed:
            rec["traceback"] = failed[0]["traceback"]
    complete = len(ranks) == ln.world_size
    steps: list[list[str]] = [r.get("step_fingerprints") or [] for r in ranks]
    if complete and all(steps) and len({len(s) for s in steps}) == 1:
        step_digests = [fp.combine(list(ds)) for ds in zip(*steps, strict=True)]
        rec["step_fingerprints"] = step_digests
        rec["fingerprint"] = fp.combine(step_digests)
        rec["rank_fingerprints"] = [fp.combine(s) for s in steps]
        agree = [r["agreement_digests"] for r in ranks]
        disagree = [i for i, ds in enumerate(zip(*agree, strict=True)) if len(set(ds)) > 1]
        rec["ranks_agree"] = not disagree
        rec["ranks_first_disagree_step"] = disagree[0] if disagree else None
        rec["losses"] = first.get("losses")
        rec["first_step_seconds"] = first.get("first_step_seconds")
        _diff(rec, ranks)
    if status != Status.OK:
        return
    rec["flops_source"] = first.get("flops_source")
    if first.get("flops_pending"):
        rec["flops_pending"] = True
    counted = [r.get("flops_per_step") for r in ranks]
    rec["flops_per_step"] = sum(counted) if all(c is not None for c in counted) else None
    if first.get("flops_note"):
        rec["flops_note"] = first["flops_note"]
    timing = first["timing"]
    rec["timing"] = timing
    rec["seconds_per_step"] = timing["median"]
    rec["items_per_second"] = rec["items_per_step"] / timing["median"]
    for unit in ("flops", "bytes"):
        per_step = rec.get(f"{unit}_per_step")
        rec[f"{unit}_per_second"] = per_step / timing["median"] if per_step else None


def _diff(rec: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
    """``max_abs_diff`` against the first replicate: the largest over ranks (None, with the note,
    where one rank's outputs have no finite distance)."""
    refs = [r.get("diff_reference") for r in ranks]
    if all(d == "self" for d in refs):
        rec["diff_reference"] = "self"
        return
    dicts = [(r["rank"], d) for r, d in zip(ranks, refs, strict=True) if isinstance(d, dict)]
    if not dicts:
        return
    worst = next(((k, d) for k, d in dicts if d.get("max_abs_diff") is None), None)
    if worst is None:
        worst = max(dicts, key=lambda kd: float(kd[1]["max_abs_diff"]))
    rank, d = worst
    rec["max_abs_diff"] = d.get("max_abs_diff")
    rec["diff_reference"] = {**d, "rank": rank}


# -- the worker's side -------------------------------------------------------------------------


def _unsupported(device_type: str, world: int, levels: dict[str, str]) -> str | None:
    """Why this host cannot launch ``world`` ranks on ``device_type``, or None."""
    import torch

    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return f"torch {torch.__version__} was built without torch.distributed"
    if device_type == "cuda":
        if not dist.is_nccl_available():
            return f"torch {torch.__version__} has no NCCL backend"
        count = torch.cuda.device_count()
        if world > count:
            return f"world_size={world} needs {world} GPUs (one per rank); this host has {count}"
    elif not dist.is_gloo_available():
        return f"torch {torch.__version__} has no gloo backend"
    return None


def launch_dir(job: dict[str, Any], w: Workload, mode: Mode) -> Path:
    """``OUT/logs/distributed/r{R}-{mode}-{suite}__{name}``: the job, torchrun's log and each
    rank's log and result, kept for a look after the run."""
    out = Path(job["reference_dir"]).parent
    name = f"r{job['replicate']}-{mode.name}-{w.key.replace('/', '__')}"
    base = out / "logs" / "distributed" / name
    d, n = base, 1
    while d.exists():  # a resumed run measures this record again: keep the first one's files
        n += 1
        d = base.with_name(f"{name}.{n}")
    return d


#: Launches whose later workloads have not had their turn in this worker yet: (run directory,
#: mode, replicate, key) -> (the launch, the workload's index in it).
_PENDING: dict[tuple[str, str, int, str], tuple[Launch, int]] = {}


def _group(w: Workload, job: dict[str, Any], ws: Any) -> list[str]:
    """The workloads one launch runs: ``w``, then the distributed workloads after it in this
    worker's list that this mode can run (each gets its record when its turn comes)."""
    keys = list(job.get("workloads") or [w.key])
    later = keys[keys.index(w.key) + 1 :] if w.key in keys else []
    known = registry()
    return [w.key] + [k for k in later if k in known and known[k].distributed
                      and ws.unsupported(known[k]) is None]  # fmt: skip


def run_distributed(w: Workload, ctx: Context, job: dict[str, Any], mode: Mode, ws: Any,
                    rec: dict[str, Any],
                    notify: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Fill ``rec`` (the worker's record of ``w``) from a torchrun launch: a fresh one that runs
    ``w`` and the distributed workloads after it in this worker (one launch per worker, as one
    worker per mode and replicate: torchrun's start-up is paid once, not per workload), or the
    one that already ran it. A launch that ended early (a fault) leaves the workloads after the
    one it ended in to a fresh launch. ``notify`` brackets a launch as ``timing``/``timed``, so
    the runner keeps its other processes paused while the ranks run and time. Never raises for a
    fault of the workload or of its ranks."""
    levels = _levels(mode, ctx.device.type)
    world = int(levels["world_size"])
    backend = backend_for(ctx.device.type)
    nccl = {k: (None if levels[k] == "unset" else levels[k]) for k in ts.NCCL_ENV}
    rec.update(world_size=world, backend=backend, bucket_cap_mb=int(levels["bucket_cap_mb"]),
               ranks_agree=None, rank_fingerprints=None, launch=None, **nccl)  # fmt: skip
    rec["settings_inert"] = st.inert_settings(ts.NCCL_ENV, ctx.device.type, levels,
                                              mode.deterministic_algorithms)  # fmt: skip
    rec["items_per_step"] = w.items(ctx) * world
    per_rank_bytes = w.bytes(ctx)
    rec["bytes_per_step"] = None if per_rank_bytes is None else per_rank_bytes * world
    rec["seeding"] = w.seeding
    reason = ws.unsupported(w) or _unsupported(ctx.device.type, world, levels)
    if reason is not None:
        rec.update(status=Status.UNSUPPORTED, message=f"build: {reason}")
        return
    ident = (str(job["reference_dir"]), mode.name, int(job["replicate"]), w.key)
    pending = _PENDING.pop(ident, None)
    if pending is not None:  # ran in the launch of an earlier workload of this worker
        if notify is not None:
            notify("timing")
            notify("timed")
        ln, i = pending
        _fill(rec, ln, i, launched=False)
        return
    limit = launch_limit(job)
    keys = _group(w, job, ws)
    rank_job = {
        **{k: job[k] for k in ("seed", "profile", "device", "sources", "fingerprint_steps",
                               "warmup_steps", "budget", "target_rel", "min_samples",
                               "replicate", "reference_dir")},
        "keys": keys, "mode": asdict(mode), "backend": backend,
        "bucket_cap_mb": float(levels["bucket_cap_mb"]),
        "fingerprint_method": rec["fingerprint_method"],
        "nccl": {var: nccl[name] for name, var in ts.NCCL_ENV.items()},
        "count_flops": bool(job.get("count_flops", True)),
        "device_index": ctx.device.index if world == 1 and ctx.device.index else 0,
        # Past the launch's limit: the launcher, not a rank's collective, decides a timeout.
        "collective_timeout": None if limit is None else limit + 60,
    }  # fmt: skip
    env = ts.nccl_environment(dict(os.environ), levels)
    directory = launch_dir(job, w, mode)
    if notify is not None:
        notify("timing")
    try:
        ln = launch(rank_job, directory, world, env, limit)
    finally:
        if notify is not None:
            notify("timed")
    for i, key in enumerate(keys[1:], start=1):
        if outcome(ln, i) is not None:
            _PENDING[(ident[0], ident[1], ident[2], key)] = (ln, i)
    _fill(rec, ln, 0, launched=True)


def _fill(rec: dict[str, Any], ln: Launch, i: int, launched: bool) -> None:
    rec["launch"] = {"seconds": ln.seconds, "limit_seconds": ln.limit,
                     "directory": str(ln.directory), "torchrun_exit": ln.code,
                     "workloads": ln.keys, "position": i}  # fmt: skip
    merge(rec, ln, i)
    if launched:  # torchrun's start and end, the ranks' whole life, all its workloads
        rec["phases"]["launch"] = ln.seconds
