"""The report's tables: the recommendations, the recipes, every (workload, mode) with its
verdict and cost, and the failures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.report.aa_check import MARK, mark_words, one_replicate
from detbench.report.answer import interval_text
from detbench.report.render import Block, Code, Heading, Para, Table, num, pct, size
from detbench.store.schema import Status


def _significant(costs: pd.DataFrame, suite: str, mode: str, baseline: str) -> str:
    """In how many of the suite's workloads ``mode`` differs significantly from the baseline."""
    if costs.empty or mode == baseline:
        return "–"
    c = costs[(costs["suite"] == suite) & (costs["mode"] == mode)]
    return f"{int(c['significant'].sum())} of {len(c)}"


def _throughput(r: Mapping[Any, Any], baseline: str) -> str:
    """``1.31x [1.22, 1.40]``: a recommendation's relative throughput and its 95% interval."""
    if r["mode"] is None:
        return "–"
    if r["mode"] == baseline:
        return "1x (baseline)"
    return interval_text(r["relative_throughput"], r.get("ci_low"), r.get("ci_high"))


def recommendation_blocks(
    rec: pd.DataFrame, costs: pd.DataFrame, baseline: str = "default", device: str | None = None
) -> list[Block]:
    """Per suite, the recommended mode and why (``analysis.recommendations``)."""
    suites = rec[rec["workload"] == "*"]
    rows: list[list[str | Code]] = []
    for r in suites.to_dict("records"):
        if r["mode"] is None:
            rows.append(
                [r["suite"], "none", "–", "–", "–", r["fastest_mode"] or "–", str(r["reason"])]
            )
            continue
        rows.append(
            [
                r["suite"],
                r["mode"],
                _throughput(r, baseline),
                _significant(costs, r["suite"], r["mode"], baseline),
                pct(r["cost_vs_fastest"]),
                r["fastest_mode"] or "–",
                str(r["reason"]),
            ]
        )
    cpu = (
        " On a CPU, the modes that change cuDNN flags are the same computation as their twin "
        "without them, so they are never recommended (nor named the fastest)."
        if device == "cpu"
        else ""
    )
    return [
        Heading(2, "Recommendations"),
        Para(
            f"Why each suite's mode was chosen (the rule: see Method). Throughput is relative to "
            f"the {baseline} mode (geometric mean over the workloads, 95% interval); "
            "'significant' counts the workloads whose difference from the "
            f"{baseline} mode is significant; 'cost vs fastest' compares with the fastest mode."
            + cpu
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
            ],
            rows,
        ),
    ]


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
        rows.append(
            [x["recipe"], x["variant"], x["verdict"], same, num(x["items_per_second"], ".4g")]
        )
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


def workload_recommendation_table(
    rec: pd.DataFrame, suite: str, memory: pd.DataFrame | None = None, baseline: str = "default"
) -> Table:
    """``memory``: ``analysis.peak_memory`` by (suite, workload, mode); None: no such column."""
    rec = rec[(rec["suite"] == suite) & (rec["workload"] != "*")]
    rows: list[list[str | Code]] = []
    for r in rec.to_dict("records"):
        row: list[str | Code] = [
            r["workload"],
            r["mode"] or "none reproducible",
            _throughput(r, baseline),
            pct(r["cost_vs_fastest"]),
            r["fastest_mode"] or "–",
        ]
        if memory is not None:
            key = (suite, r["workload"], r["mode"])
            ratio = memory["memory_ratio"].get(key) if r["mode"] else None
            row.append(num(ratio, ".2f") + "x" if num(ratio) != "–" else "–")
        row.append(str(r["reason"]))
        rows.append(row)
    header = ["workload", "recommended mode", f"vs {baseline}", "cost vs fastest", "fastest mode"]
    if memory is not None:
        header.append(f"peak memory vs {baseline}")
    header.append("why")
    return Table(header, rows, caption=f"{suite}: recommendation per workload")


def full_table(
    v: pd.DataFrame,
    suite: str,
    costs: pd.DataFrame,
    memory: pd.DataFrame | None = None,
    baseline: str = "default",
    clocks: Mapping[tuple[str, str, str], str] | None = None,
) -> Table:
    """Every (workload, mode) of ``suite``; ``clocks``: ``analysis.clocks.clock_states``."""
    clocks = clocks or {}
    v = v[v["suite"] == suite]
    c = costs[costs["suite"] == suite].set_index(["workload", "mode"]) if len(costs) else None
    one = _one_replicate(costs, suite)
    rows: list[list[str | Code]] = []
    for r in v.to_dict("records"):
        key = (r["workload"], r["mode"])
        rel = ci = sig = noisy = "–"
        if r["mode"] == baseline:  # 1 by definition: no interval of the baseline against itself
            rel, ci = "1 (baseline)", "–"
        elif c is not None and key in c.index:
            cr = c.loc[key]
            rel = num(cr["relative_throughput"], ".3f")
            ci = f"[{num(cr['ci_low'], '.3f')}, {num(cr['ci_high'], '.3f')}]"
            ci += f" {MARK}" if (str(key[0]), str(key[1])) in one else ""
            sig = "yes" if cr["significant"] else "no"
            noisy = "noisy" if cr["noisy"] else ""
        verdict = str(r["verdict"])
        if verdict == "nondeterministic":
            verdict += f" ({r['distinct_fingerprints']} distinct of {r['ok']})"
        if r.get("changed") and verdict != "settings_changed":
            verdict += f" ({r['changed']} replicate(s) not counted: settings changed)"
        row: list[str | Code] = [
            r["workload"],
            r["mode"],
            verdict,
            f"{r['ok']}/{r['replicates']}",
            num(r["max_abs_diff"], ".3g") if r["max_abs_diff"] is not None else "–",
            num(r["items_per_second"], ".4g"),
            clocks.get((suite, r["workload"], r["mode"]), "–"),
            rel,
            ci,
            sig,
            noisy,
        ]
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
            "clocks",
            f"vs {baseline}",
            "95% CI",
            "significant",
            "noise",
            *memory_header,
        ],
        rows,
        caption=f"{suite}: every workload and mode",
    )


def _one_replicate(costs: pd.DataFrame, suite: str) -> set[tuple[str, str]]:
    if costs.empty:
        return set()
    c = costs[(costs["suite"] == suite) & one_replicate(costs)]
    return {(str(w), str(m)) for w, m in zip(c["workload"], c["mode"], strict=True)}


def full_blocks(
    v: pd.DataFrame,
    suite: str,
    costs: pd.DataFrame,
    memory: pd.DataFrame | None = None,
    baseline: str = "default",
    clocks: Mapping[tuple[str, str, str], str] | None = None,
) -> list[Block]:
    """``full_table``, with the legend of its mark where it has one."""
    table = full_table(v, suite, costs, memory, baseline, clocks)
    ci = list(table.header).index("95% CI")
    marked = any(str(row[ci]).endswith(MARK) for row in table.rows)
    return [table, Para(mark_words())] if marked else [table]


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
