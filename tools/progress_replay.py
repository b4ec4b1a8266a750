"""How true the progress line's "left" was: a run's records replayed through ``Progress``.

    python tools/progress_replay.py DIR [DIR ...] [--at 5,10,25,50,75]

For each call of the run in DIR (the first, and every ``--resume``), the tool rebuilds that
call's plan and estimate as the run made them (the plan line's estimate: no probe, the paper
start-up), feeds ``Progress`` each record's start and end as the records date them (a record's
timing window in ``host_load`` less its build, fingerprint and FLOP count; its end plus its
clean-up), with an injected clock, and prints, at 5%, 10%, 25%, 50% and 75% of the call's
records, the time left the line would print over the time that really remained, with the
line's figure computed by both models, today's (``Progress``) and the one before issue 34
(``--old``: the estimate's bare seconds, every record alike).

A call that was stopped (a partial run) has no real remainder for its whole plan. For it the
ratio is taken over the records the call did make: the line's forecast of exactly those records
(``Progress.remaining``) over the time they took from that point on. Such rows say "made".

The workload files of a run from another machine are found by name among the built-in suites.
No time is asserted anywhere: this prints figures (issue 34, item 4).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detbench.cli.execute import plan as plan_line
from detbench.core.modes import get_mode
from detbench.core.workload import suites_dir
from detbench.run.api import plan_run
from detbench.run.calls import calls_of
from detbench.run.config import RunConfig
from detbench.run.schedule import Progress, Slot, make_plan
from detbench.store.results import iter_records, load_env

SUITES = suites_dir()


class Clock:
    """The replay's clock: set to each event's time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def epoch(utc: str) -> float:
    return datetime.strptime(utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=None).timestamp() - (
        datetime(1970, 1, 1).timestamp()
    )


def span(rec: dict[str, Any]) -> tuple[float, float]:
    """When the record's workload started and when its record came back (epoch seconds)."""
    ph = rec.get("phases") or {}
    load = rec.get("host_load") or {}
    before = sum(float(ph.get(k) or 0.0) for k in ("build", "fingerprint", "count"))
    after = sum(float(ph.get(k) or 0.0) for k in ("invariance", "cleanup"))
    if load.get("end_unix") is not None:
        end = float(load["end_unix"]) + after
        return end - after - float(ph.get("timing") or 0.0) - before, end
    end = epoch(rec["utc"])
    return end - sum(float(v or 0.0) for v in ph.values()), end


def config_of(env: dict[str, Any], out: Path) -> RunConfig:
    """The run's configuration as a fresh run (``out``: where nothing will be written); its
    workload files found here, by name among the built-in suites where the run's path is not."""
    o = env["options"]
    sources = [Path(s) if Path(s).is_file() else SUITES / Path(s).name for s in o["sources"]]
    return RunConfig(
        out=out,
        workload_files=sources,
        modes=[get_mode(m) for m in o["modes"]],
        replicates=int(o["replicates"]),
        profile=str(o["profile"]),
        device=str(o["device"]),
        seed=int(o["seed"]),
        fingerprint_steps=o.get("fingerprint_steps"),
        warmup_steps=o.get("warmup_steps"),
        budget=o.get("budget", o.get("min_run_time")),
        only=list(o["workloads"]),
        settings=dict(o.get("settings") or {}),
        only_for=o.get("only_for"),
        devices=o.get("devices"),
    )


