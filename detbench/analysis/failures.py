"""What failed in a run, in words: each failing workload's first error line (the summary's cells
only say ``error``), and whether every record of a set of workloads failed."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from detbench.store.record import user_frame
from detbench.store.schema import Status

#: The statuses that are a failure (``unsupported`` is a fact of the machine, recorded as data).
FAILED = (Status.ERROR, Status.CRASHED, Status.TIMEOUT, Status.OOM)
#: Characters of a message shown on the console; the report and results.jsonl have it whole.
WIDTH = 160


def first_line(message: object) -> str:
    """The first non-empty line of a record's message, cut to ``WIDTH`` characters."""
    lines = [ln.strip() for ln in str(message or "").splitlines() if ln.strip()]
    text = lines[0] if lines else "(no message)"
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def failure_lines(df: pd.DataFrame) -> list[str]:
    """One line per failing workload: its statuses, how many records, which modes, its first
    failure's first line, and where in the user's code it was raised."""
    if df.empty or "status" not in df:
        return []
    bad = df[df["status"].isin([str(s) for s in FAILED])]
    lines = []
    for (suite, workload), g in bad.groupby(["suite", "workload"], sort=False):
        total = int(((df["suite"] == suite) & (df["workload"] == workload)).sum())
        firsts = list(dict.fromkeys(first_line(m) for m in g["message"]))
        modes = list(dict.fromkeys(str(m) for m in g["mode"]))
        where = ", ".join(modes[:3]) + (f" and {len(modes) - 3} more" if len(modes) > 3 else "")
        statuses = "/".join(dict.fromkeys(str(s) for s in g["status"]))
        more = f" (and {len(firsts) - 1} other messages)" if len(firsts) > 1 else ""
        frames = g.get("traceback", ())
        raised = next((f for t in frames if (f := user_frame(t))), None)
        at = f" [raised at {raised}]" if raised else ""
        lines.append(
            f"  {suite}/{workload}: {statuses} in {len(g)} of {total} records ({where}): "
            f"{firsts[0]}{more}{at}"
        )
    return lines


def failures_text(df: pd.DataFrame) -> str:
    """The failing workloads as a block for the console, or "" when nothing failed."""
    lines = failure_lines(df)
    head = "failed (the first line of each message; the whole in results.jsonl):\n"
    return head + "\n".join(lines) if lines else ""


def all_failed(df: pd.DataFrame, keys: Iterable[str]) -> bool:
    """Whether ``keys`` (SUITE/NAME) have records and every one of them failed."""
    wanted = set(keys)
    if df.empty or not wanted:
        return False
    mine = df[(df["suite"] + "/" + df["workload"]).isin(wanted)]
    return not mine.empty and bool(mine["status"].isin([str(s) for s in FAILED]).all())
