"""The calls of a run (the first, and every ``--resume``): ``env.json``'s ``run_calls``.

A call stopped after a tenth of its plan would look 90% faster than its plan's estimate, so each
call keeps its wall time, the records it made, and the estimate of those records alone
(``made_seconds``, plus its share of the paired phase); the report sums both over the calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from detbench.run.estimate import Estimate
    from detbench.run.runner import Runner
    from detbench.run.schedule import Plan

#: A record a call made: (replicate, mode name, workload key "suite/name").
Made = tuple[int, str, str]


def made_seconds(
    estimate: Estimate | float | None, plan: Plan, made: Iterable[Made]
) -> float | None:
    """The estimate's seconds for exactly the records ``made`` of ``plan``: theirs, and their
    workers' beyond them, on the busiest device. A bare number estimates the whole plan only:
    None unless every record was made."""
    made = set(made)
    if estimate is None:
        return None
    if isinstance(estimate, int | float):
        everything = {(s.replicate, s.mode.name, k) for s in plan.slots for k in s.keys}
        return float(estimate) if made >= everything else None
    lanes = [0.0] * max(1, plan.lanes)
    for s in plan.slots:
        extra, records = estimate.slot_seconds.get((s.replicate, s.mode.name), (0.0, {}))
        mine = [k for k in s.keys if (s.replicate, s.mode.name, k) in made]
        if mine:
            lanes[s.lane] += extra + sum(records.get(k, 0.0) for k in mine)
    return max(lanes)


def with_call(runner: Runner, estimate: Estimate | float | None) -> list[dict[str, Any]]:
    """``run_calls`` once this call of ``runner`` ends: the earlier calls, then this one."""
    made = {
        (int(r["replicate"]), str(r["mode"]), f"{r['suite']}/{r['workload']}")
        for r in runner.records
    }
    stats = runner.stats
    planned = made_seconds(estimate, runner.plan, made)
    timed = int((stats.paired or {}).get("groups") or 0)  # its share of the paired phase
    paired = getattr(estimate, "paired", None) or {}
    if planned is not None and paired.get("groups"):
        phase = float(getattr(estimate, "paired_seconds", 0.0))
        if paired.get("fused"):  # its members' torchrun launches are the phase's too
            phase += getattr(estimate, "launches", 0) * getattr(estimate, "launch_seconds", 0.0)
        planned += phase * timed / paired["groups"]
    if planned is not None:  # the probe worker this call ran before its plan's workers
        planned += float(getattr(estimate, "probe_seconds", 0.0))
    # ``planned``: the estimate of its records; ``planned_call``: of its whole plan.
    this: dict[str, Any] = {
        "started_utc": runner.started_utc,
        "wall": round(stats.wall, 3),
        "records": stats.records,
        "planned": None if planned is None else round(planned, 3),
        "planned_call": None if stats.planned is None else round(stats.planned, 3),
    }
    if stats.paired is not None:
        this["groups"] = timed
    host = getattr(estimate, "host", None)
    if host is not None:  # the factor this call's plan was estimated with (``run.hostspeed``)
        this["host_speed"] = host
    return [*calls_of(runner.previous_env), this]


def calls_of(env: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's calls in order. An older env.json without ``run_calls`` gives its one
    ``run_stats`` as the last call, after one call of unknown time per ``resumed_utc``, and its
    estimate only where that call made its whole plan."""
    calls = env.get("run_calls")
    if isinstance(calls, list):
        return [dict(c) for c in calls]
    stats = env.get("run_stats") or {}
    if stats.get("wall") is None:
        return []
    resumed = list(env.get("resumed_utc") or [])
    whole = not resumed and bool(env.get("finished_utc"))
    last = {
        "started_utc": resumed[-1] if resumed else env.get("started_utc"),
        "wall": stats.get("wall"),
        "records": stats.get("records"),
        "planned": stats.get("planned") if whole else None,
        "planned_call": stats.get("planned"),
    }
    earlier = [
        {"started_utc": t, "wall": None, "records": None, "planned": None, "planned_call": None}
        for t in [env.get("started_utc"), *resumed[:-1]][: len(resumed)]
    ]
    return [*earlier, last]


def total(calls: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None, int | None]:
    """The calls' wall seconds, estimate and records, each summed (None where one lacks it)."""

    def summed(key: str) -> Any:
        values = [c.get(key) for c in calls]
        return None if not values or any(v is None for v in values) else sum(values)

    return summed("wall"), summed("planned"), summed("records")
