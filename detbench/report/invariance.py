"""The report's ``Batch invariance`` section and its plane, for a run whose workloads declare
``batch_sizes`` (``detbench.worker.invariance``, ``detbench.worker.measure._invariance``).

Everything here is computed from the records: each workload's batch-invariance verdict per mode
(over its replicates), and the price of invariance where the suite has an invariant reference (a
workload whose params hold ``"invariant_reference_of": "<base workload>"``): its throughput
relative to the base in the same suite and mode, with a 95% interval from the two-level bootstrap
of ``analysis.costs``; the price of a setting where the run has a mode with settings beside its
base mode (same bootstrap); and for a decoder its distinct completions and tokens/s. A workload
that ran in no mode is listed with its reason. A run without such workloads gets no section and
no figure.

This module is the section: its method, and per suite the tables of
``detbench.report.invariance_tables``, the matrix of symbols, the figure of
``detbench.report.invariance_plane`` and the sentences of ``detbench.report.invariance_words``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis.invariance_table import table
from detbench.report.invariance_plane import KIND
from detbench.report.invariance_tables import (
    compact_table,
    matrix_symbol,
    suite_table,
    verdict_cell,
)
from detbench.report.invariance_words import conclusions
from detbench.report.matrices import key_para, split, symbol_matrix
from detbench.report.plots import Plot
from detbench.report.render import Block, Bullets, Details, Figure, Heading, Para


def _method(t: pd.DataFrame) -> Para:
    refs = t["reference_of"].notna().any()
    variants = t["base_mode"].notna().any()
    return Para(
        "What was compared: in a fresh worker under each mode, every workload that declares "
        "batch sizes was built at each declared size (freshly seeded) and ran one step; row 0 "
        "(index 0 of dim 0) of every batch-first output at each size was compared bitwise with "
        "row 0 at the smallest size. The workload makes row 0 the same request at every size, "
        "so a difference means the kernels computed the same request differently because of "
        "what shared its batch. A mode's verdict is 'invariant' only when every replicate found "
        "the same bits at every size; 'varies from batch N' names the smallest size whose row 0 "
        "differed in any replicate, and the max abs diff is the largest difference seen. "
        "'Distinct row-0 results' counts the different row-0 results of the first output over "
        "the K sizes (the most in any replicate): for a decoder, distinct completions of the "
        "same request over K batch compositions, the study's measure, and its items/s are "
        "tokens/s. Timing stays at the workload's own batch size."
        + (
            " The price of invariance: an invariant reference (a workload that computes the same "
            "thing in a batch-invariant way) against its base in the same mode, throughput "
            "relative to the base (ratio of the medians over replicates of each replicate's "
            "median, 95% interval from a two-level bootstrap over replicates and samples). A "
            "reference that is not itself invariant is marked NO: its speed is then no price."
            if refs
            else ""
        )
        + (
            " The price of a setting: a mode with settings (name[setting=level]) against its "
            "base mode, same workload, throughput relative to the base mode with the same "
            "bootstrap interval; its own verdict is in the row-0 column."
            if variants
            else ""
        )
    )


def blocks(df: pd.DataFrame, env: dict[str, Any], plots: list[Plot]) -> list[Block]:
    """The section: [] when no record has batch sizes. ``env`` is unused (the signature of the
    report's section modules)."""
    t = table(df)
    if t.empty:
        return []
    out: list[Block] = [Heading(2, "Batch invariance"), _method(t)]
    words = conclusions(t)
    for suite, g in t.groupby("suite", sort=False):
        s = str(suite)
        out.append(Heading(3, s))
        if not (g["ran"] == True).any():  # noqa: E712
            why = g["note"].astype(str).value_counts(sort=False)
            out.append(
                Para(
                    f"Nothing in {s} could run: every workload that declares batch sizes failed in "
                    "every mode, so there is no batch-invariance verdict. Why: "
                    + "; ".join(
                        f"{note} ({n} workload/mode pair{'s' if n != 1 else ''})"
                        for note, n in why.items()
                    )
                    + "."
                )
            )
        baseline = str(analysis.baseline_mode(df["mode"]))
        out.append(compact_table(g, s, baseline))
        cells = g.assign(symbol=[matrix_symbol(r) for r in g.to_dict("records")])
        _, differ = split(cells)
        if len(differ):
            modes = analysis.ordered_modes(g["mode"])
            out.append(
                symbol_matrix(differ, modes, f"{s}: where the batch verdict depends on the mode")
            )
            out.append(
                key_para(
                    list(differ["symbol"]),
                    modes,
                    {
                        "=": "batch invariant",
                        "u": "did not run",
                        "?": "no verdict",
                        **{
                            x: f"varies from batch {x[1:]}" if len(x) > 1 else "varies"
                            for x in differ["symbol"]
                            if x.startswith("≠")
                        },
                    },
                )
            )
        out.append(Details(f"{s}: every workload and mode (full table)", [suite_table(g, s)]))
        bad = g[
            g["reference_of"].notna()
            & (g["ran"] == True)  # noqa: E712
            & (g["reference_invariant"] != True)  # noqa: E712
        ]
        for w, b in bad.groupby("workload", sort=False):
            where = ", ".join(f"{r['mode']} ({verdict_cell(r)})" for r in b.to_dict("records"))
            out.append(
                Para(
                    f"Warning: {w}, the invariant reference of {b['reference_of'].iloc[0]}, is NOT "
                    f"batch invariant in {where}: its throughput is not the price of invariance."
                )
            )
        out += [Figure(p) for p in plots if p.kind == KIND and p.suite == s]
        if words[s]:
            out.append(Bullets(words[s]))
    return out
