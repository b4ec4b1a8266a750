"""The orchestrator of a run: its plan (``schedule``, run by ``paired``), its folder and
env.json, its records written as they come, and its statistics."""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from detbench.core.modes import Mode
from detbench.core.workload import WorkloadError
from detbench.run.calls import calls_of, with_call
from detbench.run.config import TARGET_REL, RunConfig, RunError, refuse_changed, resolve_sources
from detbench.run.jobs import pair_job, worker_environment, worker_job
from detbench.run.paired import PairedPhase
from detbench.run.runstats import RunStats
from detbench.run.schedule import Plan, Slot, make_plan, shard_groups
from detbench.run.supervise import Crew, WorkerProcess
from detbench.store import gpustate
from detbench.store.outdir import refuse_used
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
        #: (workload, mode, replicate) -> the device its kept record ran on.
        self._placed: dict[tuple[str, str, int], int] = {}
        if config.resume:
            self.previous_env = load_env(config.out)
            self.host = host_env()
            for r in iter_records(config.out):
                key = (f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"]))
                self.done.add(key)
                if r.get("replicate") == 0 and r.get("flops_source") == "counted":
                    self._counted_flops[(r["suite"], r["workload"], r["mode"])] = r.get(
                        "flops_per_step"
                    )
                if r.get("device_name") in names:
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
        #: Each device's first worker's facts.
        self.device_envs: dict[str, Any] = dict(self.previous_env.get("device_workers") or {})
        self._lock = threading.RLock()  # records, statistics, env.json: shared by devices
        self.crew = Crew()
        # Whose first replicate is still to store, and later replicates waiting for its FLOPs.
        self._first_todo = {
            (*k.split("/", 1), s.mode.name)
            for s in self.plan.slots
            if s.replicate == 0
            for k in s.keys
        }
        self._held: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        self.paired = PairedPhase(
            config,
            self.workloads,
            self._pair_job,
            self._environment,
            self.crew,
            stream,
            owed=self.plan.slots,
            store=self._store_now,
            shard=self._shard_groups(),
        )
        for timer in self.paired.timers:
            timer.workers.on_ready = partial(self._ready, lane=timer.lane)

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
        if self.config.resume:
            before, now = env_facts(self.previous_env), env_facts(here)
            refuse_changed(self.config.out, before, now, here, bool(self.done))

    def _env_doc(self) -> dict[str, Any]:
        """env.json as it stands (``run_stats`` and ``run_calls`` come at the end of a call)."""
        c = self.config
        resumed = list(self.previous_env.get("resumed_utc") or [])
        if c.resume:
            resumed.append(self.started_utc)
        parallel = (
            f"{len(c.device_names)} CPU workers ran side by side with {self.threads_per_worker} "
            "thread(s) each: their timings are not comparable with a serial run's"
        )
        return {
            "schema_version": 1,
            "started_utc": self.previous_env.get("started_utc", self.started_utc),
            **({"resumed_utc": resumed} if resumed else {}),
            "host": self.host,
            "git": self.git,
            "worker": self.device_env,
            "gpu_state": self.gpu_state,
            "mode_order": self.plan.order_json(),
            **({"run_calls": calls} if (calls := calls_of(self.previous_env)) else {}),
            **({"device_workers": self.device_envs} if c.devices else {}),
            **({"parallel_timing_note": parallel} if self.threads_per_worker is not None else {}),
            "study": c.study,
            "options": c.options_json(
                self.workloads, self.sources, self.threads_per_worker, TARGET_REL[c.device]
            ),
        }

    def _job(self, mode: Mode, replicate: int, lane: str, keys: list[str]) -> dict[str, Any]:
        return worker_job(
            self.config, self.sources, self.threads_per_worker, mode, replicate, lane, keys
        )

    def _pair_job(self, mode: Mode, replicate: int, lane: str, keys: list[str]) -> dict[str, Any]:
        return pair_job(self.config, self._job(mode, replicate, lane, keys))

    def _store_now(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self._store(rec, self._writer)

    def _environment(self, mode: Mode, lane: str) -> dict[str, str]:
        env, caches = worker_environment(self.config, mode, lane)
        self.cache_dirs.append(caches)  # removed at the end of the run
        return env

    def spawn(self, slot: Slot, keys: list[str], logs: Path, reference: Path) -> WorkerProcess:
        """Start the probe's worker of ``slot``, its first outputs in ``reference``."""
        name = self.config.device_names[slot.lane]
        job = {
            **self._pair_job(slot.mode, slot.replicate, name, keys),
            "mode_position": slot.position,
            "reference_dir": str(reference),
        }
        log = logs / f"r{slot.replicate}-{slot.mode.name}.log"
        return self.crew.spawn(self.config.python, job, self._environment(slot.mode, name), log)

    def _ready(self, msg: dict[str, Any], lane: str) -> None:
        """A worker is ready: the run's first one's and each device's facts go to env.json."""
        with self._lock:
            self.stats.startup_cpu += float(msg.get("startup_cpu_seconds") or 0.0)
            if self.host is None:
                self.host = self._host_later()
            first = self.device_env is None
            if first:
                self.check_environment({"host": self.host, "worker": msg["device_env"]})
                self.device_env = msg["device_env"]
            new_device = self.config.devices and lane not in self.device_envs
            if new_device:
                self.device_envs[lane] = msg["device_env"]
            if first or new_device:
                write_json_atomic(self.config.out / ENV_FILE, self._env_doc())

    def _flops_from_first_replicate(self, rec: dict[str, Any]) -> None:
        """Keep a first replicate's FLOP count, or fill a later replicate's from it."""
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
        """Write ``rec``, or hold a later replicate until its first replicate is written."""
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
        phases = rec.get("phases") or {}
        for phase in ("build", "fingerprint", "count", "invariance", "cleanup"):
            setattr(self.stats, phase, getattr(self.stats, phase) + phases.get(phase, 0.0))

    def _open_folder(self) -> Path:
        """The run's folder made ready for its first worker, git and GPU state noted; its logs/."""
        c = self.config
        out = c.out
        if not c.resume:
            refuse_used(self.config.out)
            # A run stopped before its first record may have left reference outputs.
            shutil.rmtree(out / ".reference", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        logs = out / "logs"
        logs.mkdir(exist_ok=True)
        self.git = git_info(PACKAGE_ROOT)
        snap = gpustate.snapshot()  # a resumed run keeps its first "before"
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
            # collect_env takes seconds in a child process (the runner never initialises
            # CUDA): it overlaps the first start-up and is collected in ``_ready``.
            self._host_later = host_env_later()
        self._open_folder()
        if isinstance(estimate, int | float):
            self.stats.planned = float(estimate)
        elif estimate is not None:
            self.stats.planned = estimate.seconds
            self.paired.weigh(estimate)  # each group's weight for the time left
        # The probe worker ran before this, in this call: its seconds are the call's.
        self.stats.probe = float(getattr(estimate, "probe_seconds", 0.0))
        self.stats.devices = len(c.device_names)
        t0 = time.perf_counter()
        finished = False
        with ResultWriter(out) as writer:
            self._writer = writer
            try:
                try:
                    self.paired.run(before=self.stats.probe)  # its lines count the probe's time
                finally:
                    self.stats.paired = self.paired.stats.to_json()
                finished = True
            finally:
                with self._lock:  # replicates still waiting for a count that will not come
                    for key in list(self._held):
                        for rec in self._held.pop(key):
                            self._write(rec, writer)
                for d in self.cache_dirs:
                    shutil.rmtree(d, ignore_errors=True)
                self.stats.wall = time.perf_counter() - t0 + self.stats.probe
                self.gpu_state["after"] = gpustate.snapshot()["gpus"]
                doc = self._env_doc()
                doc.update(run_stats=self.stats.to_json(), run_calls=with_call(self, estimate))
                if finished:
                    # An interrupted run keeps the reference outputs for its resumption.
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
        return self.paired.groups


def prepare(config: RunConfig, stream: TextIO = sys.stderr) -> Runner:
    """A runner whose workloads are loaded and checked: input errors are raised here."""
    try:
        return Runner(config, stream)
    except WorkloadError as exc:
        raise RunError(str(exc)) from None