def split_calls(env: dict[str, Any], records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records of each call, in the order they were written: by the calls' record counts
    where env.json keeps them, else by the moments the run was resumed."""
    calls = calls_of(env)
    counts = [int(c["records"]) for c in calls if isinstance(c.get("records"), int)]
    out: list[list[dict[str, Any]]] = []
    if calls and len(counts) == len(calls) and sum(counts) == len(records):
        i = 0
        for n in counts:
            out.append(records[i : i + n])
            i += n
        return out
    starts = [epoch(t) for t in env.get("resumed_utc") or []]
    out = [[] for _ in range(len(starts) + 1)]
    for r in records:
        out[sum(1 for t in starts if span(r)[0] >= t)].append(r)
    return out


def replay(
    config: RunConfig,
    kept: list[dict[str, Any]],
    made: list[dict[str, Any]],
    began: float,
    ended: float | None,
    at: Sequence[float],
) -> list[tuple[float, int, str, float, float, float]]:
    """One call: (fraction, record, "all" or "made", new line's left, old line's left, real)."""
    runner = plan_run(config, io.StringIO(), cuda=False, dry_run=True)
    done = {(f"{r['suite']}/{r['workload']}", r["mode"], int(r["replicate"])) for r in kept}
    c = config
    runner.plan = make_plan(
        [w.key for w in runner.workloads], c.modes, c.replicates, c.seed, done, c.only_for
    )
    with contextlib.redirect_stderr(io.StringIO()):
        est = plan_line(runner, False, False)
    slots = {(s.replicate, s.mode.name): s for s in runner.plan.slots}
    clock = Clock()
    clock.now = began
    new = Progress.for_plan(runner.plan, est, io.StringIO())
    new.clock = old_clock = clock
    new.t0 = began
    old = Progress(runner.plan.records, est.seconds, io.StringIO(), clock=old_clock)
    old.t0 = began
    events: list[tuple[float, int, int]] = []
    for i, r in enumerate(made):
        start, end = span(r)
        events += [(start, 0, i), (end, 1, i)]
    events.sort()
    spans = [span(r) for r in made]
    last = ended if ended is not None else max(e for _, e in spans)
    complete = len(made) == runner.plan.records
    marks = {max(1, math.ceil(f * runner.plan.records)): f for f in at}
    rows = []
    shown = 0
    made_items = {((int(r["replicate"]), r["mode"]), f"{r['suite']}/{r['workload']}") for r in made}
    slots_made = {s for s, _ in made_items}
    for t, kind, i in events:
        clock.now = t
        r = made[i]
        key = f"{r['suite']}/{r['workload']}"
        slot: Slot = slots.get((int(r["replicate"]), r["mode"])) or Slot(
            int(r["replicate"]), 0, get_mode(r["mode"]), (key,)
        )
        if kind == 1:
            new.advance(key)
            old.advance(key)
            continue
        shown += 1
        elapsed = t - began
        new.show(slot, c.replicates, len(c.modes), key)
        old.show(slot, c.replicates, len(c.modes), key)
        if shown in marks:
            real_all = last - t
            if complete:
                row = (new.left(elapsed) or 0.0, old.left(elapsed) or 0.0, real_all)
                rows.append((marks[shown], shown, "all", *row))
            else:
                todo = new.remaining(elapsed) or {}
                mine = sum(
                    v for (s, k), v in todo.items() if (s, k) in made_items or s in slots_made
                )
                later = [e for (b, e) in spans if b >= t - 1e-9]
                real = max(later) - t if later else 0.0
                share = (
                    (old.left(elapsed) or 0.0) * len(later) / max(1, runner.plan.records - old.done)
                )
                rows.append((marks[shown], shown, "made", mine, share, real))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", type=Path, nargs="+", help="results directories")
    p.add_argument("--at", default="5,10,25,50,75", help="percent of each call's records")
    args = p.parse_args(argv)
    at = [float(x) / 100 for x in args.at.split(",")]
    for d in args.dirs:
        env = load_env(d)
        records: list[dict[str, Any]] = [dict(r) for r in iter_records(d)]
        calls = split_calls(env, records)
        starts = [env["started_utc"], *(env.get("resumed_utc") or [])]
        print(f"{d}: {len(records)} records in {len(calls)} call(s)")
        print("  call  at    record  over  left (new)  left (old)  real    new/real  old/real")
        kept: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory() as tmp:
            config = config_of(env, Path(tmp) / "never-written")
            for n, made in enumerate(calls):
                last = n == len(calls) - 1
                ended = epoch(env["finished_utc"]) if last and env.get("finished_utc") else None
                for f, i, over, new, old, real in replay(
                    config, kept, made, epoch(starts[n]), ended, at
                ):
                    print(
                        f"  {n + 1:>4}  {100 * f:4.1f}%  {i:>6}  {over:<4}  {new:9.0f}s  "
                        f"{old:9.0f}s  {real:5.0f}s  {new / max(real, 1e-9):8.2f}  "
                        f"{old / max(real, 1e-9):8.2f}"
                    )
                kept += made
    return 0


if __name__ == "__main__":
    sys.exit(main())
