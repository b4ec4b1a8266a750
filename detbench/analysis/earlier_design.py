"""detbench's earlier timing design, read here and nowhere else: each record timed in its own
worker, minutes apart from the baseline (env.json ``timing`` "separate", "both" or none). No new
run is timed so, but the published runs are still read: their costs, plan and report's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench.analysis import paired_costs, stats
from detbench.analysis.pairs import is_paired
from detbench.store.schema import Status

#: The ``design`` of a cost of records timed each in its own worker.
DESIGN = "separate"


def row(
    suite: Any, workload: Any, mode: Any, r: stats.Ratio, noisy: bool, replicates: int
) -> dict[str, Any]:
    """One row of ``cost_intervals.costs`` for records timed in their own workers."""
    return {
        **paired_costs.ratio_fields(suite, workload, mode, r, noisy),
        "replicates": replicates,
        "rounds": None,
        "design": DESIGN,
        "limited_by": None,
        "rests_on": None,
    }


def replicate_ratios(m: pd.DataFrame, b: pd.DataFrame) -> tuple[dict[int, float], float]:
    """(replicate -> mode's items/s over baseline's, ratio of medians) of ok records with ips."""
    mi = m.groupby("replicate")["ips"].median()
    bi = b.groupby("replicate")["ips"].median()
    within = (mi / bi.reindex(mi.index)).dropna()
    per = dict(zip(map(int, within.index.tolist()), map(float, within), strict=True))
    return per, float(mi.median() / bi.median())


def planned_by_group(options: Mapping[str, Any]) -> bool:
    """Whether the run with env.json ``options`` planned in paired groups ("paired", "both")."""
    return options.get("timing") in ("paired", "both")


def words(costs: pd.DataFrame | None) -> str | None:
    """The Method's sentence on the costs this design timed; None where none was."""
    if costs is None or costs.empty or "design" not in costs.columns:
        return None
    k, n = int((costs["design"] == DESIGN).sum()), len(costs)
    if not k:
        return None
    which = "" if k == n else f"{k} of the {n} "
    return (
        f"Costs: {which}timed by detbench's earlier design, each mode in its own worker: a "
        "mode's throughput is the median over replicates of each replicate's median step time, "
        "a cost is the ratio of two such medians taken in different processes, minutes apart, "
        "and its 95% interval the 2.5th-97.5th percentile of that ratio over "
        f"{stats.N_BOOT} two-level bootstrap resamples (replicates, then the timing samples "
        "within each), drawn independently for the mode and the baseline, with a fixed seed."
    )


def timing_words(df: pd.DataFrame) -> str | None:
    """The Timing section's paragraph on the records timed with this design's stopping rule."""
    if "timing" not in df.columns:
        return None
    ok = df[df["status"] == Status.OK]
    timed = [
        t
        for t in ok["timing"]
        if isinstance(t, Mapping) and "reached_target" in t and not is_paired(t)
    ]
    if not timed:
        return None
    reached = sum(1 for t in timed if t["reached_target"] is True)
    targets = sorted({float(t["target_rel"]) for t in timed if t.get("target_rel") is not None})
    target = " / ".join(f"±{100 * x:g}%" for x in targets) or "its target"
    return (
        "Each record took its timing samples until the 95% interval of its median step time "
        f"was within {target} of the median or its timing budget ran out: {reached} of "
        f"{len(timed)} timed records reached the target (each record's samples and interval are "
        "in its timing, in results.jsonl)."
    )
