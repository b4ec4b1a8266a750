"""``detbench exec -- COMMAND``: a user's command, unchanged, run under each mode in fresh
processes; what it leaves compared bitwise, its time compared in pairs.

Each round every mode runs the command once, and the baseline a second time (the A/A copy), in a
balanced order (``execplan.orders``). A run is a fresh process tree in the user's folder, with no
stdin, in its own session, with a ``sitecustomize`` first on ``PYTHONPATH`` that puts each
interpreter in the mode before the script's first line (``locate.scripted``). Its sample is its
time less its start-up. ``exec.json`` holds every run's facts as they come (``--resume``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from detbench.core.modes import Mode
from detbench.run.execio import Snapshot, Stream, named_folders, put_back, steps_per_second
from detbench.run.execplan import (
    EXEC_FILE,
    ExecConfig,
    ExecError,
    RunSlot,
    name_of,
    plan,
    script_of,
)
from detbench.run.execwait import kill_tree, stuck_words, wait
from detbench.run.schedule import clock
from detbench.store.outdir import refuse_used
from detbench.store.results import write_json_atomic
from detbench.worker.hostload import Probe
from detbench.worker.protocol import EXEC_JOB_ENV, EXEC_ROOT_ENV, PACKAGE_ROOT

#: Without ``--timeout``, a timed run past this many times the longest run so far (and
#: ``HANG_FLOOR`` seconds) is hung: killed and run once more (``execwait`` for how runs hang).
HANG_FACTOR = 5.0
HANG_FLOOR = 60.0

SITECUSTOMIZE = """\
# Written by detbench exec: puts this interpreter in the mode of the job that {env} names
# (detbench.locate.scripted), then runs the sitecustomize that this one hides, if any.
import os as _os

if _os.environ.get("{env}"):
    from detbench.locate import scripted as _scripted

    _scripted.boot()
    _scripted.chain(__file__)
