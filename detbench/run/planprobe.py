"""What a plan measures on this host before it is estimated: one worker's start-up, and one
record of each of a user's own workloads, which no suite figure estimates and which can take
anything from a millisecond to seconds a step (the model's guess can be several times short).

The probe worker is the same worker a run starts (its first mode, replicate 1, a temporary
directory). A workload is probed where the plan holds ``PROBE_MIN_RECORDS`` of its records or
more; one whose probe record is not ``ok`` keeps the model's seconds. A step that raised is a bug
every worker would meet: where every probed workload raised, the run stops before it starts,
naming the file and line; where only some did, the plan's probe line names each (a workload file
may hold one that fails on purpose, as the tests' do).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.core.workload import suites_dir
from detbench.run.config import RunError
from detbench.run.schedule import Slot
from detbench.run.slot_seconds import Probed, per_record_seconds, record_seconds
from detbench.run.supervise import TIMEOUT, WorkerProcess, log_tail
from detbench.store.record import user_frame
from detbench.store.results import iter_records
from detbench.store.schema import Status

if TYPE_CHECKING:
    from detbench.run.runner import Runner

#: The fewest records of a workload in the plan for the probe to measure it: with fewer, the probe
#: would be a large share of the run it plans (2 modes x 2 replicates: not; 3 x 3: probed).
PROBE_MIN_RECORDS = 6
#: Seconds a probe's record may run (each), before the probe gives up and the model's seconds stand.
PROBE_RECORD_LIMIT = 120.0
#: Characters of an error message in the line of a failed probe.
MESSAGE_WIDTH = 200


def raised(rec: dict[str, Any]) -> str:
    """A record whose step raised: its error's first line and where in the user's code."""
    message = str(rec.get("message") or "(no message)").strip().splitlines()[0]
    if len(message) > MESSAGE_WIDTH:
        message = message[: MESSAGE_WIDTH - 3] + "..."
    where = user_frame(rec.get("traceback"))
    return message + (
        f", raised at {where}" if where else " (no frame of your code in its traceback)"
    )


def failed_line(rec: dict[str, Any], mode: str, others: int = 0) -> str:
    """The one line of a run whose every probed workload raised: the first one, and ``raised``."""
    also = f" (and {others} other workload{'s' if others > 1 else ''} of yours)" if others else ""
    return (
        f"your workload {rec['suite']}/{rec['workload']}{also} failed in the probe worker (mode "
        f"{mode}): {raised(rec)}; the run stopped before its first worker and wrote nothing: "
        "fix it and run again"
    )


@dataclass
class ProbeReport:
    """What the probe worker measured, what it could not (with why), and its wall time."""

    startup: float
    records: dict[str, Probed] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def own_seconds(runner: Runner) -> dict[str, Probed]:
    """A resumed run's workloads, each estimated from the mean of the run's own records of it
    (the FLOP count, made in the first replicate only, apart). Empty for a new run."""
    if not runner.config.resume:
        return {}
    per: dict[str, list[Probed]] = {}
    for r in iter_records(runner.config.out):
        if r.get("phases"):
            per.setdefault(f"{r['suite']}/{r['workload']}", []).append(Probed.of(r))
    out = {}
    for key, records in per.items():
        counts = [p.count for p in records if p.count]
        count = sum(counts) / len(counts) if counts else 0.0
        rest = sum(p.seconds - p.count for p in records) / len(records)
        step = sum(p.step for p in records) / len(records)
        out[key] = Probed(seconds=rest + count, count=count, step=step)
    return out


def to_probe(runner: Runner) -> list[str]:
    """The keys of the plan's workloads that the probe measures: a user's own, not distributed,
    with no figure and ``PROBE_MIN_RECORDS`` records planned or more."""
    c = runner.config
    per = per_record_seconds(c.device, c.profile, c.setting("budget"))
    builtin = suites_dir().resolve()
    planned = Counter(k for s in runner.plan.slots for k in s.keys)
    return [
        w.key
        for w in runner.workloads
        if planned[w.key] >= PROBE_MIN_RECORDS
        and not w.distributed
        and not (w.source and Path(w.source).resolve().is_relative_to(builtin))
        and not record_seconds(w.key, c.device, c.profile, per)[1]
    ]


def probe(runner: Runner, keys: list[str]) -> ProbeReport:
    """Start one worker of ``runner``'s run to measure ``keys`` (none: its start-up only); it
    writes nothing but into a temporary directory."""
    c = runner.config
    slot = Slot(0, 0, c.modes[0], tuple(keys))
    records: dict[str, dict[str, Any]] = {}
    limit = min(c.timeout or PROBE_RECORD_LIMIT, PROBE_RECORD_LIMIT)
    timed_out: str | None = None
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="detbench-probe-") as tmp:
            worker = runner.spawn(slot, list(keys), Path(tmp), reference=Path(tmp) / ".reference")
            try:
                worker.release()
                msg = worker.ready(c.startup_timeout)
                startup = time.perf_counter() - t0
                started = msg is not None and msg.get("type") == "ready"
                if msg is TIMEOUT:
                    timed_out = (
                        f"the worker did not start within {c.startup_timeout:g} s (imports, "
                        "mode, CUDA initialisation); killed"
                    )
                if started:
                    worker.send("go")
                    timed_out = _records(worker, keys, limit, records)
            finally:
                worker.kill()  # nothing more to ask; a worker stuck in a record goes too
                runner.crew.finish(worker)
            tail = log_tail(worker.log)
    finally:
        for d in runner.cache_dirs:  # the probe's worker got its own, as every worker does
            shutil.rmtree(d, ignore_errors=True)
        runner.cache_dirs.clear()
    if not started:
        raise RunError(timed_out or f"a worker did not start here; its log: {tail}")
    errors = [records[k] for k in keys if records.get(k, {}).get("status") == Status.ERROR]
    if errors and len(errors) == len(keys):  # nothing of the user's would be measured
        raise RunError(failed_line(errors[0], c.modes[0].name, len(errors) - 1))
    found = ProbeReport(startup=startup, seconds=time.perf_counter() - t0)
    for key in keys:
        rec = records.get(key)
        if rec is not None and rec.get("status") == Status.ERROR:
            found.failed[key] = f"its step raised: {raised(rec)}"
            continue
        if rec is None or rec.get("status") != "ok":
            found.failed[key] = (rec or {}).get("status") or timed_out or "no record"
            continue
        found.records[key] = Probed.of(rec)
    return found


def _records(
    worker: WorkerProcess, keys: list[str], limit: float, records: dict[str, dict[str, Any]]
) -> str | None:
    """Ask ``worker`` for the record of each of ``keys`` into ``records``, each within ``limit``
    seconds of silence; why it stopped short (None: every one answered)."""

    def keep(rec: dict[str, Any]) -> None:
        records[f"{rec['suite']}/{rec['workload']}"] = rec

    for key in keys:
        worker.send(f"record {key}")
        msg = worker.answer(limit, keep)
        if msg is None:
            return "the worker ended"
        if msg is TIMEOUT:
            return f"exceeded {limit:g} s; worker killed"
        if msg.get("lost"):  # its CUDA context is unusable: no more records from it
            return "the worker lost its CUDA context"
    return None
