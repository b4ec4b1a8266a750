"""The run's state in one line, for the first screen and the console: complete or partial, whether
the GPU throttled, and whether the host or the GPU was shared. "Planned" is the plan rebuilt from
env.json's options with the scheduler's own ``make_plan``, not what the records happen to hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from detbench.analysis import busy, earlier_design, quality
from detbench.analysis.labels import mode_of
from detbench.analysis.suite_answer import names
from detbench.run.calls import calls_of, total
from detbench.run.schedule import clock, make_plan


@dataclass(frozen=True)
class RunState:
    """What ``run_state`` reads of a run."""

    records: int  # records of the run (every status)
    planned: int | None  # records the plan asked for; None where env.json cannot say
    short: dict[str, tuple[int, int, list[str]]]  # suite -> (measured, planned, modes short)
    finished: bool  # env.json has finished_utc
    throttle: list[str]  # quality.throttle_lines
    load: busy.HostLoad | None
    #: The run's calls (``run.calls.calls_of``).
    calls: tuple[dict[str, Any], ...] = ()
    #: The first call and one per ``--resume``, including those killed before leaving an entry.
    calls_made: int = 1
    set_aside: int = 0  # records load_results set aside: they fail the record's check
    #: Per replicate, the workload groups the paired phase timed so far and those planned.
    paired: dict[int, tuple[int, int]] | None = None
    #: The records by status.
    statuses: tuple[tuple[str, int], ...] = ()

    @property
    def succeeded(self) -> int | None:
        """Records with status ``ok``; None where the statuses were not given."""
        return dict(self.statuses).get("ok", 0) if self.statuses else None

    @property
    def short_of_verdicts(self) -> bool:
        return bool(self.short) or (self.planned is not None and self.records < self.planned)

    @property
    def costs_short(self) -> bool:
        """Whether a paired timing phase has groups left to time."""
        return self.paired is not None and any(t < n for t, n in self.paired.values())

    @property
    def partial(self) -> bool:
        return self.short_of_verdicts or self.costs_short

    def costs(self) -> str:
        """What a run with a paired timing phase has of its costs; empty where it has them all."""
        if not self.costs_short or self.paired is None:
            return ""
        timed = sum(t for t, _ in self.paired.values())
        groups = sum(n for _, n in self.paired.values())
        if self.short_of_verdicts:
            if not timed:
                return "No cost was measured: the run stopped in its verdict phase."
            head = "Costs measured so far"
        elif not timed:
            return (
                "Every verdict is here, but no cost was measured: the run stopped after its "
                "verdict phase, before its paired timing."
            )
        else:
            head = "Every verdict is here; costs measured so far"
        each = [
            f"all {n} workloads of replicate {r + 1}"
            if t == n
            else f"{t} of {n} workloads of replicate {r + 1}"
            if t
            else f"none of replicate {r + 1}"
            for r, (t, n) in sorted(self.paired.items())
        ]
        return f"{head}: {timed} of {groups} (workload, replicate) groups ({', '.join(each)})."

    def completeness(self) -> str:
        if self.planned is None:
            state = "finished" if self.finished else "did not finish"
            return f"{self.records} records; the run {state} (its plan is not recorded)"
        if not self.partial and self.succeeded == 0:
            each = ", ".join(f"{n} {status}" for status, n in self.statuses)
            return (
                f"No successful record: all {self.planned} planned records ran, and none is ok "
                f"({each})"
            )
        if not self.partial:
            return f"Complete: all {self.planned} planned records"
        if not self.short_of_verdicts:
            return f"Partial run: all {self.planned} planned records, not all their costs"
        pct = 100 * self.records / self.planned if self.planned else 0.0
        suites = [f"{suite} {done}/{plan}" for suite, (done, plan, _) in self.short.items()]
        modes = list(dict.fromkeys(m for _, _, ms in self.short.values() for m in ms))
        return (
            f"Partial run: {self.records} of {self.planned} planned records ({pct:.0f}%). "
            f"Short of the plan: {', '.join(suites)}, in {len(modes)} modes ({names(modes)})"
        )

    def conditions(self) -> str:
        parts = []
        if self.throttle:
            parts.append("the GPU throttled (" + "; ".join(self.throttle) + ")")
        if self.load is not None and self.load.is_busy:
            parts.append("the host was busy while it timed (see its warning)")
        elif self.load is not None and self.load.gpu_others:
            parts.append("the host was quiet, but " + _gpu_shared(self.load))
        if self.load is not None and not self.load.is_busy and self.load.unrecorded:
            parts.append(
                "the host's load while it timed its costs was not recorded, so whether other "
                "work ran beside them is not known"
            )
        return "; ".join(parts)

    def aside(self) -> str:
        if not self.set_aside:
            return ""
        n = self.set_aside
        were, it, is_ = (
            ("record was", "it", "it is") if n == 1 else ("records were", "them", "they are")
        )
        return (
            f" {n} {were} set aside because {is_} not valid (loading the run names each one), "
            f"and nothing here counts {it}."
        )

    def timing(self) -> str:
        """The run's wall time over its calls against the plan's estimate, as a sentence."""
        calls = self.calls
        wall, planned, made = total(calls)
        n = len(calls)
        if not calls or calls[-1].get("wall") is None:
            return ""
        if wall is None:  # an older detbench kept its last call's time only
            earlier = "the call" if n == 2 else f"the {n - 1} calls"
            return (
                f"Its last call took {clock(calls[-1]['wall'])} for {calls[-1]['records']} "
                f"records; the time of {earlier} before it was not recorded."
            )
        lost = max(0, self.calls_made - n)
        took = f"It took {clock(wall)}" + (f" in {n} calls" if n > 1 else "")
        if lost:
            took = f"Its {n} recorded call{'s' if n > 1 else ''} took {clock(wall)}"
        tail = (
            f" {lost} call{'s' if lost > 1 else ''} killed before {'their' if lost > 1 else 'its'} "
            f"end left no time and {'are' if lost > 1 else 'is'} not counted."
            if lost
            else ""
        )
        if not planned:  # a run of a detbench before the plan had an estimate
            return ""
        which = ""
        if n > 1 or self.partial or lost:
            which = f" for the {made} records {'they' if n > 1 else 'it'} made"
        off = wall / planned - 1
        return (
            f"{took} against {clock(planned)} planned{which} "
            f"({'+' if off >= 0 else '-'}{100 * abs(off):.0f}%)." + tail
        )

    def line(self) -> str:
        """One line: completeness, conditions, costs, time against the plan, records set aside."""
        cond, took, costs = self.conditions(), self.timing(), self.costs()
        return (
            self.completeness()
            + (f". Conditions: {cond}." if cond else ".")
            + (f" {costs}" if costs else "")
            + (f" {took}" if took else "")
            + self.aside()
        )


def _gpu_shared(load: busy.HostLoad) -> str:
    parts = []
    if load.gpu_foreign:
        parts.append(f"{load.gpu_foreign} shared the GPU with another program")
    if load.gpu_unknown:
        parts.append(
            f"{load.gpu_unknown} had another process on the GPU that the records do not attribute"
        )
    return f"of {load.timed} timings, " + ", ".join(parts)


def planned_counts(options: Mapping[str, Any]) -> dict[tuple[str, str], int] | None:
    """("suite/name", mode) -> replicates planned; None where the options cannot say."""
    keys, labels, reps = options.get("workloads"), options.get("modes"), options.get("replicates")
    if not keys or not labels or not reps:
        return None
    modes = [m for x in labels if (m := mode_of(str(x))) is not None]
    if len(modes) != len(labels):
        return None
    shard = options.get("shard")
    plan = make_plan(
        list(keys),
        modes,
        int(reps),
        int(options.get("seed") or 0),
        only_for=options.get("only_for"),
        shard=(int(shard[0]), int(shard[1])) if shard else None,
        by_group=earlier_design.planned_by_group(options),
    )
    out: dict[tuple[str, str], int] = {}
    for slot in plan.slots:
        for k in slot.keys:
            out[(k, slot.mode.name)] = out.get((k, slot.mode.name), 0) + 1
    return out


def paired_groups(
    df: pd.DataFrame, lines: Iterable[Mapping[str, Any]] | None
) -> dict[int, tuple[int, int]] | None:
    """Per replicate, (the workloads with a ``paired.jsonl`` line, those whose records defer
    their timing to the paired phase). None where no record does."""
    if "timing_design" not in df.columns:
        return None
    p = df[df["timing_design"] == "paired"]
    if p.empty:
        return None
    todo = set(
        zip(
            p["suite"].astype(str),
            p["workload"].astype(str),
            p["replicate"].astype(int),
            strict=True,
        )
    )
    done = {
        (str(x.get("suite")), str(x.get("workload")), int(x.get("replicate") or 0))
        for x in lines or ()
    } & todo
    reps = sorted({r for _, _, r in todo})
    return {r: (sum(1 for g in done if g[2] == r), sum(1 for g in todo if g[2] == r)) for r in reps}


def run_state(df: pd.DataFrame, env: Mapping[str, Any]) -> RunState:
    """The ``RunState`` of records ``df`` and env.json ``env`` (with any ``paired_lines``)."""
    planned = planned_counts(env.get("options") or {})
    short: dict[str, tuple[int, int, list[str]]] = {}
    if planned is not None and len(df):
        keys = df["suite"].astype(str) + "/" + df["workload"].astype(str)
        have = pd.Series(1, index=pd.MultiIndex.from_arrays([keys, df["mode"].astype(str)]))
        done = have.groupby(level=[0, 1]).sum().to_dict()
        per_suite: dict[str, list[Any]] = {}
        for (k, m), n in planned.items():
            suite = k.split("/", 1)[0]
            got = min(int(done.get((k, m), 0)), n)
            entry = per_suite.setdefault(suite, [0, 0, []])
            entry[0] += got
            entry[1] += n
            if got < n and m not in entry[2]:
                entry[2].append(m)
        short = {s: (e[0], e[1], e[2]) for s, e in per_suite.items() if e[0] < e[1]}
    return RunState(
        records=len(df),
        planned=None if planned is None else sum(planned.values()),
        short=short,
        finished=bool(env.get("finished_utc")),
        throttle=quality.throttle_lines(env),
        load=busy.host_load(df, env.get("paired_lines")),
        calls=tuple(calls_of(env)),
        calls_made=1 + len(env.get("resumed_utc") or ()),
        paired=paired_groups(df, env.get("paired_lines")),
        set_aside=len(df.attrs.get("set_aside") or ()),
        statuses=tuple((str(k), int(n)) for k, n in df["status"].astype(str).value_counts().items())
        if "status" in df.columns
        else (),
    )
