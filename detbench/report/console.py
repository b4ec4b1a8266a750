"""What a run prints when it ends, from the ``ReportRun`` its report is written from, so the two
say the same thing in the same words."""

from __future__ import annotations

from detbench.analysis import cause, recommendation_text, samebits, summary_table
from detbench.analysis.runstate import run_state
from detbench.report import answer
from detbench.report.aa_check import aa_sentence, rests_sentence
from detbench.report.conditions import warnings
from detbench.report.sections import ReportRun


def summary_text(r: ReportRun) -> str:
    """The run's summary: verdicts and costs, the answer, and the report's sentences on them."""
    same = samebits.text(r.df)
    why = cause.text(r.df, r.verdicts)
    cost = answer.price_text(r.verdicts, r.points, r.env, r.baseline, r.device)
    rests = rests_sentence(r.costs[r.costs["mode"] != r.baseline]) if len(r.costs) else ""
    return (
        summary_table(r.df, r.verdicts, r.costs)[1]
        + "\n\n"
        + recommendation_text(r.df, r.rec, r.verdicts)
        + (f"\n{cost}" if cost else "")
        + f"\n{aa_sentence(r.lines, r.baseline)}"  # the report's A/A line, word for word
        + (f"\n{rests}" if rests else "")
        + (f"\n\n{why}" if why else "")
        + (f"\n\n{same}" if same else "")
        + f"\n\n{run_state(r.df, r.env).line()}"
    )


def warnings_text(r: ReportRun) -> str:
    """The report's Warnings, one ``WARNING:`` line each."""
    said = warnings(r.df, r.verdicts, r.env, r.costs)
    return "\n".join(f"WARNING: {w}" for w in said)
