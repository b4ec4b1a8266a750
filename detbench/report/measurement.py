"""The report's Measurement quality section: how much each mode's cost moved between replicates
(the spread, pooled into the very costs the tables state), how well the timing converged, and
whether the two fingerprints agreed (a run made with ``--fingerprint both``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import paired_costs, quality
from detbench.report.render import Block, Code, Details, Heading, Para, Table, num


def spread_table(s: pd.DataFrame, baseline: str) -> Table | None:
    """Per suite and mode of ``s`` (``spread``): the geometric mean relative throughput within
    each replicate, its min and max, next to the pooled estimate: the costs as the tables state
    them."""
    if s.empty:
        return None
    rows: list[list[str | Code]] = []
    for r in s[s["mode"] != baseline].to_dict("records"):  # the baseline's is 1 always
        per = r["per_replicate"]
        rows.append(
            [
                str(r["suite"]),
                str(r["mode"]),
                num(r["pooled"], ".3f"),
                num(r["min"], ".3f"),
                num(r["max"], ".3f"),
                num(r["max"] / r["min"], ".2f") + "x",
                ", ".join(f"{k}: {num(x, '.3f')}" for k, x in per.items()),
                str(r["workloads"]),
            ]
        )
    return Table(
        ["suite", "mode", "pooled", "min", "max", "max/min", "replicate: value", "workloads"],
        rows,
        caption=f"throughput relative to the {baseline} mode (geometric mean over the suite's "
        "workloads): pooled over replicates, and within each replicate",
    )


def spread(df: pd.DataFrame, costs: pd.DataFrame | None = None) -> pd.DataFrame:
    """``quality.replicate_spread`` of the records that count, against the run's baseline."""
    baseline = str(analysis.baseline_mode(df["mode"]))
    return quality.replicate_spread(analysis.counted(df), baseline, costs)


def spread_words(s: pd.DataFrame, baseline: str) -> str:
    """How the spread table's figures were computed for a cost timed side by side, where its
    rows have one (``replicate_spread``'s ``design``); "" where none has."""
    if "design" not in s.columns or not s["design"].isin([paired_costs.DESIGN, "mixed"]).any():
        return ""
    return (
        f"For a cost timed side by side, a replicate's value is that process's median ratio of "
        f"the mode's block to the {baseline} block of the same round, and the pooled figure is "
        "the geometric mean of those values: the cost the tables above give."
    )


def _half_width(x: Any) -> str:
    """A relative half-width as a percentage to 0.1 (targets are 1% on a GPU, 3% on a CPU)."""
    return "–" if x is None else f"±{100 * float(x):.1f}%"


def timing_table(df: pd.DataFrame) -> Table | None:
    tq = quality.timing_quality(df)
    if tq.empty:
        return None
    rows: list[list[str | Code]] = []
    for r in tq.to_dict("records"):
        rows.append(
            [
                str(r["suite"]),
                str(r["timed"]),
                str(r["reached"]),
                str(r["missed"]),
                _half_width(r["median_ci_rel"]),
                _half_width(r["max_ci_rel"]),
            ]
        )
    return Table(
        [
            "suite",
            "timed records",
            "reached the target",
            "stopped short of it",
            "median 95% interval",
            "widest 95% interval",
        ],
        rows,
        caption="95% interval of each record's median step time, as a fraction of the median",
    )


def stopped_short_table(df: pd.DataFrame) -> Details | None:
    """Each record that stopped short of its target, with its interval."""
    short = quality.stopped_short(df)
    if short.empty:
        return None
    rows: list[list[str | Code]] = []
    for r in short.to_dict("records"):
        ms = {
            k: None if r[k] is None else 1e3 * float(r[k]) for k in ("median", "ci_low", "ci_high")
        }
        interval = f"[{num(ms['ci_low'], '.4g')}, {num(ms['ci_high'], '.4g')}]"
        rows.append(
            [
                f"{r['suite']}/{r['workload']}",
                str(r["mode"]),
                str(r["replicate"]),
                num(ms["median"], ".4g"),
                interval,
                _half_width(r["ci_rel"]),
                str(r["samples"]),
            ]
        )
    header = ["workload", "mode", "replicate", "median (ms)", "95% interval (ms)", "±", "samples"]
    return Details(
        f"The {len(rows)} records that stopped short of the target, with their intervals",
        [Table(header, rows)],
    )


def quality_blocks(
    df: pd.DataFrame, env: dict[str, Any], costs: pd.DataFrame | None = None
) -> list[Block]:
    """How much each mode's cost moved between replicates, and how well the timing converged."""
    blocks: list[Block] = []
    baseline = analysis.baseline_mode(df["mode"])
    s = spread(df, costs)
    table = spread_table(s, str(baseline))
    if table is not None:
        order = env.get("mode_order") or {}
        how = (
            f"The modes ran in a shuffled order in each replicate (seed {order.get('seed')}), "
            "so a slow period of the machine lands on different modes in different replicates "
            "and widens their spread instead of biasing one mode."
            if order.get("replicates")
            else "The modes ran in the same order in every replicate (this run predates "
            "shuffling), so a slow period at the same point of each replicate biases the modes "
            "that ran then."
        )
        blocks += [
            Heading(3, "Spread across replicates"),
            Para(
                f"Each mode's throughput relative to the {baseline} mode, computed within each "
                f"replicate (the mode and the {baseline} mode measured in the same replicate) and "
                "pooled over replicates. Modes that are the same computation (on a CPU, those "
                f"that differ only in cuDNN flags) should agree: a wide spread is drift. {how}"
                + (f" {words}" if (words := spread_words(s, str(baseline))) else "")
            ),
            table,
        ]
    timing = timing_table(df)
    if timing is not None:
        missed = (env.get("run_stats") or {}).get("timing_target_missed")
        blocks += [
            Heading(3, "Timing"),
            Para(
                "Each record was sampled until the 95% interval of its median step time was "
                "within the target, or until the budget ran out (on a GPU: the ceiling past the "
                "budget, while the target was in reach; see Method)."
                + (
                    f" The runner counted {missed} records that hit the budget first "
                    "(run_stats, last session)."
                    if missed is not None
                    else ""
                )
            ),
            timing,
        ]
        short = stopped_short_table(df)
        if short is not None:
            blocks.append(short)
    agreement = quality.fingerprint_agreement(df)
    if not agreement.empty:
        n, agree = len(agreement), int(agreement["agree"].sum())
        steps = int(agreement["steps_agree"].sum())
        differ = agreement[~agreement["agree"] | ~agreement["steps_agree"]]
        blocks += [
            Heading(3, "Fingerprints checked against sha256"),
            Para(
                "This run recorded both fingerprints of every record (--fingerprint both). The "
                f"device digest and sha256 split the replicates the same way for {agree} of {n} "
                f"(workload, mode) pairs, and step by step for {steps} of {n}; "
                f"{int((agreement['device_distinct'] > 1).sum())} pairs were nondeterministic "
                "by both."
                + (
                    " They disagree for: "
                    + ", ".join(f"{r.suite}/{r.workload} [{r.mode}]" for r in differ.itertuples())
                    if len(differ)
                    else ""
                )
            ),
        ]
    return [Heading(2, "Measurement quality"), *blocks] if blocks else []
