"""The costs' own honesty: the A/A line, how the costs were timed, what limits their intervals,
and which rest on one replicate (``MARK`` in the tables)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import aa, paired_costs, quality
from detbench.analysis.cost_intervals import on_one_replicate
from detbench.analysis.pairs import is_paired
from detbench.analysis.stats import TOO_WIDE
from detbench.report.render import Block, Para

#: What each level that limits an interval means, in the report's words.
LIMIT_WORDS = {
    "processes": "the spread between replicates (fresh processes)",
    "rounds": "the spread between rounds within a process",
    "time": "a drift over the rounds within a process",
}


def _pct(x: float) -> str:
    return f"±{100 * x:.1f}%"


def aa_sentence(lines: pd.DataFrame | None, baseline: str) -> str:
    """The A/A line: how many workloads showed a cost between two workers of the baseline."""
    p = aa.paired(lines, baseline) if lines is not None and len(lines) else None
    if p is None or not len(p):
        return (
            "A/A check: this run timed no second worker of the baseline's settings, so its "
            "false costs were not measured."
        )
    s = aa.summary(p)
    return (
        f"A/A check: {s['false_workloads']} of {s['workloads']} workloads showed a cost "
        f"between two workers of the same settings ({baseline}, timed side by side; median "
        f"interval {_pct(s['median_half_width'])})" + _too_wide(s) + "."
    )


def _too_wide(s: Mapping[str, Any]) -> str:
    """The clause ``s`` (``aa.summary``) needs where its intervals could not show a cost."""
    k, n = int(s.get("says_nothing") or 0), int(s["comparisons"])
    if not k:
        return ""
    if n == 1:
        which, they = "the one interval", "it"
    elif k == n:
        which, they = ("both intervals" if n == 2 else f"all {n} intervals"), "they"
    else:
        which, they = f"{k} of the {n} intervals", "it" if k == 1 else "those"
    return (
        f"; but {which} held both {1 / TOO_WIDE:g}x and {TOO_WIDE:g}x, so at that width "
        f"{they} could not have shown a cost: the check says nothing there about false costs"
    )


def aa_blocks(lines: pd.DataFrame | None, baseline: str, costs: pd.DataFrame) -> list[Block]:
    """The A/A line, what limits the intervals and which rest on one replicate."""
    mine = costs[costs["mode"] != baseline] if len(costs) else costs
    said = [aa_sentence(lines, baseline), limits_sentence(mine), rests_sentence(mine, True)]
    return [Para(" ".join(x for x in said if x))]


#: The mark of a cost whose 95% interval rests on one replicate, in every table that states it.
MARK = "†"


def assumed_words() -> str:
    """What a one-replicate interval assumes, in the report's words (``paired_costs``' floor)."""
    k = paired_costs.PROCESS_FLOOR
    spread = "one round's robust spread" if k == 1 else f"{k:g} rounds' robust spreads"
    return f"the spread between replicates at {spread} (k = {k:g}) instead of measuring it"


def one_replicate(costs: pd.DataFrame) -> pd.Series:
    """The rows of ``costs`` marked ``MARK``: a finite interval that rests on one replicate."""
    if costs.empty:
        return on_one_replicate(costs)
    finite = [np.isfinite(pd.to_numeric(costs[k], errors="coerce")) for k in ("ci_low", "ci_high")]
    return on_one_replicate(costs) & finite[0] & finite[1]


def rests_sentence(costs: pd.DataFrame, marked: bool = False) -> str:
    """How many of ``costs`` rest on one replicate, and what their intervals assume; or ""."""
    one = costs[one_replicate(costs)] if len(costs) else costs
    k, n = len(one), len(costs)
    if not k:
        return ""
    rounds = pd.to_numeric(one["rounds"], errors="coerce").dropna()
    lo, hi = (int(rounds.min()), int(rounds.max())) if len(rounds) else (0, 0)
    span = "" if not len(rounds) else f"{lo} rounds" if lo == hi else f"{lo}-{hi} rounds"
    aside = "; ".join(x for x in (span, f"{MARK} in the tables" if marked else "") if x)
    who = (
        "The one cost rests"
        if n == 1
        else f"All {n} costs rest"
        if k == n
        else f"{k} of the {n} costs rest"
    )
    their = "its 95% interval assumes" if k == 1 else "their 95% intervals assume"
    return (
        f"{who} on one replicate" + (f" ({aside})" if aside else "") + f": {their} "
        f"{assumed_words()}."
    )


def mark_words() -> str:
    """The legend of ``MARK`` under a table of per-workload costs."""
    return f"{MARK} The 95% interval rests on one replicate: it assumes {assumed_words()}."


def secs(x: float) -> str:
    """Seconds to two significant digits, as a reader takes them: 0.00035, 0.10, 1.0, 9.4, 12."""
    return f"{x:.0f}" if x >= 10 else f"{x:#.2g}".rstrip(".")


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)}-{format(hi, fmt)}"


def costs_item(
    df: pd.DataFrame, env: Mapping[str, Any], baseline: str, aa_copy: bool = True
) -> str | None:
    """How the costs were timed side by side; ``aa_copy``: with a second baseline worker."""
    o = env.get("options") or {}
    design = o.get("timing")
    timed = [t for t in df["timing"] if is_paired(t)] if "timing" in df.columns else []
    if not timed:
        if design != "paired":
            return None
        return (
            f"Costs: the run was set to time them side by side (timing {design}, "
            f"{o.get('rounds')} rounds), but no paired timing was recorded: the run stopped "
            "before its costs, and the figures are the verdict records' own where they have any."
        )
    rounds = [len(t["paired_rounds"]) for t in timed]
    blocks = [float(t["number_per_block"]) for t in timed if t.get("number_per_block")]
    clocks = sorted({str(t.get("clock")) for t in timed if t.get("clock")})
    modes = sorted({str(t.get("clock_mode")) for t in timed if t.get("clock_mode")})
    return (
        f"Costs: paired (timing {design}). In each replicate, one fresh timing worker per mode"
        + (
            f" and a second worker of the {baseline} mode's settings (the A/A check)"
            if aa_copy
            else ""
        )
        + " stayed alive together; for each workload each built it and warmed up in turn, then "
        "in each round they took turns in an order shuffled anew, each timing one block of "
        "steps, so every mode was timed under the same clock and host state as the others, "
        "moments apart. "
        f"Rounds per worker: {_span([float(r) for r in rounds], '.0f')} (option rounds: "
        f"{o.get('rounds')}; fewer for a long step); steps per block: "
        f"{_span(blocks, '.0f') if blocks else 'not recorded'}"
        + (
            f" (blocks of {secs(got['block'][0])}-{secs(got['block'][1])} s, "
            f"{secs(got['seconds'][0])}-{secs(got['seconds'][2])} s of sampling per record)"
            if (got := quality.sampled(df)) is not None
            else ""
        )
        + f"; clock: {', '.join(clocks) or 'not recorded'}"
        + (f", {', '.join(modes)}" if modes else "")
        + ". A cost is the geometric mean over replicates of each replicate's median ratio of "
        f"its block to the {baseline} block of the same round; its 95% interval is a t-interval "
        "on those replicate figures with (replicates - 1) degrees of freedom, so it counts the "
        "rounds and the processes (Kalibera & Jones); with one replicate, the process level is "
        "assumed at one round's robust spread, not measured."
    )


def limits_sentence(costs: pd.DataFrame) -> str:
    """What limits the costs' intervals (``limited_by``), or ""."""
    if costs.empty or "limited_by" not in costs.columns:
        return ""
    counts = costs["limited_by"].dropna().value_counts()
    if counts.empty:
        return ""
    parts = [f"{LIMIT_WORDS.get(str(k), str(k))} for {n}" for k, n in counts.items()]
    widths = pd.to_numeric(costs["half_width"], errors="coerce").dropna()
    median = f" (median half-width {_pct(float(np.median(widths)))})" if len(widths) else ""
    return f"What limits the {len(costs)} costs' 95% intervals{median}: " + "; ".join(parts) + "."
