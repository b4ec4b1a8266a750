"""``detbench report DIR``: ``DIR/report.md``, ``DIR/report.html`` and ``plots/``, from one list
of blocks, computed from the run's files and rewritten on every call."""

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
    """The run in ``directory`` as the report and the console read it."""
    d = Path(directory)
    df = load_results(d) if df is None else df  # one clear line on a missing or malformed file
    if df.empty:
        raise ResultsError(f"{d}: results.jsonl holds no records yet")
    env = load_env(d) if (d / ENV_FILE).exists() else {}
    env["paired_lines"] = list(iter_paired(d))  # what the paired phase timed so far
    return ReportRun(df, env, lines=load_paired(d))


def write_report(directory: str | Path, run: ReportRun | None = None) -> tuple[Path, Path]:
    """Write the report of ``directory``; ``run``: ``load_run(directory)`` where known."""
    d = Path(directory)
    run = load_run(d) if run is None else run
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
    """Remove an earlier report's figures that this one lacks: they would read as this run's."""
    keep = {p.png.name for p in plots} | {p.svg.name for p in plots}
    for f in directory.glob("*"):
        if f.suffix in PLOTS_SUFFIXES and f.name not in keep:
            f.unlink()
