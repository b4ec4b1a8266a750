"""``detbench report DIR``: ``DIR/report.md`` and a self-contained ``DIR/report.html``, both
rendered from one list of blocks (``detbench.report.sections``'; a merged set's from
``detbench.report.across``, an exec run's from ``detbench.report.execsection``). Everything in
them is computed from ``results.jsonl`` and ``env.json``; the report files and ``plots/`` are
derived and rewritten on every call.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from detbench.locate import report as locate_report
from detbench.report import across as across_report
from detbench.report import attribution, execsection, invariance, tradeoff
from detbench.report.plots import PLOTS_SUFFIXES, Plot, write_plots
from detbench.report.render import Block, Heading, to_html, to_markdown
from detbench.report.sections import ReportRun, build, environment
from detbench.store.paired import iter_paired, load_paired
from detbench.store.results import ENV_FILE, ResultsError, load_env, load_results, write_text_atomic

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


def load_run(directory: str | Path, df: pd.DataFrame | None = None) -> ReportRun:
    """The run in ``directory`` as the report and the console read it: its records (``df``:
    ``load_results(directory)`` where the caller has it), its env.json with the lines of its
    paired phase, and its ``paired.jsonl``."""
    d = Path(directory)
    df = load_results(d) if df is None else df  # one clear line on a missing or malformed file
    if df.empty:
        raise ResultsError(f"{d}: results.jsonl holds no records yet")
    env = load_env(d) if (d / ENV_FILE).exists() else {}
    env["paired_lines"] = list(iter_paired(d))  # what the paired phase timed so far
    return ReportRun(df, env, lines=load_paired(d))


def write_report(directory: str | Path, run: ReportRun | None = None) -> tuple[Path, Path]:
    """Write ``report.md``, ``report.html`` and ``plots/`` for the run in ``directory``;
    ``run``: ``load_run(directory)`` where the caller has it (its analyses are reused)."""
    d = Path(directory)
    if run is None:
        run = load_run(d)
    if run.env.get("machines"):  # a set of runs from several machines (detbench merge)
        return _write(d, across_report.set_blocks(d))
    exec_doc = execsection.load(d)  # a detbench exec run: a page about one command
    if exec_doc is not None:
        _remove_stale(d / PLOTS_DIR, [])
        return _write(d, execsection.exec_blocks(exec_doc) + environment(run))
    run.env["located"] = locate_report.load(d)  # what run --locate found, kept beside env.json
    df, env = run.df, run.env
    plots = tradeoff.write_plots(run.points, run.baseline, d / PLOTS_DIR)
    plots += write_plots(df, d / PLOTS_DIR, run.costs)
    plots += attribution.write_plots(df, env, d / PLOTS_DIR)
    plots += invariance.write_plots(df, d / PLOTS_DIR)
    _remove_stale(d / PLOTS_DIR, plots)
    run.plots = plots
    return _write(d, build(run))


def _write(d: Path, blocks: list[Block]) -> tuple[Path, Path]:
    title = next((b.text for b in blocks if isinstance(b, Heading)), "detbench report")
    md, page = d / REPORT_MD, d / REPORT_HTML
    write_text_atomic(md, to_markdown(blocks, d))
    write_text_atomic(page, to_html(blocks, title))
    return md, page


def _remove_stale(directory: Path, plots: list[Plot]) -> None:
    """Remove the figures an earlier report wrote that this one does not (``plots/`` is the
    report's and rewritten each time): a stale figure would read as this run's."""
    keep = {p.png.name for p in plots} | {p.svg.name for p in plots}
    for f in directory.glob("*"):
        if f.suffix in PLOTS_SUFFIXES and f.name not in keep:
            f.unlink()
