"""The report's sections, in the order a reader meets them (``SECTIONS``), and the ``ReportRun``
they all read. A section returns [] when it has nothing to say; the answer stays first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import runstate
from detbench.analysis import tradeoff as tradeoff_points
from detbench.analysis.clocks import clock_states
from detbench.analysis.recommend import run_device
from detbench.report import answer, devices, located, matrices, samebits, tables, tradeoff
from detbench.report import attribution as attribution_report
from detbench.report import distributed as distributed_report
from detbench.report import invariance as invariance_report
from detbench.report.aa_check import aa_blocks
from detbench.report.conditions import precision_blocks, warnings
from detbench.report.measurement import quality_blocks
from detbench.report.method import environment_table, method_blocks
from detbench.report.plots import Plot
from detbench.report.render import Block, Bullets, Details, Figure, Heading, Para
from detbench.store.results import env_facts


@dataclass
class ReportRun:
    """A run as the sections read it; each analysis is computed once, when first asked for."""

    df: pd.DataFrame
    env: dict[str, Any]
    plots: list[Plot] = field(default_factory=list)
    #: The run's ``paired.jsonl`` rows (``store.paired.load_paired``; None: not read).
    lines: pd.DataFrame | None = None

    @cached_property
    def baseline(self) -> str:
        return str(analysis.baseline_mode(self.df["mode"]))

    @cached_property
    def suites(self) -> list[str]:
        return [str(s) for s in dict.fromkeys(self.df["suite"])]

    @cached_property
    def rec(self) -> pd.DataFrame:
        return analysis.recommendations(self.df, self.baseline)

    @cached_property
    def costs(self) -> pd.DataFrame:
        return analysis.costs(self.df, self.baseline)

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        return analysis.verdicts(self.df)

    @cached_property
    def points(self) -> pd.DataFrame:
        """The plane with its intervals and a frontier that agrees with ``rec``."""
        return tradeoff_points.points(self.df, self.rec, self.baseline, v=self.verdicts)

    @cached_property
    def memory(self) -> pd.DataFrame | None:
        peaks = analysis.peak_memory(self.df, self.baseline)
        return None if peaks.empty else peaks.set_index(["suite", "workload", "mode"])

    @cached_property
    def device(self) -> str | None:
        return run_device(self.df)


Section = Callable[[ReportRun], list[Block]]


def header(r: ReportRun) -> list[Block]:
    facts = env_facts(r.env)
    o = r.env.get("options") or {}
    device = facts["gpu"] if facts["device"] == "cuda" else f"CPU ({facts['cpu']})"
    planned = runstate.planned_counts(o)
    workloads = len(o["workloads"]) if planned else r.df["workload"].nunique()
    modes = len(o["modes"]) if planned else r.df["mode"].nunique()
    total = sum(planned.values()) if planned else None
    records = (
        f"{len(r.df)} records"
        if total is None
        else f"{total} records planned, all measured"
        if len(r.df) >= total
        else f"{total} records planned, {len(r.df)} measured (a partial run)"
    )
    return [
        Heading(1, f"detbench report: {device}, torch {facts['torch']}"),
        Para(
            f"{workloads} workloads in {len(r.suites)} suites ({', '.join(r.suites)}) x {modes} "
            f"modes x {o.get('replicates')} replicates = {records}, profile "
            f"{o.get('profile')}, on {device}. Run started {r.env.get('started_utc')}."
        ),
    ]


def warnings_section(r: ReportRun) -> list[Block]:
    warn = warnings(r.df, r.verdicts, r.env, r.costs)
    return [Heading(2, "Warnings"), Bullets(warn) if warn else Para("None.")]


def verdicts_and_plots(r: ReportRun) -> list[Block]:
    """Per suite: the verdicts, the workloads whose own pick differs, the figures, the tables."""
    out: list[Block] = [Heading(2, "Per suite")]
    picks = r.rec[r.rec["workload"] == "*"].set_index("suite")["mode"].to_dict()
    states = clock_states(r.df)  # the clock state beside each rate
    for suite in r.suites:
        out.append(Heading(3, suite))
        out += matrices.verdict_blocks(r.verdicts, suite)
        mine = r.rec[(r.rec["suite"] == suite) & (r.rec["workload"] != "*")]
        if len(other := mine[mine["mode"] != picks.get(suite)]):
            table = tables.workload_recommendation_table(other, suite, r.memory, r.baseline)
            caption = f"{suite}: workloads whose own pick differs from the suite's"
            out.append(replace(table, caption=caption))
        out += [
            Figure(p) for p in r.plots if p.suite == suite and p.kind in ("heatmap", "divergence")
        ]
        out.append(
            Details(
                f"{suite}: every workload and mode (full tables)",
                [
                    tables.workload_recommendation_table(r.rec, suite, r.memory, r.baseline),
                    *tables.full_blocks(r.verdicts, suite, r.costs, r.memory, r.baseline, states),
                ],
            )
        )
    div = analysis.divergence(r.df)
    if "losses" in r.df.columns and r.df["losses"].notna().any() and div.empty:
        out.append(
            Para(
                "Training workloads: every replicate was bitwise identical to the first in every "
                "mode that ran, so there is no divergence to plot."
            )
        )
    return out


def failures(r: ReportRun) -> list[Block]:
    t = tables.failure_table(r.df)
    return [] if t is None else [Heading(2, "Failures"), Details(f"{len(t.rows)} failures", [t])]


def method(r: ReportRun) -> list[Block]:
    aa_copy = r.lines is not None and bool((r.lines["copy"] == 1).any())
    return method_blocks(r.df, r.env, r.costs, aa_copy)


def environment(r: ReportRun) -> list[Block]:
    return [
        Heading(2, "Environment"),
        environment_table(r.env, r.df),
        Para(
            "Generated by detbench from results.jsonl and env.json in this folder; "
            "detbench.load_results(FOLDER) reads every raw record."
        ),
    ]


#: The report, top to bottom.
SECTIONS: list[Section] = [
    header,
    lambda r: answer.blocks(
        r.df, r.env, r.rec, r.points, r.verdicts, r.baseline, r.device, r.costs
    ),
    lambda r: [Figure(p) for p in r.plots if p.kind == tradeoff.KIND],  # the headline plot
    lambda r: tables.recommendation_blocks(r.rec, r.costs, r.baseline, r.device),
    lambda r: aa_blocks(r.lines, r.baseline, r.costs),  # the A/A line, beside the costs
    lambda r: attribution_report.blocks(r.df, r.env, r.plots),  # an attribution study
    lambda r: invariance_report.blocks(r.df, r.plots),  # batch invariance
    lambda r: distributed_report.blocks(r.df),  # torchrun's workloads
    lambda r: located.blocks(r.env.get("located") or []),  # a run made with --locate
    lambda r: devices.blocks(r.df, r.env),  # same bits across devices (run --devices)
    lambda r: samebits.blocks(r.df),  # which modes give the default mode's bits
    lambda r: precision_blocks(r.df, r.baseline),
    lambda r: tables.recipe_blocks(r.df),
    warnings_section,
    verdicts_and_plots,
    lambda r: quality_blocks(r.df, r.env, r.costs),
    failures,
    method,
    environment,
]


def build(run: ReportRun) -> list[Block]:
    out: list[Block] = []
    for section in SECTIONS:
        out += section(run)
    return out
