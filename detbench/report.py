"""``detbench report DIR``: ``DIR/report.md`` and a self-contained ``DIR/report.html``.

Both are rendered from one list of blocks (headings, paragraphs, tables, figures), so they say the
same thing. Everything in them is computed from the raw records in ``results.jsonl`` and the facts
in ``env.json``; the report files and ``plots/`` are derived and rewritten on every call. The HTML
embeds its figures as base64 PNG and its style inline: it needs no network and no other file.
Every piece of text that comes from a run (workload names, error messages) is escaped.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from detbench import analysis
from detbench.modes import DEFAULT_MODE, MODES, get_mode
from detbench.plots import Plot, write_plots
from detbench.results import ENV_FILE, env_facts, load_env, load_results, write_text_atomic

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


# --- Blocks: the report's content, rendered twice ----------------------------------------------


@dataclass(frozen=True)
class Code:
    """A table cell or paragraph shown as code."""

    text: str


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: Sequence[str]


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str | Code]]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    plot: Plot


Block = Heading | Para | Bullets | Table | Figure | Code


def _md_text(s: str) -> str:
    """Text for Markdown: HTML special characters escaped (a Markdown renderer passes raw HTML
    through), and the characters Markdown would read as markup."""
    out = html.escape(s, quote=False)
    for ch in "\\`*_[]|":
        out = out.replace(ch, "\\" + ch)
    return out


def _md_cell(c: str | Code) -> str:
    if isinstance(c, Code):
        lines = [f"`{line}`" for line in c.text.splitlines()] or ["``"]
        return "<br>".join(line.replace("|", "\\|") for line in lines)
    return _md_text(c).replace("\n", "<br>")


def to_markdown(blocks: Sequence[Block], base: Path) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {_md_text(b.text)}")
        elif isinstance(b, Para):
            out.append(_md_text(b.text))
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {_md_text(i)}" for i in b.items))
        elif isinstance(b, Code):
            out.append(f"```python\n{b.text}\n```")
        elif isinstance(b, Table):
            lines = []
            if b.caption:
                lines.append(f"*{_md_text(b.caption)}*\n")
            lines.append("| " + " | ".join(_md_text(h) for h in b.header) + " |")
            lines.append("|" + "---|" * len(b.header))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Figure):
            png = os.path.relpath(b.plot.png, base)
            svg = os.path.relpath(b.plot.svg, base)
            out.append(f"![{_md_text(b.plot.title)}]({png})\n\n[SVG]({svg})")
    return "\n\n".join(out) + "\n"


def _h(s: str) -> str:
    return html.escape(s, quote=True)


def _html_cell(c: str | Code) -> str:
    if isinstance(c, Code):
        return f"<code>{_h(c.text)}</code>".replace("\n", "<br>")
    return _h(c).replace("\n", "<br>")


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1400px;
       margin: 2em auto; padding: 0 1em; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.4em; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .92em; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #555; }
.caption { font-style: italic; color: #444; margin-bottom: .2em; }
"""


