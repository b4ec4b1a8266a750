"""The orchestrator: one fresh worker process per (replicate, mode), records written as they come.

Replicates are the outer loop and modes the inner one, so every replicate of every mode is spread
over the whole run: a slow drift of the machine (clocks, temperature, a neighbour) touches all modes
alike instead of biasing whichever mode ran last.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from detbench.errors import DetbenchError
from detbench.modes import MODES, Mode, get_mode
from detbench.results import (
    ENV_FILE,
    RESULTS_FILE,
    ResultWriter,
    env_facts,
    git_info,
    host_env,
    iter_records,
    load_env,
    utc_now,
    write_json_atomic,
)
from detbench.workload import Workload, WorkloadError, builtin_suite_files, load_file

PACKAGE_ROOT = Path(__file__).resolve().parent.parent

#: Per-profile defaults: steps hashed by the fingerprint pass, warm-up steps, seconds of samples.
PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": {"fingerprint_steps": 3, "warmup_steps": 2, "min_run_time": 0.1},
    "full": {"fingerprint_steps": 3, "warmup_steps": 5, "min_run_time": 1.0},
}


#: The facts that must not change between a run and its resumption, with the words for them.
RESUME_FACTS = {
    "device": "the device",
    "gpu": "the GPU",
    "driver": "the NVIDIA driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "torch": "torch",
}


class RunError(DetbenchError):
    """A run that cannot start as asked (one clear line for the user)."""


@dataclass
class RunConfig:
    out: Path
    suites: list[str] = field(default_factory=list)
    workload_files: list[Path] = field(default_factory=list)
    modes: list[Mode] = field(default_factory=lambda: list(MODES))
    replicates: int = 3
    profile: str = "quick"
    device: str = "cpu"
    seed: int = 0
    fingerprint_steps: int | None = None
    warmup_steps: int | None = None
    min_run_time: float | None = None
    timeout: float | None = None
    python: str = sys.executable
    #: Only these workloads (``suite/name``), in this order; None: every selected workload.
    only: list[str] | None = None
    #: Continue the run in ``out``: measure only what has no record yet.
    resume: bool = False

    def setting(self, key: str) -> Any:
        value = getattr(self, key)
        return PROFILE_DEFAULTS[self.profile][key] if value is None else value


@dataclass
class RunStats:
    """Where the wall time of a run went (seconds)."""

    wall: float = 0.0
    startup: float = 0.0  # launching python, importing torch, applying the mode, CUDA init
    build: float = 0.0
    fingerprint: float = 0.0
    count: float = 0.0  # the one step run under the FLOP counter
    timing: float = 0.0
    cleanup: float = 0.0  # freeing a workload's objects (and CUDA cache) after it
    shutdown: float = 0.0  # from a worker's last message to its exit (interpreter teardown)
    workers: int = 0
    records: int = 0

    @property
    def other(self) -> float:
        return (
            self.wall
            - self.startup
            - self.build
            - self.fingerprint
            - self.count
            - self.timing
            - self.cleanup
            - self.shutdown
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "other": self.other}


def resolve_sources(config: RunConfig) -> tuple[list[str], list[Workload]]:
    """The files a worker loads and the workloads to run, in order.

    With no ``--suite`` and no ``--workload`` every built-in suite runs; ``--workload`` alone runs
    only the user's workloads; both together run both.
    """
    builtin = builtin_suite_files()
    suites = config.suites or ([] if config.workload_files else list(builtin))
    unknown = [s for s in suites if s not in builtin]
    if unknown:
        raise RunError(
            f"unknown suite {unknown[0]!r}; built-in suites: {', '.join(builtin) or 'none'}"
        )
    sources: list[str] = []
    chosen: list[Workload] = []
    for s in suites:
        sources.append(str(builtin[s]))
        chosen += [w for w in load_file(builtin[s]) if w.suite == s]
    for f in config.workload_files:
        defined = load_file(f)  # errors name the path as the user gave it
        if not defined:
            raise RunError(
                f"{f} defines no workload (no function decorated with @detbench.workload)"
            )
        chosen += defined
        sources.append(str(Path(f).resolve()))
    seen: set[str] = set()
    unique = [w for w in chosen if not (w.key in seen or seen.add(w.key))]  # type: ignore[func-returns-value]
    if config.only is not None:
        by_key = {w.key: w for w in unique}
        missing = [k for k in config.only if k not in by_key]
        if missing:
            raise RunError(
                f"unknown workload {missing[0]!r}; the workloads of this run: "
                f"{', '.join(by_key) or 'none'}"
            )
        unique = [by_key[k] for k in config.only]
    if not unique:
        raise RunError("no workloads to run")
    return sources, unique


class Progress:
    """One status line: which replicate, mode and workload runs, and how far the whole run is."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self._width = 0

    def _clock(self, seconds: float) -> str:
        m, s = divmod(int(seconds), 60)
        return f"{m}:{s:02d}"

    def show(
        self, replicate: int, replicates: int, mode_idx: int, modes: int, mode: str, workload: str
    ) -> None:
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        line = (
            f"[{self.done + 1:>{len(str(self.total))}}/{self.total} "
            f"{100 * self.done / self.total:3.0f}%] replicate {replicate + 1}/{replicates} "
            f"mode {mode_idx + 1}/{modes} {mode:<24} {workload}  "
            f"elapsed {self._clock(elapsed)}"
            + (f" eta {self._clock(eta)}" if eta is not None else "")
        )
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def advance(self) -> None:
        self.done += 1

    def close(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


_TIMEOUT: dict[str, Any] = {"type": "timeout"}


class _MessageReader:
    """JSON lines from the worker's pipe, with a time limit per message."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.sel = selectors.DefaultSelector()
        self.sel.register(fd, selectors.EVENT_READ)

    def next(self, limit: float | None) -> dict[str, Any] | None:
        """The next message; ``_TIMEOUT`` after ``limit`` seconds; None when the worker closed
        the pipe (it exited)."""
        deadline = None if limit is None else time.monotonic() + limit
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.sel.select(wait):
                return _TIMEOUT
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)
        return msg

    def close(self) -> None:
        self.sel.close()
        os.close(self.fd)


def _log_tail(path: Path, lines: int = 6) -> str:
    """What a dead worker's log says: for a fatal signal, Python's error line and the innermost
    frames that faulthandler wrote (where the workload crashed); else the log's last lines."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    fatal = [i for i, line in enumerate(text) if line.startswith("Fatal Python error")]
    if fatal:
        after = text[fatal[-1] :]
        frames = [line.strip() for line in after if line.strip().startswith("File ")][:3]
        return " | ".join([after[0].strip(), *frames])
    return " | ".join(text[-lines:])


def _exit_description(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Runner:
    def __init__(self, config: RunConfig, stream: TextIO = sys.stderr) -> None:
        self.config = config
        self.stream = stream
        self.done: set[tuple[str, str, int]] = set()
        self._previous: dict[str, Any] = {}
        self._host: dict[str, Any] | None = None
        if config.resume:
            self._previous = load_env(config.out)
            self._host = host_env()
            self.check_environment({"host": self._host})  # before anything is printed or run
            self.done = {
                (f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"]))
                for r in iter_records(config.out)
            }
        else:
            self._refuse_used_directory()
        self.sources, self.workloads = resolve_sources(config)
        self.stats = RunStats()
        self.records: list[dict[str, Any]] = []
        self.device_env: dict[str, Any] | None = None

    @property
    def missing(self) -> int:
        """How many (workload, mode, replicate) records this run will make."""
        c = self.config
        return sum(
            (w.key, m.name, r) not in self.done
            for r in range(c.replicates)
            for m in c.modes
            for w in self.workloads
        )

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
            "options": {
                "argv": sys.argv,
                "suites": sorted({w.suite for w in self.workloads}),
                "workloads": [w.key for w in self.workloads],
                "sources": self.sources,
                "modes": [m.name for m in c.modes],
                "replicates": c.replicates,
                "profile": c.profile,
                "device": c.device,
                "seed": c.seed,
                "fingerprint_steps": c.setting("fingerprint_steps"),
                "warmup_steps": c.setting("warmup_steps"),
                "min_run_time": c.setting("min_run_time"),
                "timeout": c.timeout,
            },
        }

    # -- one worker ----------------------------------------------------------------------------
    def _worker(
        self,
        mode: Mode,
        replicate: int,
        keys: list[str],
        progress: Progress,
        mode_idx: int,
        writer: ResultWriter,
        logs: Path,
    ) -> list[str]:
        """Run ``keys`` in one fresh worker; return the keys it did not finish (after a crash)."""
        c = self.config
        job = {
            "mode": asdict(mode),
            "replicate": replicate,
            "seed": c.seed,
            "device": c.device,
            "profile": c.profile,
            "sources": self.sources,
            "workloads": keys,
            "fingerprint_steps": c.setting("fingerprint_steps"),
            "warmup_steps": c.setting("warmup_steps"),
            "min_run_time": c.setting("min_run_time"),
            "reference_dir": str(c.out / ".reference"),
            "launched_at": time.time(),
            "runner_pid": os.getpid(),
        }
        env = mode.environment(os.environ)
        # The worker imports detbench from this checkout, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        log_path = logs / f"r{replicate}-{mode.name}.log"
        read_fd, write_fd = os.pipe()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [c.python, "-m", "detbench.worker", str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                start_new_session=True,
            )
        os.close(write_fd)
        self.stats.workers += 1
        reader = _MessageReader(read_fd)
        remaining = list(keys)
        in_flight: str | None = None
        started = timed_out = False
        try:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps(job).encode())
                proc.stdin.close()
            while True:
                msg = reader.next(c.timeout if in_flight is not None else None)
                if msg is None:  # the worker exited
                    break
                if msg is _TIMEOUT:
                    proc.kill()
                    timed_out = True
                    break
                if msg["type"] == "ready":
                    started = True
                    self.stats.startup += msg["startup_seconds"]
                    if self.device_env is None:
                        self.check_environment({"host": self._host, "worker": msg["device_env"]})
                        self.device_env = msg["device_env"]
                        write_json_atomic(c.out / ENV_FILE, self._env_doc())
                elif msg["type"] == "start":
                    in_flight = msg["workload"]
                    progress.show(
                        replicate, c.replicates, mode_idx, len(c.modes), mode.name, msg["workload"]
                    )
                elif msg["type"] == "record":
                    self._store(msg["record"], writer)
                    remaining.remove(in_flight)  # type: ignore[arg-type]
                    in_flight = None
                    progress.advance()
                elif msg["type"] == "done":
                    break
        except BaseException:  # Ctrl-C or a failure of the runner itself: stop the worker now
            proc.kill()
            raise
        finally:
            reader.close()
            t_last = time.perf_counter()
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            self.stats.shutdown += time.perf_counter() - t_last
        if not remaining:
            return []
        # The worker died, or was killed at its limit, before it finished. The workload in flight
        # is recorded as such and the rest go to a fresh worker. A worker that died before it was
        # ready, or between workloads without progress, takes all the rest down with it: a fresh
        # worker would only fail the same way.
        progressed = len(remaining) < len(keys)
        lost = (
            [in_flight]
            if in_flight is not None
            else ([] if started and progressed else list(remaining))
        )
        if timed_out:
            status, why = "timeout", f"exceeded the --timeout of {c.timeout:g} s; worker killed"
        else:
            when = "while running this workload" if in_flight else "before running it"
            status = "crashed"
            why = f"worker {_exit_description(code)} {when}; log: {_log_tail(log_path)}"
        for key in lost:
            suite, name = key.split("/", 1)
            self._store(
                {
                    "suite": suite,
                    "workload": name,
                    "mode": mode.name,
                    "benchmark": mode.benchmark,
                    "cudnn_deterministic": mode.cudnn_deterministic,
                    "deterministic_algorithms": mode.deterministic_algorithms,
                    "cudnn_enabled": mode.cudnn_enabled,
                    "replicate": replicate,
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
        return remaining

    def _store(self, rec: dict[str, Any], writer: ResultWriter) -> None:
        writer.append(rec)
        self.records.append(rec)
        self.stats.records += 1
        for phase in ("build", "fingerprint", "count", "timing", "cleanup"):
            setattr(
                self.stats,
                phase,
                getattr(self.stats, phase) + (rec.get("phases") or {}).get(phase, 0.0),
            )

    # -- the whole run -------------------------------------------------------------------------
    def run(self) -> RunStats:
        c = self.config
        out = c.out
        self._started = utc_now()
        if self._host is None:
            self._host = host_env()
        if not c.resume:
            self._refuse_used_directory()
        out.mkdir(parents=True, exist_ok=True)
        logs = out / "logs"
        logs.mkdir(exist_ok=True)
        self._git = git_info(PACKAGE_ROOT)
        if not c.resume:  # a resumed run keeps its env.json until its first worker is checked
            write_json_atomic(out / ENV_FILE, self._env_doc())
        keys = [w.key for w in self.workloads]
        progress = Progress(self.missing, self.stream)
        t0 = time.perf_counter()
        finished = False
        with ResultWriter(out) as writer:
            try:
                for r in range(c.replicates):
                    for i, mode in enumerate(c.modes):
                        todo = [k for k in keys if (k, mode.name, r) not in self.done]
                        while todo:
                            todo = self._worker(mode, r, todo, progress, i, writer, logs)
                finished = True
            finally:
                progress.close()
                self.stats.wall = time.perf_counter() - t0
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


def resume_config(directory: Path) -> RunConfig:
    """The configuration of the run in ``directory``, to continue it (``--resume``)."""
    if not directory.is_dir():
        raise RunError(f"no such results directory: {directory}")
    if not (directory / ENV_FILE).is_file():
        raise RunError(f"{directory} holds no {ENV_FILE}: not a detbench run, nothing to resume")
    env = load_env(directory)
    for _ in iter_records(directory):  # a malformed or truncated file: its one-line error
        pass
    o = env.get("options") or {}
    try:
        sources = [Path(s) for s in o["sources"]]
        config = RunConfig(
            out=directory,
            workload_files=sources,
            modes=[get_mode(m) for m in o["modes"]],
            replicates=int(o["replicates"]),
            profile=str(o["profile"]),
            device=str(o["device"]),
            seed=int(o["seed"]),
            fingerprint_steps=o.get("fingerprint_steps"),
            warmup_steps=o.get("warmup_steps"),
            min_run_time=o.get("min_run_time"),
            timeout=o.get("timeout"),
            only=list(o["workloads"]),
            resume=True,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunError(f"{directory / ENV_FILE}: cannot read the run's options ({exc})") from None
    for s in sources:
        if not s.is_file():
            raise RunError(f"cannot resume: the run's workload file {s} no longer exists")
    return config


def validate(config: RunConfig, cuda_available: bool) -> None:
    if config.replicates < 2:
        raise RunError(
            f"--replicates {config.replicates}: at least 2 are needed, since one replicate "
            "cannot show run-to-run behaviour"
        )
    if config.device == "cuda" and not cuda_available:
        raise RunError("--device cuda: no CUDA GPU is available to torch on this machine")
    if config.profile not in PROFILE_DEFAULTS:
        raise RunError(f"unknown profile {config.profile!r}; use quick or full")
    if config.timeout is not None and config.timeout <= 0:
        raise RunError("--timeout must be a positive number of seconds")


def prepare(config: RunConfig, stream: TextIO = sys.stderr) -> Runner:
    """A runner whose workloads are loaded and checked: every input error is raised here, before
    anything is written."""
    try:
        return Runner(config, stream)
    except WorkloadError as exc:
        raise RunError(str(exc)) from None
