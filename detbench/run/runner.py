"""The orchestrator: the plan's workers run one after another, records written as they come.

``detbench.run.schedule`` decides the order (replicates outer, modes shuffled per replicate), the
device of each worker and the estimate; ``detbench.run.supervise`` owns one worker's life (spawn,
messages, limits). This module runs the plan: it starts the next worker, its device stage too,
while the current one makes its verdicts (a verdict worker times nothing), stores each record the
moment it arrives, turns a worker that died or hung into records with a status, and keeps the
run's statistics and its env.json.

With ``--devices`` each device runs its queue of workers ("lane") in a thread of its own, one
worker at a time; a worker's fault costs its own records only. A worker sees only its GPU, as
``cuda:0``. A lane's thread spawns and reaps its own workers (Linux sends the parent-death signal
when the *thread* that spawned a worker ends). A later replicate's record waits while the first
replicate of its (workload, mode), whose FLOP count it takes, still measures on another device.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from detbench.core.modes import Mode
from detbench.core.workload import WorkloadError
from detbench.run.calls import with_call
from detbench.run.config import (
    RunConfig,
    RunError,
    refuse_changed,
    resolve_sources,
)
from detbench.run.envdoc import env_doc
from detbench.run.jobs import pair_job, worker_environment, worker_job
from detbench.run.paired import PairedPhase
from detbench.run.runstats import RunStats
from detbench.run.schedule import LaneQueues, Plan, Progress, Slot, make_plan, shard_groups
from detbench.run.supervise import (
    Crew,
    Stopped,
    WorkerProcess,
    ending,
    side_by_side,
    take_turn,
)
from detbench.store import gpustate
from detbench.store.outdir import refuse_used
from detbench.store.record import lost
from detbench.store.results import (
    ENV_FILE,
    ResultWriter,
    env_facts,
    git_info,
    host_env,
    host_env_later,
    iter_records,
    load_env,
    utc_now,
    write_json_atomic,
)
from detbench.worker.protocol import PACKAGE_ROOT

if TYPE_CHECKING:
    from detbench.run.estimate import Estimate

#: Workers in a row (on one device) that fail to start before the run gives up (a broken GPU or
#: install).
MAX_FAILED_STARTS = 2


@dataclass
class _Lane:
    """One device's share of a run while it goes."""

    index: int
    name: str
    failed_starts: int = 0


