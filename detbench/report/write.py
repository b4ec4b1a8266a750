"""``detbench report DIR``: ``DIR/report.md`` and a self-contained ``DIR/report.html``: what the
report says about a run's results (recommendations, recipes, the full tables, failures).

Both files are rendered from one list of blocks (``detbench.report.render``), so they say the same
thing.
Everything in them is computed from the raw records in ``results.jsonl`` and the facts in
``env.json``; the report files and ``plots/`` are derived and rewritten on every call. The
sections on the run's conditions (warnings, precision, measurement quality, method,
environment) are in ``detbench.report.conditions`` and ``detbench.report.method``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis.recommend import RULE, run_device
from detbench.locate import report as locate_report
from detbench.report import across as across_report
from detbench.report import attribution as attribution_report
from detbench.report import devices, located, samebits
from detbench.report import distributed as distributed_report
from detbench.report import invariance as invariance_report
from detbench.report.conditions import precision_blocks, quality_blocks, warnings
from detbench.report.method import environment_table, method_blocks
from detbench.report.plots import Plot, write_plots
from detbench.report.render import (
    Block,
    Bullets,
    Code,
    Figure,
    Heading,
    Para,
    Table,
    num,
    pct,
    size,
    to_html,
    to_markdown,
)
from detbench.report.render import md_text as _md_text  # noqa: F401  (detbench.publish imports it here)
from detbench.store.results import ENV_FILE, env_facts, load_env, load_results, write_text_atomic
from detbench.store.schema import Status

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


# --- Content -----------------------------------------------------------------------------------


def _significant(costs: pd.DataFrame, suite: str, mode: str, baseline: str) -> str:
    """In how many of the suite's workloads ``mode``'s throughput differs significantly from the
    baseline's."""
    if costs.empty or mode == baseline:
        return "–"
    c = costs[(costs["suite"] == suite) & (costs["mode"] == mode)]
    return f"{int(c['significant'].sum())} of {len(c)}"


def _throughput(r: Mapping[Any, Any]) -> str:
    """``1.31x [1.22, 1.40]``: a recommendation's relative throughput and its 95% interval."""
    text = num(r["relative_throughput"], ".2f") + ("x" if r["mode"] else "")
    if r.get("ci_low") is not None and r.get("ci_high") is not None:
        text += f" [{num(r['ci_low'], '.2f')}, {num(r['ci_high'], '.2f')}]"
    return text


def recommendation_blocks(rec: pd.DataFrame, costs: pd.DataFrame, baseline: str = "default",
                          device: str | None = None) -> list[Block]:  # fmt: skip
    """``rec``: ``analysis.recommendations``; ``costs``: ``analysis.costs`` (or empty), both
    against ``baseline``; ``device``: where the run ran (``recommend.run_device``)."""
    suites = rec[rec["workload"] == "*"]
    rows: list[list[str | Code]] = []
    for r in suites.to_dict("records"):
        if r["mode"] is None:
            rows.append([r["suite"], "none", "–", "–", "–", r["fastest_mode"] or "–",
                         str(r["reason"]), Code("")])  # fmt: skip
            continue
        rows.append([
            r["suite"], r["mode"], _throughput(r), _significant(costs, r["suite"], r["mode"],
            baseline), pct(r["cost_vs_fastest"]), r["fastest_mode"] or "–", str(r["reason"]),
            Code(r["snippet"]),
        ])  # fmt: skip
    cpu = (
        " This run was on a CPU: the modes that change cuDNN flags are the same computation "
        "as their twin without them there, so they are never recommended (nor named the "
        "fastest)."
        if device == "cpu"
        else ""
    )
    blocks: list[Block] = [
        Heading(2, "Recommendations"),
        Para(f"The rule: recommended is {RULE}."),
        Para(
            "Per suite, a mode qualifies when it was bitwise reproducible for every workload of "
            "the suite (workloads that ran in no mode are left out); its throughput is relative "
            f"to the {baseline} mode (geometric mean over the workloads, with the 95% interval "
            "of two-level bootstrap resamples), 'cost vs fastest' compares it with the fastest "
            "mode overall, 'why' says how the rule chose it, and the lines set it. "
            "'Significant' counts the workloads whose difference from the "
            f"{baseline} mode's throughput is significant (95% interval excluding 1)." + cpu
        ),
        Table(
            [
                "suite",
                "recommended mode",
                f"throughput vs {baseline}",
                "significant",
                "cost vs fastest",
                "fastest mode",
                "why",
                "Python",
            ],
            rows,
        ),
    ]
    none = [str(s) for s in suites.loc[suites["mode"].isna(), "suite"]]
    if none:
        blocks.append(
            Para(
                "No mode made every workload of "
                + ", ".join(none)
                + " bitwise reproducible: see the per-workload recommendations below for the "
                "workloads that can be made reproducible, and the warnings for the rest."
            )
        )
    return blocks