"""


class ExecRunner:
    """Runs ``plan(c)``'s runs (module docstring); ``facts`` holds each run's, by key."""

    def __init__(self, c: ExecConfig, stream: TextIO = sys.stderr) -> None:
        self.c = c
        self.stream = stream
        self.slots = plan(c)
        self.facts: dict[str, dict[str, Any]] = {}
        self.census: dict[str, Any] | None = None
        self.warmup: dict[str, Any] | None = None
        self.started = time.monotonic()
        self.script = script_of(c.command, c.cwd)
        self.last: dict[str, Any] | None = None  # the latest run's facts (``leave_folder``)
        self.hung: list[dict[str, Any]] = []  # the runs killed as hung, each run once more

    def check(self) -> None:
        c = self.c
        if not c.command:
            raise ExecError("give the command after --: detbench exec [options] -- python train.py")
        if shutil.which(c.command[0]) is None and not Path(c.command[0]).is_file():
            raise ExecError(f"command not found: {c.command[0]}")
        if self.script is not None and not Path(self.script).is_file():
            raise ExecError(f"script not found: {self.script}")
        if c.replicates < 2:
            raise ExecError(
                f"--replicates {c.replicates}: one run per mode cannot show run-to-run "
                "behaviour; at least 2 are needed"
            )
        if c.timeout is not None and c.timeout <= 0:
            raise ExecError("--timeout must be a positive number of seconds")
        if not c.resume:
            refuse_used(c.out)

    def prepare(self) -> None:
        """The run's folder, with the boot's ``sitecustomize.py``."""
        boot = self.c.out / "boot"
        boot.mkdir(parents=True, exist_ok=True)
        (boot / "sitecustomize.py").write_text(SITECUSTOMIZE.format(env=EXEC_JOB_ENV))

    def run(self, on_run: Any = None) -> None:
        """The untimed first run, then every run not in ``exec.json``, ``on_run`` after each."""
        self.prepare()
        self._load()
        todo = [s for s in self.slots if s.key not in self.facts]
        try:
            self.first(bool(todo))
            for n, slot in enumerate(todo):
                self._progress(n, len(todo), slot)
                facts = self.one(slot, census=False, limit=self.limit())
                if facts["status"] in ("hung", "timeout"):
                    self._set_hung_aside(slot, facts)
                    facts = self.one(slot, census=False, limit=self.limit())
                with held_interrupt():  # a run's facts and its records are written together
                    self.facts[slot.key] = facts
                    self._save()
                    self._check_first(slot, facts)
                    if on_run is not None:
                        on_run(slot, facts)  # it adds the run's digest to its facts
                        self._save()
        finally:
            self.leave_folder()

    def roots(self) -> list[Path]:
        """The folders watched for the files a run writes."""
        return [self.c.cwd, *named_folders(self.c.command, self.c.cwd)]

    def leave_folder(self) -> list[str]:
        """The latest run's created files put back (``execio.put_back``); those that could not."""
        f = self.last
        if f is None:
            return []
        kept = self.c.out / "runs" / f["key"] / "files"
        return put_back(list(f.get("created") or []), kept, self.roots())

    def first(self, timed_to_come: bool) -> None:
        """One untimed run of the baseline before the timed ones: the census (the ops that can
        race) while it is owed, else a warm-up. Either fills the caches that a first run after
        a pause pays for, which would fall on one mode alone (docs/measured.md)."""
        c = self.c
        base = RunSlot(-1, c.modes[0], 0, 0)
        if c.census and self.census is None:
            self.stream.write(
                "exec: first one untimed run of the baseline: it counts the ops that can race, "
                "and warms the caches for the timed runs\n"
            )
            self.census = self.one(base, census=True, folder="census")
            if self.census["status"] == "hung":  # stuck (it has no time limit): once more
                self._set_hung_aside(base, self.census)
                self.census = self.one(base, census=True, folder="census")
            self._save()
            if self.census["status"] == "ok":
                return
            self.stream.write(
                f"exec: that run failed under the counting ({census_failure(self.census)}); "
                "one untimed run without it\n"
            )
        elif not timed_to_come:
            return
        else:
            self.stream.write("exec: first one untimed run of the baseline, a warm-up\n")
        self.warmup = self.one(base, census=False, folder="warm-up")
        if self.warmup["status"] == "hung":
            self._set_hung_aside(base, self.warmup)
            self.warmup = self.one(base, census=False, folder="warm-up")
        self._save()
        self._check_first(base, self.warmup)

    def limit(self) -> tuple[float, str] | None:
        """(seconds, status) a timed run may take (``HANG_FACTOR``); None before any run ended."""
        if self.c.timeout is not None:
            return self.c.timeout, "timeout"
        runs = [*self.facts.values(), self.census, self.warmup]
        walls = [float(f["wall"]) for f in runs if f and f.get("status") == "ok" and f.get("wall")]
        if not walls:
            return None
        return max(HANG_FLOOR, HANG_FACTOR * max(walls)), "hung"

    def _set_hung_aside(self, slot: RunSlot, facts: dict[str, Any]) -> None:
        """A run killed past its limit or stuck: kept as ``KEY-hung``, said, noted in ``hung``."""
        runs = self.c.out / "runs"
        aside = runs / f"{facts['key']}-hung"
        if aside.exists():
            shutil.rmtree(aside)
        (runs / facts["key"]).rename(aside)
        self.stream.write(
            f"exec: {run_name(slot.round, slot.mode.name, slot.copy, facts['key'])} "
            f"{_past(facts)} and was killed; it runs once more (its output: {aside})\n"
        )
        self.hung.append(
            {
                "key": facts["key"],
                "mode": slot.mode.name,
                "round": slot.round,
                "copy": slot.copy,
                "status": facts["status"],
                "limit": facts["limit"],
                "stuck": facts.get("stuck"),
                "wall": facts["wall"],
                "folder": str(aside),
                "stderr_tail": facts["stderr_tail"],
            }
        )
        self._save()

    def _progress(self, n: int, total: int, slot: RunSlot) -> None:
        done = [f["wall"] for f in self.facts.values() if f.get("wall")]
        if not done:  # the untimed first run's, until a timed one is done
            done = [f["wall"] for f in (self.warmup, self.census) if f and f.get("wall")][:1]
        left = f" left ~{clock(sum(done) / len(done) * (total - n))}" if done else ""
        copy = " (A/A copy)" if slot.copy else ""
        self.stream.write(
            f"exec [{n + 1:>2}/{total}] round {slot.round + 1}/{self.c.replicates} "
            f"{slot.mode.name}{copy}  elapsed {clock(time.monotonic() - self.started)}{left}\n"
        )
        self.stream.flush()

    def _job(self, slot: RunSlot, folder: Path, census: bool, record: bool = False) -> Path:
        job = {"folder": str(folder), "mode": asdict(slot.mode), "census": census}
        path = folder / "job.json"
        path.write_text(json.dumps({**job, "record": record, "script": self.script}))
        return path

    def environment(self, mode: Mode, job: Path) -> dict[str, str]:
        """The command's environment: the user's, the mode's, the boot first on ``PYTHONPATH``."""
        env = mode.environment({k: v for k, v in os.environ.items() if k != EXEC_ROOT_ENV})
        path = [str(self.c.out.resolve() / "boot"), str(PACKAGE_ROOT), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        env[EXEC_JOB_ENV] = str(job)
        return env

    def one(
        self,
        slot: RunSlot,
        census: bool,
        folder: str | None = None,
        record: bool = False,
        limit: tuple[float, str] | None = None,
    ) -> dict[str, Any]:
        """One run of the command: started, waited for, its output and files gathered
        (``record``: under ``locate``'s recorder; ``limit``: None gives ``--timeout``'s)."""
        c = self.c
        if limit is None and c.timeout is not None:
            limit = c.timeout, "timeout"
        d = c.out / "runs" / (folder or slot.key)
        if d.exists():  # a run cut short before it was noted: its leftovers go
            shutil.rmtree(d)
        d.mkdir(parents=True)
        job = self._job(slot, d, census, record)
        snap = Snapshot(self.roots(), skip=[c.out])
        load = Probe("cpu", os.getpid())  # the command is this process's: its own, not foreign
        load.start()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t_unix, t0 = time.time(), time.monotonic()
        proc = subprocess.Popen(
            c.command,
            cwd=c.cwd,
            env=self.environment(slot.mode, job),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        # Both read as they come, each by a thread: a command that fills one pipe would block.
        out, err = Stream("stdout"), Stream("stderr")
        readers = [out.read(proc.stdout, d / "stdout.txt"), err.read(proc.stderr, d / "stderr.txt")]
        status, code, stuck = wait(proc, limit, d)
        wall = time.monotonic() - t0
        host_load = own_children(load.stop(), ru0)
        kill_tree(proc.pid)  # a command that leaves a child holding its pipes
        for r in readers:
            r.join(timeout=10)
        if status == "ok" and code != 0:
            status = "error" if code is not None and code > 0 else "crashed"
        boots = _boots(d)
        # The command's own interpreter's boot, and its start-up: until the script's first line.
        main = next((b for b in boots if b.get("main")), None)
        ready = (main or {}).get("ready")
        startup = max(0.0, float(ready) - t_unix) if ready else None
        rate, steps = steps_per_second([out, err])
        kept = snap.changed()
        left_out = snap.keep(kept, d / "files")
        created = [
            n for n in snap.created(kept) if not any(x.startswith(n + " (") for x in left_out)
        ]
        self.last = facts = {
            "key": folder or slot.key,
            "round": slot.round,
            "mode": slot.mode.name,
            "copy": slot.copy,
            "position": slot.position,
            "status": status,
            "limit": limit[0] if limit else None,
            "stuck": {"how": stuck[0], "pid": stuck[1]} if stuck else None,
            "exit_code": code,
            "start_unix": t_unix,
            "wall": wall,
            "startup": startup,
            "body": wall - startup if startup is not None else None,
            "steps_per_second": rate,
            "steps_seen": steps,
            "files": kept,
            "created": created,
            "files_left_out": left_out,
            "stderr_tail": err.tail(),
            "boot": main,
            "script": seen_in(boots),
            "children": len(boots) - (main is not None),
            "pid": proc.pid,
            "host_load": host_load,
        }
        return facts

    def _check_first(self, slot: RunSlot, facts: dict[str, Any]) -> None:
        """The first run of each mode that fails (the untimed first run too) stops exec."""
        if facts["status"] == "ok":
            return
        if any(f["mode"] == slot.mode.name and f["status"] == "ok" for f in self.facts.values()):
            return
        where = self.c.out / "runs" / facts["key"]
        if facts["status"] in ("timeout", "hung"):
            raise ExecError(
                f"the command {_past(facts)} in mode {slot.mode.name} and was killed "
                f"(its output: {where})"
            )
        tail = facts["stderr_tail"] or "it printed nothing on stderr"
        if "EOFError" in tail or "EOF when reading" in tail:
            raise ExecError(
                f"the command reads its standard input, which detbench exec leaves empty: it "
                f"failed with {tail!r} (give it its input as a file or an argument)"
            )
        raise ExecError(
            f"the command failed (exit {facts['exit_code']}) in mode {slot.mode.name}: {tail} "
            f"(its output: {where})"
        )

    def _save(self) -> None:
        doc = {
            "exec_version": 1,
            "config": self.c.to_json(),
            "name": name_of(self.c.command),
            "script": self.script,
            "runs": self.facts,
            "census": self.census,
            "warmup": self.warmup,
            "hung": self.hung,
        }
        write_json_atomic(self.c.out / EXEC_FILE, doc)

    def _load(self) -> None:
        path = self.c.out / EXEC_FILE
        if self.c.resume and path.exists():
            doc = json.loads(path.read_text())
            self.facts = dict(doc.get("runs") or {})
            self.census = doc.get("census")
            self.warmup = doc.get("warmup")
            self.hung = list(doc.get("hung") or [])


@contextlib.contextmanager
def held_interrupt() -> Iterator[None]:
    """Ctrl-C held until the block ends, then raised: a run in ``exec.json`` has its records."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heard: list[int] = []
    before = signal.signal(signal.SIGINT, lambda sig, frame: heard.append(sig))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if heard:
        raise KeyboardInterrupt


def own_children(h: dict[str, Any], before: Any) -> dict[str, Any]:
    """``h`` (a ``Probe``'s reading) with the command's own CPU time (``RUSAGE_CHILDREN`` since
    ``before``) counted as the run's: reaped before the Probe stops, it would read as foreign."""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    other, seconds, cpus = h.get("other_cpu"), h.get("seconds"), h.get("cpus")
    if other is None or not seconds or not cpus:
        return h
    own = min(float(other), float(h.get("other_cpu_own") or 0.0) + child / (seconds * cpus))
    return {**h, "other_cpu_own": own, "other_cpu_foreign": max(0.0, float(other) - own)}


def run_name(round_: int, mode: str, copy: int, key: str) -> str:
    """``round 2 default (A/A copy)``, or ``the untimed first run (census)``."""
    if round_ < 0:
        return f"the untimed first run ({key})"
    return f"round {round_ + 1} {mode}" + (" (A/A copy)" if copy else "")


def _past(facts: dict[str, Any]) -> str:
    """``ran past --timeout 8 s``, ``ran past 64 s (5x ...: hung)``, or ``stuck_words``'s."""
    if facts["status"] == "timeout":
        return f"ran past --timeout {facts['limit']:g} s"
    if facts.get("stuck"):
        return stuck_words(facts["stuck"])
    words = f"{HANG_FACTOR:g}x the longest run so far, {HANG_FLOOR:g} s at least: hung"
    return f"ran past {facts['limit']:.0f} s ({words})"


def census_failure(f: dict[str, Any]) -> str:
    """Why the census run failed, in a few words."""
    if f["status"] in ("timeout", "hung"):
        return _past(f)
    return f"exit {f['exit_code']}: {f['stderr_tail'] or 'nothing on stderr'}"


def seen_in(boots: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run's interpreters saw the script do (``locate.watched``), each line once."""
    out: dict[str, Any] = {"changes": [], "seeds": [], "dataloaders": [], "device": "cpu"}
    seen: set[tuple[str, Any, Any, Any]] = set()
    for b in boots:
        if b.get("device") == "cuda":
            out["device"] = "cuda"
        for key in ("changes", "seeds", "dataloaders"):
            for e in b.get(key) or []:
                mark = (key, e.get("setting") or e.get("call"), e.get("file"), e.get("line"))
                if mark not in seen:
                    seen.add(mark)
                    out[key].append(e)
    return out


def _boots(d: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(d.glob("boot-*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(p.read_text()))
    return out
