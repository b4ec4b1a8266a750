"""The tables of the report's ``Batch invariance`` section (``detbench.report.invariance``):
the compact one (one row per workload and batch verdict), the full one (workload x mode) and
the cells they share with the section's sentences and its matrix of symbols.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from detbench.report.matrices import grouped_rows
from detbench.report.render import Code, Table, num


def verdict_cell(r: Mapping[Any, Any]) -> str:
    if not r.get("ran", True):
        return str(r["note"])  # "unsupported: <why>": it did not run
    if r["invariant"] is True:
        return "invariant"
    if r["invariant"] is False:
        first = r["first_variant_size"]
        return f"varies from batch {first}" if first is not None else "varies"
    return f"no verdict: {r['note']}"


def price_text(r: Mapping[Any, Any], key: str = "price") -> str:
    """``0.35x [0.30, 0.40]``: a price (``key``: ``price`` or ``setting_price``), with its 95%
    interval where there is one."""
    if r.get(key) is None:
        return "no throughput to compare"
    text = num(r[key], ".2f") + "x"
    low, high = r.get(f"{key}_low"), r.get(f"{key}_high")
    if low is not None and high is not None:
        text += f" [{num(low, '.2f')}, {num(high, '.2f')}]"
    return text


def _yes_no(x: Any) -> str:
    return ("yes" if x else "NO") if isinstance(x, (bool, np.bool_)) else "–"


def _distinct(r: Mapping[Any, Any]) -> str:
    if r["distinct_results"] is None:
        return "–"
    d = int(r["distinct_results"])
    what = (" completion" + ("s" if d != 1 else "")) if r["completion"] else ""
    return f"{d}{what} of {len(r['batch_sizes'])}"


def speed_text(r: Mapping[Any, Any]) -> str:
    return num(r["items_per_second"], ".4g") + (
        " tokens/s" if r["completion"] and r["items_per_second"] is not None else ""
    )


def suite_table(t: pd.DataFrame, suite: str) -> Table:
    """Workload x mode; the price columns only where the suite has an invariant reference, the
    setting's price only where the run has a mode with settings beside its base mode."""
    refs = bool(t["reference_of"].notna().any())
    variants = bool(t["base_mode"].notna().any())
    rows: list[list[Any]] = []
    for r in t.to_dict("records"):
        ref = r["reference_of"]
        name, backend = str(r["workload"]), r.get("sdpa_backend")
        if backend and str(backend) not in name:
            name += f" (sdpa {backend})"
        row = [
            name,
            r["mode"],
            "/".join(str(b) for b in r["batch_sizes"]) or "–",
            verdict_cell(r),
            _distinct(r),
            num(r["max_abs_diff"], ".3g") if r["max_abs_diff"] is not None else "–",
            speed_text(r),
        ]
        if refs:
            row += [
                f"{price_text(r)} vs {ref}" if ref else "–",
                _yes_no(r["reference_invariant"]) if ref else "–",
            ]
        if variants:
            row.append(
                f"{price_text(r, 'setting_price')} vs {r['base_mode']}" if r["base_mode"] else "–"
            )
        rows.append(row)
    header = [
        "workload",
        "mode",
        "batch sizes",
        "row 0 across batch sizes",
        "distinct row-0 results (of K sizes)",
        "max abs diff",
        "items/s (median)",
    ]
    if refs:
        header += ["price of invariance (throughput vs base)", "reference invariant"]
    if variants:
        header.append("price of the setting (throughput vs base mode)")
    return Table(header, rows, caption=f"{suite}: batch invariance per workload and mode")


def matrix_symbol(r: Mapping[Any, Any]) -> str:
    """A mode's batch verdict in a matrix cell: = invariant, ≠N varies from batch N, u did not
    run, ? no verdict."""
    if not r.get("ran", True):
        return "u"
    if r["invariant"] is True:
        return "="
    if r["invariant"] is False:
        first = r["first_variant_size"]
        return f"≠{first}" if first is not None else "≠"
    return "?"


def _short(x: float, fmt: str) -> str:
    return num(x, fmt).replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


def value_range(values: list[Any], fmt: str, unit: str = "") -> str:
    """``lo–hi`` (one value where they are equal) in ``fmt``, exponents without padding."""
    xs = sorted(float(x) for x in values if x is not None and num(x) != "–")
    if not xs:
        return "–"
    lo, hi = _short(xs[0], fmt), _short(xs[-1], fmt)
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def _sizes_text(sizes: Any) -> str:
    sizes = [str(b) for b in sizes]
    if len(sizes) > 5:
        return f"{sizes[0]}–{sizes[-1]} ({len(sizes)} sizes)"
    return "/".join(sizes) or "–"


def compact_table(t: pd.DataFrame, suite: str, baseline: str) -> Table:
    """One row per workload and batch verdict: the modes that share it ("all 10 modes" when
    every mode does), its numbers over those modes, the price in the baseline mode where it is
    among them (else the first), with its interval."""
    refs = bool(t["reference_of"].notna().any())
    n = int(t["mode"].nunique())
    groups = t.assign(_v=[verdict_cell(r) for r in t.to_dict("records")])

    def row(first: Mapping[Any, Any], where: str) -> list[str | Code]:
        g = groups[(groups["workload"] == first["workload"]) & (groups["_v"] == first["_v"])]
        base = g[g["mode"] == baseline]
        r = (base if len(base) else g).to_dict("records")[0]
        name, backend = str(r["workload"]), r.get("sdpa_backend")
        if backend and str(backend) not in name:
            name += f" (sdpa {backend})"
        cells: list[str | Code] = [
            name,
            where,
            _sizes_text(r["batch_sizes"]),
            str(first["_v"]),
            _distinct(r),
            value_range(list(g["max_abs_diff"]), ".3g"),
            value_range(list(g["items_per_second"]), ".3g"),
        ]
        if refs:
            ref = r["reference_of"]
            price = f"{price_text(r)} vs {ref} ({r['mode']})" if ref else "–"
            cells += [price, _yes_no(r["reference_invariant"]) if ref else "–"]
        return cells

    rows = grouped_rows(groups, n, lambda r: str(r["_v"]), row)
    header = [
        "workload",
        "modes",
        "batch sizes",
        "row 0 across batch sizes",
        "distinct row-0 results",
        "max abs diff",
        "items/s",
    ]
    if refs:
        header += ["price of invariance", "reference invariant"]
    return Table(header, rows, caption=f"{suite}: batch invariance, one row per verdict")