def recipe_blocks(df: pd.DataFrame) -> list[Block]:
    r = analysis.recipes(df)
    if r.empty:
        return []
    baseline = analysis.baseline_mode(df["mode"])
    rows: list[list[str | Code]] = []
    for x in r.to_dict("records"):
        same = "–"
        if x["compare_with"]:
            same = {True: "yes", False: "no", None: "not comparable"}[x["same_bits"]]
            same += f" ({x['compare_with']})"
        rows.append([x["recipe"], x["variant"], x["verdict"], same,
                     num(x["items_per_second"], ".4g")])  # fmt: skip
    return [
        Heading(2, "Recipes"),
        Para(
            "Each seeding recipe as an experiment. detbench did not seed these workloads: each "
            "starts from the state a fresh process has (every generator seeded from OS entropy) "
            "and seeds, or fails to seed, as its variant says. 'Same bits' compares a variant's "
            "results with another workload's (a resumed run with the uninterrupted one, a traced "
            f"model with the eager one); items/s is in the {baseline} mode."
        ),
        Table(["recipe", "variant", "bitwise run to run", "same bits as", "items/s"], rows),
    ]


def workload_recommendation_table(rec: pd.DataFrame, suite: str,
                                  memory: pd.DataFrame | None = None,
                                  baseline: str = "default") -> Table:  # fmt: skip
    """``memory``: ``analysis.peak_memory`` indexed by (suite, workload, mode), or None when the
    run recorded no memory (no memory column then)."""
    rec = rec[(rec["suite"] == suite) & (rec["workload"] != "*")]
    rows: list[list[str | Code]] = []
    for r in rec.to_dict("records"):
        row: list[str | Code] = [
            r["workload"], r["mode"] or "none reproducible", _throughput(r),
            pct(r["cost_vs_fastest"]), r["fastest_mode"] or "–",
        ]  # fmt: skip
        if memory is not None:
            key = (suite, r["workload"], r["mode"])
            ratio = memory["memory_ratio"].get(key) if r["mode"] else None
            row.append(num(ratio, ".2f") + "x" if num(ratio) != "–" else "–")
        row.append(str(r["reason"]))
        rows.append(row)
    header = ["workload", "recommended mode", f"vs {baseline}", "cost vs fastest",
              "fastest mode"]  # fmt: skip
    if memory is not None:
        header.append(f"peak memory vs {baseline}")
    header.append("why")
    return Table(header, rows, caption=f"{suite}: recommendation per workload")


def full_table(v: pd.DataFrame, suite: str, costs: pd.DataFrame,
               memory: pd.DataFrame | None = None, baseline: str = "default") -> Table:  # fmt: skip
    """``v``: ``analysis.verdicts`` of the whole run; ``memory``: as for
    ``workload_recommendation_table``."""
    v = v[v["suite"] == suite]
    c = costs[costs["suite"] == suite].set_index(["workload", "mode"]) if len(costs) else None
    rows: list[list[str | Code]] = []
    for r in v.to_dict("records"):
        key = (r["workload"], r["mode"])
        rel = ci = sig = noisy = "–"
        if c is not None and key in c.index:
            cr = c.loc[key]
            rel = num(cr["relative_throughput"], ".3f")
            ci = f"[{num(cr['ci_low'], '.3f')}, {num(cr['ci_high'], '.3f')}]"
            sig = "yes" if cr["significant"] else "no"
            noisy = "noisy" if cr["noisy"] else ""
        verdict = str(r["verdict"])
        if verdict == "nondeterministic":
            verdict += f" ({r['distinct_fingerprints']} distinct of {r['ok']})"
        if r.get("changed") and verdict != "settings_changed":
            verdict += f" ({r['changed']} replicate(s) not counted: settings changed)"
        row: list[str | Code] = [
            r["workload"], r["mode"], verdict, f"{r['ok']}/{r['replicates']}",
            num(r["max_abs_diff"], ".3g") if r["max_abs_diff"] is not None else "–",
            num(r["items_per_second"], ".4g"), rel, ci, sig, noisy,
        ]  # fmt: skip
        if memory is not None:
            mkey = (suite, r["workload"], r["mode"])
            peak = memory["peak_memory_bytes"].get(mkey)
            row += [size(peak), num(memory["memory_ratio"].get(mkey), ".2f")]
        rows.append(row)
    memory_header = ["peak memory (median)", f"memory vs {baseline}"] if memory is not None else []
    return Table(
        [
            "workload",
            "mode",
            "verdict",
            "ok/replicates",
            "max abs diff",
            "items/s (median)",
            f"vs {baseline}",
            "95% CI",
            "significant",
            "noise",
            *memory_header,
        ],
        rows,
        caption=f"{suite}: every workload and mode",
    )


def failure_table(df: pd.DataFrame) -> Table | None:
    bad = df[df["status"] != Status.OK]
    if bad.empty:
        return None
    rows: list[list[str | Code]] = []
    for (suite, workload, mode, status), g in bad.groupby(
        ["suite", "workload", "mode", "status"], sort=False
    ):
        msg = str(g["message"].dropna().iloc[0]) if g["message"].notna().any() else ""
        if len(msg) > 300:
            msg = msg[:300] + " …"
        rows.append([str(suite), str(workload), str(mode), str(status), str(len(g)), msg])
    return Table(["suite", "workload", "mode", "status", "records", "message (first)"], rows)