def to_html(blocks: Sequence[Block], title: str) -> str:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            anchor = "".join(ch if ch.isalnum() else "-" for ch in b.text.lower()).strip("-")
            body.append(f'<h{b.level} id="{_h(anchor)}">{_h(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            body.append(f"<p>{_h(b.text)}</p>")
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{_h(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Code):
            body.append(f"<pre><code>{_h(b.text)}</code></pre>")
        elif isinstance(b, Table):
            cap = f'<div class="caption">{_h(b.caption)}</div>' if b.caption else ""
            head = "".join(f"<th>{_h(h)}</th>" for h in b.header)
            rows = "".join(
                "<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>"
                for row in b.rows
            )
            body.append(f"{cap}<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Figure):
            data = base64.b64encode(b.plot.png.read_bytes()).decode("ascii")
            body.append(
                f'<figure data-plot="{_h(b.plot.kind)}:{_h(b.plot.suite)}">'
                f'<img alt="{_h(b.plot.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_h(b.plot.title)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_h(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


# --- Content -----------------------------------------------------------------------------------


def _num(x: Any, fmt: str = ".3g") -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return "–"
    return "–" if not np.isfinite(f) else format(f, fmt)


def _pct(x: Any) -> str:
    return "–" if x is None or pd.isna(x) else f"{100 * float(x):.0f}%"


def _significant(costs: pd.DataFrame, suite: str, mode: str) -> str:
    """In how many of the suite's workloads ``mode``'s throughput differs significantly from the
    default mode's."""
    if costs.empty or mode == DEFAULT_MODE.name:
        return "–"
    c = costs[(costs["suite"] == suite) & (costs["mode"] == mode)]
    return f"{int(c['significant'].sum())} of {len(c)}"


def recommendation_blocks(rec: pd.DataFrame, costs: pd.DataFrame) -> list[Block]:
    """``rec``: ``analysis.recommendations``; ``costs``: ``analysis.costs`` (or empty)."""
    suites = rec[rec["workload"] == "*"]
    rows: list[list[str | Code]] = []
    for r in suites.to_dict("records"):
        if r["mode"] is None:
            rows.append([r["suite"], "none: no mode was bitwise reproducible for every workload",
                         "–", "–", "–", r["fastest_mode"] or "–", Code("")])  # fmt: skip
            continue
        rows.append([
            r["suite"], r["mode"], _num(r["relative_throughput"], ".2f") + "x",
            _significant(costs, r["suite"], r["mode"]), _pct(r["cost_vs_fastest"]),
            r["fastest_mode"] or "–", Code(r["snippet"]),
        ])  # fmt: skip
    blocks: list[Block] = [
        Heading(2, "Recommendations"),
        Para(
            "Per suite: the fastest mode whose results were bitwise identical in every replicate "
            "for every workload of the suite (workloads that ran in no mode are left out), its "
            "throughput relative to the default mode (geometric mean over the workloads), what it "
            "costs against the fastest mode overall, and the lines that set it. 'Significant' "
            "counts the workloads whose difference from the default mode's throughput is "
            "significant (95% interval excluding 1): where it is few, the choice among "
            "reproducible modes rests on noise and the default mode serves as well."
        ),
        Table(
            [
                "suite",
                "recommended mode",
                "throughput vs default",
                "significant",
                "cost vs fastest",
                "fastest mode",
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
    rows: list[list[str | Code]] = []
    for x in r.to_dict("records"):
        same = "–"
        if x["compare_with"]:
            same = {True: "yes", False: "no", None: "not comparable"}[x["same_bits"]]
            same += f" ({x['compare_with']})"
        rows.append([x["recipe"], x["variant"], x["verdict"], same,
                     _num(x["items_per_second"], ".4g")])  # fmt: skip
    return [
        Heading(2, "Recipes"),
        Para(
            "Each seeding recipe as an experiment. detbench did not seed these workloads: each "
            "starts from the state a fresh process has (every generator seeded from OS entropy) "
            "and seeds, or fails to seed, as its variant says. 'Same bits' compares a variant's "
            "results with another workload's (a resumed run with the uninterrupted one, a traced "
            "model with the eager one); items/s is in the default mode."
        ),
        Table(["recipe", "variant", "bitwise run to run", "same bits as", "items/s"], rows),
    ]


def workload_recommendation_table(rec: pd.DataFrame, suite: str) -> Table:
    rec = rec[(rec["suite"] == suite) & (rec["workload"] != "*")]
    rows: list[list[str | Code]] = []
    for r in rec.to_dict("records"):
        rows.append([
            r["workload"], r["mode"] or "none reproducible",
            _num(r["relative_throughput"], ".2f") + ("x" if r["mode"] else ""),
            _pct(r["cost_vs_fastest"]), r["fastest_mode"] or "–",
        ])  # fmt: skip
    return Table(
        [
            "workload",
            "fastest reproducible mode",
            "vs default",
            "cost vs fastest",
            "fastest mode",
        ],
        rows,
        caption=f"{suite}: recommendation per workload",
    )


def full_table(v: pd.DataFrame, suite: str, costs: pd.DataFrame) -> Table:
    """``v``: ``analysis.verdicts`` of the whole run."""
    v = v[v["suite"] == suite]
    c = costs[costs["suite"] == suite].set_index(["workload", "mode"]) if len(costs) else None
    rows: list[list[str | Code]] = []
    for r in v.to_dict("records"):
        key = (r["workload"], r["mode"])
        rel = ci = sig = noisy = "–"
        if c is not None and key in c.index:
            cr = c.loc[key]
            rel = _num(cr["relative_throughput"], ".3f")
            ci = f"[{_num(cr['ci_low'], '.3f')}, {_num(cr['ci_high'], '.3f')}]"
            sig = "yes" if cr["significant"] else "no"
            noisy = "noisy" if cr["noisy"] else ""
        verdict = str(r["verdict"])
        if verdict == "nondeterministic":
            verdict += f" ({r['distinct_fingerprints']} distinct of {r['ok']})"
        rows.append([
            r["workload"], r["mode"], verdict, f"{r['ok']}/{r['replicates']}",
            _num(r["max_abs_diff"], ".3g") if r["max_abs_diff"] is not None else "–",
            _num(r["items_per_second"], ".4g"), rel, ci, sig, noisy,
        ])  # fmt: skip
    return Table(
        [
            "workload",
            "mode",
            "verdict",
            "ok/replicates",
            "max abs diff",
            "items/s (median)",
            "vs default",
            "95% CI",
            "significant",
            "noise",
        ],
        rows,
        caption=f"{suite}: every workload and mode",
    )


def failure_table(df: pd.DataFrame) -> Table | None:
    bad = df[df["status"] != "ok"]
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


def warnings(v: pd.DataFrame, env: dict[str, Any], costs: pd.DataFrame) -> list[str]:
    """What a reader must know before trusting or citing the numbers."""
    out: list[str] = []
    facts = env_facts(env)
    options = env.get("options") or {}
    if facts["device"] == "cpu":
        out.append(
            "This run was on a CPU. The cuDNN flags have no effect there, so modes that differ "
            "only in them measure the same thing, and their throughput differences are noise. "
            "Run on a GPU for the costs that matter."
        )
    if not env.get("finished_utc"):
        out.append(
            "The run did not finish (interrupted or still running): the results are partial."
        )
    git = env.get("git") or {}
    if git.get("dirty"):
        out.append(
            f"The detbench checkout had uncommitted changes (commit {str(git.get('commit'))[:12]})."
        )
    modes = set(v["mode"])
    if DEFAULT_MODE.name not in modes:
        out.append(
            f"The {DEFAULT_MODE.name!r} mode was not run: there is no baseline for relative "
            "throughput, so costs and recommendations are missing."
        )
    det = {
        m for m in modes if m in {x.name for x in MODES} and get_mode(m).deterministic_algorithms
    }
    broken = v[(v["verdict"] == "nondeterministic") & v["mode"].isin(det)]
    for (suite, workload), g in broken.groupby(["suite", "workload"], sort=False):
        out.append(
            f"{suite}/{workload} was not bitwise reproducible even with deterministic algorithms "
            f"on ({', '.join(g['mode'])}): the nondeterminism comes from somewhere PyTorch's "
            "flags do not reach (seeding, threads, data order, the workload itself)."
        )
    ran = v[v["verdict"].isin(analysis.RAN)]
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        if not g["verdict"].isin(analysis.RAN).any():
            out.append(
                f"{suite}/{workload} ran in no mode ({', '.join(sorted(set(g['verdict'])))}): "
                "it is left out of its suite's recommendation."
            )
    failed = v[~v["verdict"].isin(analysis.RAN)]
    for status, g in failed.groupby("verdict", sort=False):
        out.append(f"{len(g)} (workload, mode) pairs ended as '{status}': see Failures.")
    single = ran[ran["verdict"] == "single"]
    if len(single):
        out.append(
            f"{len(single)} (workload, mode) pairs had only one successful replicate: their "
            "run-to-run behaviour is unknown."
        )
    if len(costs):
        noisy = int(costs["noisy"].sum())
        if noisy:
            out.append(
                f"{noisy} of {len(costs)} costs are marked noisy: a replicate's timing samples "
                f"had an interquartile range above {analysis.NOISY_IQR:.0%} of their median."
            )
        nonbase = costs[costs["mode"] != DEFAULT_MODE.name]
        insig = int((~nonbase["significant"]).sum())
        if insig:
            out.append(
                f"{insig} of {len(nonbase)} throughput differences from the default mode are not "
                "significant (the 95% interval contains 1)."
            )
    precision = (env.get("worker") or {}).get("precision") or {}
    if facts["device"] == "cuda" and (
        precision.get("cuda_matmul_allow_tf32") or precision.get("cudnn_allow_tf32")
    ):
        out.append(
            "TF32 was allowed (torch's defaults, left as they were: cuDNN "
            f"{precision.get('cudnn_allow_tf32')}, "
            f"cuBLAS {precision.get('cuda_matmul_allow_tf32')}):"
            " it changes float32 results against full precision, not their reproducibility."
        )
    if options.get("replicates", 3) < 3:
        out.append(
            f"Only {options.get('replicates')} replicates per mode: a rare nondeterministic "
            "outcome can go unseen; use 3 or more for a report you publish."
        )
    return out


def method_blocks(df: pd.DataFrame, env: dict[str, Any]) -> list[Block]:
    o = env.get("options") or {}
    stats = env.get("run_stats") or {}
    facts = env_facts(env)
    items = [
        f"Modes: {', '.join(o.get('modes') or [])}. Each mode is applied once in a fresh worker "
        "process before any work, and checked against what torch reports.",
        f"Replicates: {o.get('replicates')} per mode, each in its own fresh process; replicates "
        "are the outer loop and modes the inner one, so a slow period of the machine does not "
        "fall on one mode only.",
        f"Reproducibility: every generator is seeded with {o.get('seed')} before each workload "
        f"is built; then {o.get('fingerprint_steps')} steps (training workloads: their own "
        "count) are run and a sha256 taken over the dtype, shape and bytes of every output of "
        "every step. A (workload, mode) is reproducible when every replicate's fingerprint is "
        "equal; the maximum absolute difference is measured against the first replicate.",
        "Timing: torch.utils.benchmark.Timer.blocked_autorange with at least "
        f"{o.get('min_run_time')} s of samples after {o.get('warmup_steps')} warm-up steps, the "
        "device synchronised around each block; the figure per replicate is the median step "
        "time, and a mode's throughput is the median over replicates.",
        "Intervals: 95% percentile intervals of the throughput ratio against the default mode "
        "from 2000 two-level bootstrap resamples (replicates, then the timing samples within "
        "each), drawn independently for the mode and the default, with a fixed seed. A "
        "difference is significant when the interval excludes 1; a cost is noisy when a "
        f"replicate's samples have an IQR above {analysis.NOISY_IQR:.0%} of their median.",
        "Recommendations: the fastest mode reproducible in every replicate; per suite, the mode "
        "reproducible for every workload with the highest geometric mean throughput.",
        f"Profile {o.get('profile')} on {facts['device']}; {len(df)} records, started "
        f"{env.get('started_utc')}, finished {env.get('finished_utc') or 'never'}"
        + (
            f", resumed {len(env['resumed_utc'])} time(s) ({', '.join(env['resumed_utc'])}); "
            f"the last session took {_num(stats.get('wall'), '.0f')} s."
            if env.get("resumed_utc")
            else f"; {_num(stats.get('wall'), '.0f')} s."
        ),
    ]
    if "seeding" in df.columns and (df["seeding"] == "recipe").any():
        suites = sorted(set(df.loc[df["seeding"] == "recipe", "suite"]))
        items.append(
            f"Seeding in {', '.join(suites)}: not done by detbench. Those workloads start from "
            "the generators' state in a fresh process (seeded from OS entropy) and seed as "
            "their recipe says; see Recipes."
        )
    return [Heading(2, "Method"), Bullets(items)]


def environment_table(env: dict[str, Any]) -> Table:
    facts = env_facts(env)
    host = env.get("host") or {}
    worker = env.get("worker") or {}
    git = env.get("git") or {}
    collected = host.get("collect_env") or {}
    rows: list[list[str | Code]] = [[k, v if v is not None else "–"] for k, v in facts.items()]
    rows += [
        ["OS", str(collected.get("os") or host.get("platform") or "–")],
        ["CUBLAS_WORKSPACE_CONFIG (outside the modes)", str(worker.get("CUBLAS_WORKSPACE_CONFIG"))],
        ["precision settings", Code(", ".join(
            f"{k}={v}" for k, v in sorted((worker.get("precision") or {}).items())))],
        ["detbench commit", str(git.get("commit"))[:12] + (" (dirty)" if git.get("dirty") else "")],
    ]  # fmt: skip
    return Table(["", "value"], rows)


def build_blocks(df: pd.DataFrame, env: dict[str, Any], plots: list[Plot]) -> list[Block]:
    facts = env_facts(env)
    o = env.get("options") or {}
    device = facts["gpu"] if facts["device"] == "cuda" else f"CPU ({facts['cpu']})"
    suites = list(dict.fromkeys(df["suite"]))
    costs = analysis.costs(df) if DEFAULT_MODE.name in set(df["mode"]) else pd.DataFrame()
    v = analysis.verdicts(df)
    rec = analysis.recommendations(df)
    blocks: list[Block] = [
        Heading(1, f"detbench report: {device}, torch {facts['torch']}"),
        Para(
            f"{df['workload'].nunique()} workloads in {len(suites)} suites "
            f"({', '.join(suites)}) x {df['mode'].nunique()} modes x {o.get('replicates')} "
            f"replicates = {len(df)} records, profile {o.get('profile')}, on {device}. "
            f"Run started {env.get('started_utc')}."
        ),
    ]
    blocks += recommendation_blocks(rec, costs)
    blocks += recipe_blocks(df)
    warn = warnings(v, env, costs)
    blocks += [Heading(2, "Warnings"), Bullets(warn) if warn else Para("None.")]
    blocks.append(Heading(2, "Plots"))
    for suite in suites:
        for p in plots:
            if p.suite == suite:
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
        blocks.append(workload_recommendation_table(rec, str(suite)))
        blocks.append(full_table(v, str(suite), costs))
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
        from detbench.results import ResultsError

        raise ResultsError(f"{d}: results.jsonl holds no records yet")
    env = load_env(d) if (d / ENV_FILE).exists() else {}
    plots = write_plots(df, d / PLOTS_DIR)
    blocks = build_blocks(df, env, plots)
    title = next((b.text for b in blocks if isinstance(b, Heading)), "detbench report")
    md, page = d / REPORT_MD, d / REPORT_HTML
    write_text_atomic(md, to_markdown(blocks, d))
    write_text_atomic(page, to_html(blocks, title))
    return md, page
