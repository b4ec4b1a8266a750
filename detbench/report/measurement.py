"""The report's Measurement quality section: the spread of the costs between replicates, an
earlier run's timing, and whether the two fingerprints agreed (``--fingerprint both``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import earlier_design, paired_costs, quality
from detbench.report.render import Block, Code, Heading, Para, Table, num


def spread_table(s: pd.DataFrame, baseline: str) -> Table | None:
    """Per suite and mode of ``s`` (``quality.replicate_spread``), each replicate's figure."""
    if s.empty:
        return None
    rows: list[list[str | Code]] = []
    for r in s[s["mode"] != baseline].to_dict("records"):  # the baseline's is 1 always
        rows.append(
            [
                str(r["suite"]),
                str(r["mode"]),
                *(num(r[k], ".3f") for k in ("pooled", "min", "max")),
                num(r["max"] / r["min"], ".2f") + "x",
                ", ".join(f"{k}: {num(x, '.3f')}" for k, x in r["per_replicate"].items()),
                str(r["workloads"]),
            ]
        )
    return Table(
        ["suite", "mode", "pooled", "min", "max", "max/min", "replicate: value", "workloads"],
        rows,
        caption=f"throughput relative to the {baseline} mode (geometric mean over the suite's "
        "workloads): pooled over replicates, and within each replicate",
    )


def spread_words(s: pd.DataFrame, baseline: str) -> str:
    """How the spread table's figures were computed for a cost timed side by side, or ""."""
    if "design" not in s.columns or not s["design"].isin([paired_costs.DESIGN, "mixed"]).any():
        return ""
    return (
        f"For a cost timed side by side, a replicate's value is that process's median ratio of "
        f"the mode's block to the {baseline} block of the same round, and the pooled figure is "
        "the geometric mean of those values: the cost the tables above give."
    )


def quality_blocks(
    df: pd.DataFrame, env: dict[str, Any], costs: pd.DataFrame | None = None
) -> list[Block]:
    blocks: list[Block] = []
    baseline = str(analysis.baseline_mode(df["mode"]))
    s = quality.replicate_spread(analysis.counted(df), baseline, costs)
    if (table := spread_table(s, baseline)) is not None:
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
                + (f" {words}" if (words := spread_words(s, baseline)) else "")
            ),
            table,
        ]
    timing = earlier_design.timing_words(df)  # the paired design's is in the Method
    if timing is not None:
        blocks += [Heading(3, "Timing"), Para(timing)]
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
