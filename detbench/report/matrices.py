"""Compact matrices instead of long tables: a verdict the same in every mode is said once ("all
10 modes"); where a workload's verdicts differ, a workload x mode matrix of symbols and its key."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.report.render import Block, Code, Para, Table

#: Short symbols of the bitwise verdicts (``analysis.MARKS`` with one-letter failures).
SYMBOLS = {
    "reproducible": "=",
    "nondeterministic": "≠",
    "single": "?",
    "unsupported": "u",
    "oom": "oom",
    "error": "e",
    "timeout": "t",
    "crashed": "x",
    "settings_changed": "chg",
}
WORDS = {
    "=": "bitwise reproducible",
    "≠": "not reproducible",
    "?": "one replicate only",
    "u": "unsupported",
    "oom": "out of memory",
    "e": "error",
    "t": "timeout",
    "x": "crashed",
    "chg": "the workload changed a setting",
}


def all_modes(n: int) -> str:
    return f"all {n} modes" if n > 1 else "its one mode"


def split(cells: pd.DataFrame, key: str = "symbol") -> tuple[pd.DataFrame, pd.DataFrame]:
    """``cells`` split into the workloads whose ``key`` is the same in every mode, and the rest."""
    n = cells["mode"].nunique()
    same = cells.groupby("workload", sort=False)[key].agg(lambda s: s.nunique() == 1)
    full = cells.groupby("workload", sort=False)["mode"].nunique() == n
    agree = set(same.index[same & full])
    return cells[cells["workload"].isin(agree)], cells[~cells["workload"].isin(agree)]


def symbol_matrix(cells: pd.DataFrame, modes: Sequence[str], caption: str) -> Table:
    """Workloads (rows) x modes (columns M0, M1, ...) of ``cells["symbol"]``."""
    grid = cells.pivot(index="workload", columns="mode", values="symbol")
    order = list(dict.fromkeys(cells["workload"]))
    grid = grid.reindex(index=order, columns=list(modes))
    rows: list[list[str | Code]] = [
        [str(w), *("" if pd.isna(x) else str(x) for x in r)] for w, r in grid.iterrows()
    ]
    return Table(["workload", *(f"M{i}" for i in range(len(modes)))], rows, caption=caption)


def key_para(
    symbols: Sequence[str], modes: Sequence[str], words: Mapping[str, str] = WORDS
) -> Para:
    used = [s for s in dict.fromkeys(symbols) if s]
    return Para(
        "Key: "
        + ", ".join(f"{s} {words.get(s, s)}" for s in used)
        + ". Columns: "
        + ", ".join(f"M{i} {m}" for i, m in enumerate(modes))  # M0 default, M1 bench, ...
        + "."
    )


def verdict_blocks(v: pd.DataFrame, suite: str) -> list[Block]:
    """The bitwise verdicts of ``suite`` (``analysis.verdicts``), compacted."""
    g = v[v["suite"] == suite]
    if g.empty:
        return []
    modes = analysis.ordered_modes(g["mode"])
    cells = g.assign(symbol=g["verdict"].map(lambda x: SYMBOLS.get(str(x), str(x))))
    same, differ = split(cells)
    out: list[Block] = []
    if len(same):
        first = same.drop_duplicates("workload")
        rows: list[list[str | Code]] = []
        for verdict, ws in first.groupby("verdict", sort=False):
            names = list(ws["workload"])
            rows.append(
                [f"{verdict} in {all_modes(len(modes))}", str(len(names)), ", ".join(names)]
            )
        caption = f"{suite}: the same verdict in every mode"
        out.append(Table(["verdict", "workloads", "which"], rows, caption=caption))
    if len(differ):
        out.append(symbol_matrix(differ, modes, f"{suite}: where the verdict depends on the mode"))
        out.append(key_para(list(differ["symbol"]), modes))
    return out


def grouped_rows(
    cells: pd.DataFrame,
    n_modes: int,
    label: Callable[[Mapping[Any, Any]], str],
    row: Callable[[Mapping[Any, Any], str], list[str | Code]],
) -> list[list[str | Code]]:
    """One row per workload and distinct ``label`` of its modes: ``row(first record, modes)``."""
    out: list[list[str | Code]] = []
    for _, g in cells.groupby("workload", sort=False):
        g = g.assign(_label=[label(r) for r in g.to_dict("records")])
        for _, m in g.groupby("_label", sort=False):
            modes = list(map(str, m["mode"]))
            where = all_modes(n_modes) if len(modes) == n_modes else ", ".join(modes)
            out.append(row(m.to_dict("records")[0], where))
    return out
