"""The orchestrator: the plan's workers run one after another, records written as they come.

``detbench.schedule`` decides the order (replicates outer, modes shuffled per replicate) and the
estimate; ``detbench.supervise`` owns one worker's life (spawn, messages, pauses, limits). This
module runs the plan: it starts the next worker while the current one measures, stores each
record the moment it arrives, turns a worker that died or hung into records with a status, and
keeps the run's statistics and its env.json.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from detbench import gpustate
from detbench.config import (
    MIN_SAMPLES,
    PACKAGE_ROOT,
    RESUME_FACTS,
    TARGET_REL,
    RunConfig,
    RunError,
    resolve_sources,
)
from detbench.modes import CUBLAS_ENV, record_fields
from detbench.results import (
    ENV_FILE,
    RESULTS_FILE,
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
from detbench.schedule import Plan, Progress, Slot, make_plan
from detbench.supervise import TIMEOUT, WorkerProcess, exit_description, log_tail, lost_keys
from detbench.workload import WorkloadError

#: Workers in a row that fail to start before the run gives up (a broken GPU or install).
MAX_FAILED_STARTS = 2


@dataclass
class RunStats:
    """Where the wall time of a run went (seconds)."""

    wall: float = 0.0
    startup: float = 0.0  # waiting for a worker to be ready: imports, mode, CUDA init
    startup_cpu: float = 0.0  # the workers' own start-up work, most of it overlapped
    build: float = 0.0
    fingerprint: float = 0.0
    count: float = 0.0  # the one step run under the FLOP counter
    timing: float = 0.0
    invariance: float = 0.0  # the batch-invariance pass: built and stepped at every batch size
    cleanup: float = 0.0  # freeing a workload's objects (and CUDA cache) after it
    shutdown: float = 0.0  # from a worker's last message to its exit (interpreter teardown)
    workers: int = 0
    records: int = 0
    timing_target_missed: int = 0  # records whose samples hit the budget before the target
    neighbour_pauses: int = 0  # timing passes during which the next worker's start-up was paused

    @property
    def other(self) -> float:
        return (
            self.wall
            - self.startup
            - self.build
            - self.fingerprint
            - self.count
            - self.timing
            - self.invariance
            - self.cleanup
            - self.shutdown
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "other": self.other}


class Runner:
    def __init__(self, config: RunConfig, stream: TextIO = sys.stderr) -> None:
        self.config = config
        self.stream = stream
        self.done: set[tuple[str, str, int]] = set()
        self._previous: dict[str, Any] = {}
        self._host: dict[str, Any] | None = None
        self._counted_flops: dict[tuple[str, str, str], float | None] = {}
        self._host_later: Callable[[], dict[str, Any]] = host_env
        if config.resume:
            self._previous = load_env(config.out)
            self._host = host_env()
            self.check_environment({"host": self._host})  # before anything is printed or run
            for r in iter_records(config.out):
                self.done.add((f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"])))
                if r.get("replicate") == 0 and r.get("flops_source") == "counted":
                    self._counted_flops[(r["suite"], r["workload"], r["mode"])] = r.get(
                        "flops_per_step"
                    )
        else:
            self._refuse_used_directory()
        self.sources, self.workloads = resolve_sources(config)
        self.plan: Plan = make_plan(
            [w.key for w in self.workloads], config.modes, config.replicates, config.seed,
            self.done, config.only_for,
        )  # fmt: skip
        self.stats = RunStats()
        self.records: list[dict[str, Any]] = []
        self.device_env: dict[str, Any] | None = None
        self.gpu_state: dict[str, Any] = dict(self._previous.get("gpu_state") or {})
        self._failed_starts = 0
        self._cache_dirs: list[str] = []  # compile caches of this run's workers, removed at the end

    @property
    def missing(self) -> int:
        """How many (workload, mode, replicate) records this run will make."""
        return self.plan.records

    def check_environment(self, here: dict[str, Any]) -> None:
        """Refuse to resume where the facts that decide the results differ from the run's."""
        if not self.config.resume:
            return
        before = env_facts(self._previous)
        now = env_facts(here)
        for key, word in RESUME_FACTS.items():
            if key in ("device", "gpu", "cudnn") and not here.get("worker"):
                continue  # known once the first worker has started
            if before[key] != now[key]:
                raise RunError(
                    f"refusing to resume {self.config.out}: {word} differs: {before[key]} "
                    f"(the run) vs {now[key]} (here); start a new run instead"
                )

    def _refuse_used_directory(self) -> None:
        if (self.config.out / RESULTS_FILE).exists():
            raise RunError(
                f"{self.config.out} already holds the results of another run; "
                "choose a new --out directory"
            )

    # -- environment -------------------------------------------------------------------------
    def _env_doc(self) -> dict[str, Any]:
        c = self.config
        resumed = list(self._previous.get("resumed_utc") or [])
        if c.resume:
            resumed.append(self._started)
        return {
            "schema_version": 1,
            "started_utc": self._previous.get("started_utc", self._started),
            **({"resumed_utc": resumed} if resumed else {}),
            "host": self._host,
            "git": self._git,
            "worker": self.device_env,
            "gpu_state": self.gpu_state,
            "mode_order": self.plan.order_json(),
            "study": c.study,
            "options": {
                "argv": sys.argv,
                "suites": sorted({w.suite for w in self.workloads}),
                "workloads": [w.key for w in self.workloads],
                "sources": self.sources,
                "modes": [m.name for m in c.modes],
                "settings": c.settings,
                "only_for": c.only_for,
                "replicates": c.replicates,
                "profile": c.profile,
                "device": c.device,
                "seed": c.seed,
                "fingerprint_steps": c.setting("fingerprint_steps"),
                "warmup_steps": c.setting("warmup_steps"),
                "budget": c.setting("budget"),
                "target_rel": TARGET_REL[c.device],
                "min_samples": MIN_SAMPLES,
                "fingerprint": c.fingerprint,
                "timeout": c.timeout,
                "startup_timeout": c.startup_timeout,
                "inherited_cublas_workspace_config": os.environ.get(CUBLAS_ENV),
            },
        }

    # -- workers -------------------------------------------------------------------------------
    def _spawn(self, slot: Slot, keys: list[str], logs: Path) -> WorkerProcess:
        c = self.config
        job = {
            "mode": asdict(slot.mode),
            "mode_position": slot.position,
            "replicate": slot.replicate,
            "seed": c.seed,
            "device": c.device,
            "profile": c.profile,
            "sources": self.sources,
            "workloads": keys,
            "fingerprint_steps": c.setting("fingerprint_steps"),
            "warmup_steps": c.setting("warmup_steps"),
            "budget": c.setting("budget"),
            "target_rel": TARGET_REL[c.device],
            "min_samples": MIN_SAMPLES,
            "fingerprint": c.fingerprint,
            "count_flops": slot.replicate == 0,
            "reference_dir": str(c.out / ".reference"),
            "launched_at": time.time(),
        }
        env = slot.mode.environment(os.environ)
        if slot.mode.overrides.get("execution") == "compile":
            # Fresh compile caches in every worker: a cached autotuning choice or graph from an
            # earlier worker would hide the nondeterminism of compiling.
            env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="detbench-inductor-")
            env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
            env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
            self._cache_dirs.append(env["TORCHINDUCTOR_CACHE_DIR"])
        # The worker imports detbench from this checkout, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        self.stats.workers += 1
        log = logs / f"r{slot.replicate}-{slot.mode.name}.log"
        return WorkerProcess(c.python, job, env, log)

    def _drive(
        self,
        worker: WorkerProcess,
        slot: Slot,
        progress: Progress,
        writer: ResultWriter,
        neighbour: WorkerProcess | None,
    ) -> list[str]:
        """Run ``worker`` to its end while ``neighbour`` (the next worker) starts up beside it,
        paused whenever ``worker`` takes timing samples. Return the keys it did not finish."""
        c = self.config
        keys = worker.keys
        remaining = list(keys)
        in_flight: str | None = None
        started = timed_out = False
        alone: bool | None = None  # None until a timing pass has started
        why_timeout = ""
        try:
            worker.resume()  # it may have been paused as someone else's neighbour
            t0 = time.perf_counter()
            msg = worker.next(c.startup_timeout)
            self.stats.startup += time.perf_counter() - t0
            if msg is TIMEOUT:
                timed_out = True
                why_timeout = (
                    f"the worker did not start within {c.startup_timeout:g} s (imports, mode, "
                    "CUDA initialisation); killed"
                )
            elif msg is not None and msg["type"] == "ready":
                started = True
                self._failed_starts = 0
                self.stats.startup_cpu += float(msg.get("startup_cpu_seconds") or 0.0)
                if self._host is None:
                    self._host = self._host_later()
                if self.device_env is None:
                    self.check_environment({"host": self._host, "worker": msg["device_env"]})
                    self.device_env = msg["device_env"]
                    write_json_atomic(c.out / ENV_FILE, self._env_doc())
                worker.send("go")
            while started:
                msg = worker.next(c.timeout)
                if msg is None:  # the worker exited
                    break
                if msg is TIMEOUT:
                    timed_out = True
                    why_timeout = f"exceeded the --timeout of {c.timeout:g} s; worker killed"
                    break
                kind = msg["type"]
                if kind == "start":
                    in_flight, alone = msg["workload"], None
                    progress.show(slot, c.replicates, len(c.modes), msg["workload"])
                elif kind == "phase":
                    if msg["phase"] == "timing":
                        alone = neighbour is None or neighbour.pause()
                        self.stats.neighbour_pauses += neighbour is not None
                        worker.send("ok")
                    elif neighbour is not None:
                        neighbour.resume()
                elif kind == "record":
                    # Whether no other worker of the run was running while this one timed.
                    msg["record"]["timed_alone"] = alone
                    self._store(msg["record"], writer)
                    remaining.remove(in_flight)  # type: ignore[arg-type]
                    in_flight = None
                    progress.advance()
                elif kind == "done":
                    break
            if timed_out:
                worker.kill()
        except BaseException:  # Ctrl-C or a failure of the runner itself: stop the worker now
            worker.kill()
            raise
        finally:
            if neighbour is not None:
                neighbour.resume()
            t_last = time.perf_counter()
            code = worker.finish()
            self.stats.shutdown += time.perf_counter() - t_last
        if not remaining:
            return []
        if not started:
            self._failed_starts += 1
        lost = lost_keys(keys, remaining, in_flight, started)
        if timed_out:
            status, why = "timeout", why_timeout
        else:
            when = "while running this workload" if in_flight else "before running it"
            status = "crashed"
            why = f"worker {exit_description(code)} {when}; log: {log_tail(worker.log)}"
        for key in lost:
            suite, name = key.split("/", 1)
            self._store(
                {
                    "suite": suite,
                    "workload": name,
                    **record_fields(slot.mode),
                    "settings_changed": None,  # unknown: the worker never said
                    "replicate": slot.replicate,
                    "mode_position": slot.position,
                    "seed": c.seed,
                    "device": c.device,
                    "profile": c.profile,
                    "status": status,
                    "message": why,
                    "exit_code": code,
                    "fingerprint": None,
                    "seconds_per_step": None,
                    "items_per_second": None,
                    "utc": utc_now(),
                },
                writer,
            )
            remaining.remove(key)
            progress.advance()
        if self._failed_starts >= MAX_FAILED_STARTS:
            raise RunError(
                f"{self._failed_starts} workers in a row did not start ({status}: {why}); "
                f"stopping. Records kept in {c.out}; resume with: detbench run --resume {c.out}"
            )
        return remaining

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

    def measure_startup(self) -> float:
        """Seconds one worker of this run takes to be ready (imports, mode, CUDA initialisation),
        measured by starting one with nothing to do; it writes nothing but its log, which goes to
        a temporary directory."""
        import tempfile

        slot = Slot(0, 0, self.config.modes[0], ())
        with tempfile.TemporaryDirectory(prefix="detbench-probe-") as tmp:
            t0 = time.perf_counter()
            worker = self._spawn(slot, [], Path(tmp))
            msg = worker.next(self.config.startup_timeout)
            seconds = time.perf_counter() - t0
            worker.kill()
            worker.finish()
            tail = log_tail(worker.log)
        for d in self._cache_dirs:  # a compile mode's probe made one, as a worker would
            shutil.rmtree(d, ignore_errors=True)
        self._cache_dirs.clear()
        self.stats.workers -= 1
        if msg is None or msg is TIMEOUT or msg.get("type") != "ready":
            raise RunError(f"a worker did not start here; its log: {tail}")
        return seconds

    # -- the whole run -------------------------------------------------------------------------
    def run(self, estimate: float | None = None) -> RunStats:
        c = self.config
        out = c.out
        self._started = utc_now()
        if self._host is None:
            # collect_env runs in a child process (so the runner never initialises CUDA) and
            # takes seconds: it overlaps the first worker's start-up and is collected before
            # that worker's first sample (see _drive).
            self._host_later = host_env_later()
        if not c.resume:
            self._refuse_used_directory()
        out.mkdir(parents=True, exist_ok=True)
        logs = out / "logs"
        logs.mkdir(exist_ok=True)
        self._git = git_info(PACKAGE_ROOT)
        # The GPUs' clocks, power and throttling before and after (a resumed run keeps its first
        # "before"); on a host without NVML or nvidia-smi the reason is recorded instead.
        snap = gpustate.snapshot()
        self.gpu_state.update(
            source=snap["source"], reason=snap["reason"],
            before=self.gpu_state.get("before") or snap["gpus"],
        )  # fmt: skip
        if not c.resume:  # a resumed run keeps its env.json until its first worker is checked
            write_json_atomic(out / ENV_FILE, self._env_doc())
        slots = self.plan.slots
        progress = Progress(self.plan.records, estimate, self.stream)
        t0 = time.perf_counter()
        finished = False
        pending: dict[int, WorkerProcess] = {}  # slot index -> its worker, started early
        with ResultWriter(out) as writer:
            try:
                for i, slot in enumerate(slots):
                    todo = list(slot.keys)
                    while todo:
                        worker = pending.pop(i, None) or self._spawn(slot, todo, logs)
                        if i + 1 < len(slots) and i + 1 not in pending:
                            nxt = slots[i + 1]
                            pending[i + 1] = self._spawn(nxt, list(nxt.keys), logs)
                        todo = self._drive(worker, slot, progress, writer, pending.get(i + 1))
                finished = True
            finally:
                for w in pending.values():  # interrupted: the early-started worker goes too
                    w.kill()
                    w.finish()
                for d in self._cache_dirs:
                    shutil.rmtree(d, ignore_errors=True)
                progress.close()
                self.stats.wall = time.perf_counter() - t0
                self.gpu_state["after"] = gpustate.snapshot()["gpus"]
                doc = self._env_doc()
                doc["run_stats"] = self.stats.to_json()
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


def prepare(config: RunConfig, stream: TextIO = sys.stderr) -> Runner:
    """A runner whose workloads are loaded and checked: every input error is raised here, before
    anything is written."""
    try:
        return Runner(config, stream)
    except WorkloadError as exc:
        raise RunError(str(exc)) from None