def build_blocks(df: pd.DataFrame, env: dict[str, Any], plots: list[Plot],
                 rec: pd.DataFrame | None = None) -> list[Block]:  # fmt: skip
    """The report, block by block; ``rec``: ``analysis.recommendations(df)`` where the caller
    has it already."""
    facts = env_facts(env)
    o = env.get("options") or {}
    device = facts["gpu"] if facts["device"] == "cuda" else f"CPU ({facts['cpu']})"
    suites = list(dict.fromkeys(df["suite"]))
    baseline = str(analysis.baseline_mode(df["mode"]))
    costs = analysis.costs(df, baseline)
    v = analysis.verdicts(df)
    rec = analysis.recommendations(df, baseline) if rec is None else rec
    peaks = analysis.peak_memory(df, baseline)
    memory = None if peaks.empty else peaks.set_index(["suite", "workload", "mode"])
    blocks: list[Block] = [
        Heading(1, f"detbench report: {device}, torch {facts['torch']}"),
        Para(
            f"{df['workload'].nunique()} workloads in {len(suites)} suites "
            f"({', '.join(suites)}) x {df['mode'].nunique()} modes x {o.get('replicates')} "
            f"replicates = {len(df)} records, profile {o.get('profile')}, on {device}. "
            f"Run started {env.get('started_utc')}."
        ),
    ]
    blocks += recommendation_blocks(rec, costs, baseline, run_device(df))
    blocks += attribution_report.blocks(df, env, plots)  # an attribution study's own section
    blocks += invariance_report.blocks(df, env, plots)  # the batch-invariance section
    blocks += distributed_report.blocks(df, env, plots)  # the distributed (torchrun) section
    blocks += located.blocks(env.get("located") or [])  # a run made with --locate
    blocks += devices.blocks(df, env, plots)  # same bits across devices (run --devices)
    blocks += samebits.blocks(df, env, plots)  # which modes give the default mode's bits
    blocks += precision_blocks(df, baseline)
    blocks += recipe_blocks(df)
    warn = warnings(df, v, env, costs)
    blocks += [Heading(2, "Warnings"), Bullets(warn) if warn else Para("None.")]
    blocks.append(Heading(2, "Plots"))
    for suite in suites:
        for p in plots:
            if p.suite == suite and p.kind not in ("attribution", "invariance-plane"):
                blocks.append(Figure(p))
    div = analysis.divergence(df)
    if "losses" in df.columns and df["losses"].notna().any() and div.empty:
        blocks.append(
            Para(
                "Training workloads: every replicate was bitwise identical to the first in every "
                "mode that ran, so there is no divergence to plot."
            )
        )
    blocks.append(Heading(2, "Full tables"))
    for suite in suites:
        blocks.append(Heading(3, str(suite)))
        blocks.append(workload_recommendation_table(rec, str(suite), memory, baseline))
        blocks.append(full_table(v, str(suite), costs, memory, baseline))
    blocks += quality_blocks(df, env)
    failures = failure_table(df)
    if failures is not None:
        blocks += [Heading(2, "Failures"), failures]
    blocks += method_blocks(df, env)
    blocks += [Heading(2, "Environment"), environment_table(env)]
    blocks.append(
        Para(
            "Generated by detbench from results.jsonl and env.json in this folder; "
            "detbench.load_results(FOLDER) reads every raw record."
        )
    )
    return blocks


def write_report(directory: str | Path) -> tuple[Path, Path]:
    """Write ``report.md``, ``report.html`` and ``plots/`` for the run in ``directory``."""
    d = Path(directory)
    df = load_results(d)  # errors with one clear line on a missing or malformed file
    if df.empty:
        from detbench.store.results import ResultsError

        raise ResultsError(f"{d}: results.jsonl holds no records yet")
    env = load_env(d) if (d / ENV_FILE).exists() else {}
    if env.get("machines"):  # a set of runs from several machines (detbench merge)
        return _write(d, across_report.set_blocks(d))
    env["located"] = locate_report.load(d)  # what run --locate found, kept beside env.json
    rec = analysis.recommendations(df)
    plots = write_plots(df, d / PLOTS_DIR, rec)
    plots += attribution_report.write_plots(df, env, d / PLOTS_DIR)
    plots += invariance_report.write_plots(df, env, d / PLOTS_DIR)
    return _write(d, build_blocks(df, env, plots, rec))


def _write(d: Path, blocks: list[Block]) -> tuple[Path, Path]:
    title = next((b.text for b in blocks if isinstance(b, Heading)), "detbench report")
    md, page = d / REPORT_MD, d / REPORT_HTML
    write_text_atomic(md, to_markdown(blocks, d))
    write_text_atomic(page, to_html(blocks, title))
    return md, page