class Runner:
    def __init__(self, config: RunConfig, stream: TextIO = sys.stderr) -> None:
        self.config = config
        self.stream = stream
        self.done: set[tuple[str, str, int]] = set()
        self.previous_env: dict[str, Any] = {}
        self.host: dict[str, Any] | None = None
        self._counted_flops: dict[tuple[str, str, str], float | None] = {}
        self._host_later: Callable[[], dict[str, Any]] = host_env
        names = config.device_names
        #: (workload, mode, replicate) -> the device its kept record ran on: the rest of the
        #: run spreads beside them.
        self._placed: dict[tuple[str, str, int], int] = {}
        if config.resume:
            self.previous_env = load_env(config.out)
            self.host = host_env()
            for r in iter_records(config.out):
                self.done.add((f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"])))
                if r.get("replicate") == 0 and r.get("flops_source") == "counted":
                    self._counted_flops[(r["suite"], r["workload"], r["mode"])] = r.get(
                        "flops_per_step"
                    )
                if r.get("device_name") in names:
                    key = (f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"]))
                    self._placed[key] = names.index(r["device_name"])
            self.check_environment({"host": self.host})  # before anything is printed or run
        else:
            refuse_used(self.config.out)
        self.sources, self.workloads = resolve_sources(config)
        self.plan: Plan = make_plan(
            [w.key for w in self.workloads],
            config.modes,
            config.replicates,
            config.seed,
            self.done,
            config.only_for,
            lanes=len(names),
            placed=self._placed,
            shard=config.shard,
            by_group=config.paired,
        )
        import torch  # the CLI has it imported already

        #: torch's threads in a worker, and with parallel CPU workers each one's share of them.
        self.serial_threads = torch.get_num_threads()
        self.threads_per_worker: int | None = (
            max(1, self.serial_threads // len(names)) if config.parallel_cpu else None
        )
        self.stats = RunStats()
        self.records: list[dict[str, Any]] = []
        self.device_env: dict[str, Any] | None = None
        self.gpu_state: dict[str, Any] = dict(self.previous_env.get("gpu_state") or {})
        self.cache_dirs: list[str] = []  # compile caches of this run's workers, removed at the end
        #: Each device's worker facts (its first worker's), for env.json and the report.
        self.device_envs: dict[str, Any] = dict(self.previous_env.get("device_workers") or {})
        # Shared by the lanes: records, progress, statistics, env.json; the workers alive.
        self._lock = threading.RLock()
        self.crew = Crew()
        # (suite, workload, mode) whose first replicate this run still has to store, and the
        # later replicates' records that wait for its FLOP count.
        self._first_todo = {
            (*k.split("/", 1), s.mode.name)
            for s in self.plan.slots
            if s.replicate == 0
            for k in s.keys
        }
        self._held: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        self.fused = config.timing_design == "paired"
        self.launched = frozenset(w.key for w in self.workloads if w.distributed)
        #: The workloads verdict workers run: none where the paired phase makes every verdict.
        self.lane_keys: set[str] | None = set() if self.fused else None
        self.paired = (
            PairedPhase.of(
                config,
                self.workloads,
                self._pair_job,
                self._environment,
                self.crew,
                stream,
                owed=self.plan.slots if self.fused else None,
                store=self._store_now,
                shard=self._shard_groups(),
            )
            if config.paired
            else None
        )
        if self.paired is not None:  # its workers' facts go to env.json as a verdict worker's
            for i, timer in enumerate(self.paired.timers):
                timer.workers.on_ready = partial(self._ready, lane=_Lane(i, timer.lane))

    def _shard_groups(self) -> set[tuple[str, int]] | None:
        """The (workload, replicate) groups of ``--shard K/N`` (None: not a shard)."""
        c = self.config
        if c.shard is None:
            return None
        keys = [w.key for w in self.workloads]
        full = make_plan(keys, c.modes, c.replicates, c.seed, only_for=c.only_for)
        return shard_groups(full, c.shard)

    @property
    def missing(self) -> int:
        """How many (workload, mode, replicate) records this run will make."""
        return self.plan.records

    def check_environment(self, here: dict[str, Any]) -> None:
        """Refuse to resume where the facts that decide the results differ from the run's."""
        if self.config.resume:
            before, now = env_facts(self.previous_env), env_facts(here)
            refuse_changed(self.config.out, before, now, here, bool(self.done))

    # -- environment -------------------------------------------------------------------------
    def _env_doc(self) -> dict[str, Any]:
        return env_doc(self)

    # -- workers -------------------------------------------------------------------------------
    def _job(self, mode: Mode, replicate: int, lane: str, keys: list[str]) -> dict[str, Any]:
        return worker_job(
            self.config, self.sources, self.threads_per_worker, mode, replicate, lane, keys
        )

    def _pair_job(self, mode: Mode, replicate: int, lane: str, keys: list[str]) -> dict[str, Any]:
        return pair_job(self.config, self._job(mode, replicate, lane, keys))

    def _store_now(self, rec: dict[str, Any]) -> None:
        """A verdict record from the paired phase, written at once."""
        with self._lock:
            self._store(rec, self._writer)

    def _environment(self, mode: Mode, lane: str) -> dict[str, str]:
        env, caches = worker_environment(self.config, mode, lane)
        self.cache_dirs.append(caches)  # removed at the end of the run
        return env

    def spawn(
        self, slot: Slot, keys: list[str], logs: Path, reference: Path | None = None
    ) -> WorkerProcess:
        """Start the worker of ``slot`` for ``keys``, its log in ``logs``; ``reference``: where
        the first replicate's outputs go (a probe's: not the run's directory)."""
        c = self.config
        name = c.device_names[slot.lane]
        job = {
            **self._job(slot.mode, slot.replicate, name, keys),
            "mode_position": slot.position,
            "count_flops": slot.replicate == 0,
            "cudnn_log": c.cudnn_log,  # the worker's log file and environment: WorkerProcess
            "reference_dir": str(reference or c.out / ".reference"),
        }
        env = self._environment(slot.mode, name)
        worker = self.crew.spawn(
            c.python, job, env, logs / f"r{slot.replicate}-{slot.mode.name}.log"
        )
        with self._lock:
            self.stats.workers += 1
        return worker

    def _drive(
        self,
        worker: WorkerProcess,
        slot: Slot,
        progress: Progress,
        writer: ResultWriter,
        lane: _Lane,
    ) -> list[str]:
        """Run ``worker`` to its end (``supervise.take_turn``), its records stored as they come
        and the workloads it took down with it recorded with their status. Return the keys it
        did not finish."""
        c = self.config
        device = lane.name if len(c.device_names) > 1 else None

        def ready(msg: dict[str, Any]) -> None:
            lane.failed_starts = 0
            self._ready(msg, lane)

        def start(key: str) -> None:
            with self._lock:
                progress.show(slot, c.replicates, len(c.modes), key, device)

        def record(rec: dict[str, Any]) -> None:
            with self._lock:
                self._store(rec, writer)
                progress.advance(f"{rec['suite']}/{rec['workload']}", device)

        limits = (c.startup_timeout, c.timeout)
        turn = take_turn(worker, self.crew, limits, ready, start, record)
        with self._lock:
            self.stats.add_turn(turn, slot.replicate, slot.mode.name)
        if not turn.remaining:
            return []
        if self.crew.stopping:  # killed because the run stops: no fault of the workload's
            raise Stopped
        if not turn.started:
            lane.failed_starts += 1
        status, why = ending(turn, worker.log)
        for key in turn.lost():
            rec = lost(
                key,
                slot.mode,
                status,
                why,
                turn.code,
                replicate=slot.replicate,
                mode_position=slot.position,
                seed=c.seed,
                device=c.device,
                device_name=lane.name,
                profile=c.profile,
                utc=utc_now(),
            )
            record(rec)
            turn.remaining.remove(key)
        if lane.failed_starts >= MAX_FAILED_STARTS:
            on = f" on {lane.name}" if len(c.device_names) > 1 else ""
            raise RunError(
                f"{lane.failed_starts} workers in a row did not start{on} ({status}: {why}); "
                f"stopping. Records kept in {c.out}; resume with: detbench run --resume {c.out}"
            )
        return turn.remaining

    def _ready(self, msg: dict[str, Any], lane: _Lane) -> None:
        """A worker is ready: the first one's facts are checked (resume) and go to env.json, and
        so does the first worker's of each device."""
        with self._lock:
            self.stats.startup_cpu += float(msg.get("startup_cpu_seconds") or 0.0)
            if self.host is None:
                self.host = self._host_later()
            first = self.device_env is None
            if first:
                self.check_environment({"host": self.host, "worker": msg["device_env"]})
                self.device_env = msg["device_env"]
            new_device = self.config.devices and lane.name not in self.device_envs
            if new_device:
                self.device_envs[lane.name] = msg["device_env"]
            if first or new_device:
                write_json_atomic(self.config.out / ENV_FILE, self._env_doc())

    def _flops_from_first_replicate(self, rec: dict[str, Any]) -> None:
        """Fill the FLOPs of a later replicate from the first replicate's count of the same
        (workload, mode), or keep the first's so the later ones can take it."""
        key = (rec["suite"], rec["workload"], rec["mode"])
        if rec.get("replicate") == 0 and rec.get("flops_source") == "counted":
            self._counted_flops[key] = rec.get("flops_per_step")
        if not rec.pop("flops_pending", False):
            return
        flops = self._counted_flops.get(key)
        rec["flops_per_step"] = flops
        if flops is None:
            rec["flops_source"] = None
            rec["flops_note"] = "the first replicate, which counts the FLOPs, has no count"
        elif rec.get("seconds_per_step"):
            rec["flops_per_second"] = flops / rec["seconds_per_step"]

    def _store(self, rec: dict[str, Any], writer: ResultWriter) -> None:
        """Write ``rec`` now; or, for a later replicate whose FLOPs come from a first replicate
        still measuring on another device, when that one's record is written."""
        key = (rec["suite"], rec["workload"], rec["mode"])
        if rec.get("flops_pending") and key in self._first_todo:
            self._held.setdefault(key, []).append(rec)
            return
        self._write(rec, writer)
        if rec.get("replicate") == 0 and key in self._first_todo:
            self._first_todo.discard(key)
            for held in self._held.pop(key, []):
                self._write(held, writer)

    def _write(self, rec: dict[str, Any], writer: ResultWriter) -> None:
        self._flops_from_first_replicate(rec)
        writer.append(rec)
        self.records.append(rec)
        self.stats.records += 1
        for phase in ("build", "fingerprint", "count", "timing", "invariance", "cleanup"):
            setattr(
                self.stats,
                phase,
                getattr(self.stats, phase) + (rec.get("phases") or {}).get(phase, 0.0),
            )
        timing = rec.get("timing") or {}
        if timing.get("reached_target") is False:
            self.stats.timing_target_missed += 1

    # -- the whole run -------------------------------------------------------------------------
    def _open_folder(self) -> Path:
        """The run's folder made ready for its first worker, and its logs/ folder: refused where
        another run used it, the checkout's git state and the GPUs' state before the run noted,
        env.json written (a resumed run keeps its own until its first worker is checked)."""
        c = self.config
        out = c.out
        if not c.resume:
            refuse_used(self.config.out)
            # A folder free for a new run may hold a run stopped before its first record: its
            # reference outputs, if any, are no reference for this one.
            shutil.rmtree(out / ".reference", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        logs = out / "logs"
        logs.mkdir(exist_ok=True)
        self.git = git_info(PACKAGE_ROOT)
        # The GPUs' clocks, power and throttling before and after (a resumed run keeps its first
        # "before"); on a host without NVML or nvidia-smi the reason is recorded instead.
        snap = gpustate.snapshot()
        self.gpu_state.update(
            source=snap["source"],
            reason=snap["reason"],
            before=self.gpu_state.get("before") or snap["gpus"],
        )
        if not c.resume:  # a resumed run keeps its env.json until its first worker is checked
            write_json_atomic(out / ENV_FILE, self._env_doc())
        return logs

    def run(self, estimate: Estimate | float | None = None) -> RunStats:
        c = self.config
        out = c.out
        self.started_utc = utc_now()
        if self.host is None:
            # collect_env runs in a child process (so the runner never initialises CUDA) and
            # takes seconds: it overlaps the first worker's start-up and is collected before
            # that worker's first sample (see _drive).
            self._host_later = host_env_later()
        logs = self._open_folder()
        progress = Progress.for_plan(self.plan, estimate, self.stream, self.launched)
        if estimate is not None:
            self.stats.planned = (
                float(estimate) if isinstance(estimate, int | float) else estimate.seconds
            )
        if self.paired is not None and estimate is not None and not isinstance(estimate, float):
            self.paired.weigh(estimate)  # each group's weight for the time left
        # The probe worker ran before this, in this call: its seconds are the call's.
        self.stats.probe = float(getattr(estimate, "probe_seconds", 0.0))
        queues = LaneQueues(self.plan, self._placed)
        lanes = [_Lane(i, name) for i, name in enumerate(c.device_names)]
        self.stats.devices = len(lanes)
        t0 = time.perf_counter()
        finished = False
        with ResultWriter(out) as writer:
            self._writer = writer
            try:
                each = [partial(self._run_lane, ln, queues, progress, writer, logs) for ln in lanes]
                if len(lanes) == 1:
                    each[0]()
                else:  # each device's lane in a thread of its own
                    side_by_side(each, c.device_names, self.crew)
                if self.paired is not None:  # every verdict is in: now the costs, side by side
                    progress.close()
                    progress.tty = False  # its line is ended; the paired phase prints its own
                    try:
                        self.paired.run(before=progress.clock() - progress.t0)
                    finally:
                        self.stats.paired = self.paired.stats.to_json()
                finished = True
            finally:
                with self._lock:  # replicates still waiting for a count that will not come
                    for key in list(self._held):
                        for rec in self._held.pop(key):
                            self._write(rec, writer)
                self.stats.stolen = queues.stolen
                for d in self.cache_dirs:
                    shutil.rmtree(d, ignore_errors=True)
                progress.close()
                self.stats.wall = time.perf_counter() - t0 + self.stats.probe
                self.gpu_state["after"] = gpustate.snapshot()["gpus"]
                doc = self._env_doc()
                doc.update(run_stats=self.stats.to_json(), run_calls=with_call(self, estimate))
                if finished:
                    # The first replicate's outputs served the later ones' differences; an
                    # interrupted run keeps them for the run that resumes it.
                    shutil.rmtree(out / ".reference", ignore_errors=True)
                    doc["finished_utc"] = utc_now()
                else:
                    doc["interrupted_utc"] = utc_now()
                if self.device_env is not None or not c.resume:
                    with contextlib.suppress(OSError):
                        write_json_atomic(out / ENV_FILE, doc)
        return self.stats

    @property
    def costs_missing(self) -> int:
        """How many (workload, replicate) groups the paired phase will time."""
        return 0 if self.paired is None else self.paired.groups

    def _run_lane(
        self, lane: _Lane, queues: LaneQueues, progress: Progress, writer: ResultWriter, logs: Path
    ) -> None:
        """One device's workers, one at a time: each slot's worker, with the next slot's worker
        started beside it; the workloads a dead worker did not reach go to a fresh one."""
        pending: tuple[Slot, WorkerProcess] | None = None  # the next slot, its worker started
        worker: WorkerProcess | None = None
        try:
            while True:
                if pending is not None:
                    (slot, worker), pending = pending, None
                else:
                    taken = self._take(queues, lane)
                    if taken is None:
                        return
                    slot, worker = taken[0], self.spawn(*taken, logs)
                nxt = self._take(queues, lane)
                if nxt is not None:
                    pending = (nxt[0], self.spawn(*nxt, logs))
                    pending[1].release()  # nothing of this device is timed: its CUDA start too
                while True:
                    todo = self._drive(worker, slot, progress, writer, lane)
                    if not todo:
                        break
                    worker = self.spawn(slot, todo, logs)
        finally:  # interrupted: the early-started worker goes too, and one never driven
            for w in (worker, pending[1] if pending is not None else None):
                if w is not None and not w.closed:
                    w.kill()
                    self.crew.finish(w)

    def _take(self, queues: LaneQueues, lane: _Lane) -> tuple[Slot, list[str]] | None:
        """The next slot of ``lane`` with workloads for a verdict worker, and those (where the
        paired phase makes the verdicts, the distributed ones, whose ranks it launches)."""
        while (slot := queues.take(lane.index)) is not None:
            keys = [k for k in slot.keys if self.lane_keys is None or k in self.lane_keys]
            if keys:
                return slot, keys
        return None


def prepare(config: RunConfig, stream: TextIO = sys.stderr) -> Runner:
    """A runner whose workloads are loaded and checked: every input error is raised here, before
    anything is written."""
    try:
        return Runner(config, stream)
    except WorkloadError as exc:
        raise RunError(str(exc)) from None
