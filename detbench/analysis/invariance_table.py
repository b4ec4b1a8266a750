"""The batch-invariance table of a run's records (``table``), which ``report.invariance`` draws."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import stats
from detbench.analysis.cost_intervals import replicate_samples
from detbench.analysis.labels import counted, in_report_order, mode_of
from detbench.store.schema import Status

#: The params key that names the workload a reference computes invariantly.
REFERENCE_KEY = "invariant_reference_of"
#: The params key of a workload that decodes tokens: its results are completions, items tokens.
COMPLETION_KEY = "new_tokens"
N_BOOT = stats.N_BOOT


def _sized(df: pd.DataFrame) -> pd.DataFrame:
    """The records that count of the workloads with a batch verdict, note or size anywhere."""
    if df.empty or "batch_invariant" not in df.columns:
        return df.iloc[:0]
    df = counted(df)
    mask = df["batch_invariant"].notna()
    for col in ("batch_note", "batch_size"):
        if col in df.columns:
            mask |= df[col].notna()
    keys = set(zip(df.loc[mask, "suite"], df.loc[mask, "workload"], strict=True))
    return df[[k in keys for k in zip(df["suite"], df["workload"], strict=True)]]


def _reference_of(params: Any) -> str | None:
    if isinstance(params, dict) and params.get(REFERENCE_KEY):
        return str(params[REFERENCE_KEY])
    return None


def _sizes(values: pd.Series) -> tuple[int, ...]:
    out: set[int] = set()
    for x in values:
        if isinstance(x, dict):
            out.update(int(k) for k in x)
    return tuple(sorted(out))


def short(message: Any, n: int = 90) -> str:
    """A failure message's first sentence of its first line, at most ``n`` characters."""
    text = str(message).strip().splitlines()[0] if str(message).strip() else ""
    text = text.split(". ")[0].rstrip(".")
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _verdict(g: pd.DataFrame) -> tuple[bool | None, str | None]:
    """(invariant, note): False if any ok replicate said so, True if all said True, else None."""
    ok = g[g["status"] == Status.OK]
    said = [x for x in ok["batch_invariant"] if isinstance(x, (bool, np.bool_))]
    if any(not x for x in said):
        return False, None
    if ok.empty:
        status = str(g["status"].mode().iloc[0]) if len(g) else "no records"
        msgs = [x for x in g.get("message", []) if x is not None and str(x) not in ("", "nan")]
        return None, status + (f": {short(msgs[0])}" if msgs else "")
    if said and len(said) == len(ok):
        return True, None
    notes = [str(x) for x in g.get("batch_note", pd.Series(dtype=object)).dropna()]
    return None, notes[0] if notes else "no verdict in some replicates"


def _items_per_step(g: pd.DataFrame) -> float:
    if "items_per_step" in g.columns:
        v = pd.to_numeric(g["items_per_step"], errors="coerce").dropna()
        if len(v):
            return float(v.median())
    return 1.0


def _price(
    ref: pd.DataFrame, base: pd.DataFrame, name: str, seed: int, n_boot: int
) -> tuple[float, float, float]:
    """The reference's items/s over the base's, with a 95% interval where both have samples."""
    ref, base = ref[ref["status"] == Status.OK], base[base["status"] == Status.OK]
    a, b = replicate_samples(ref), replicate_samples(base)
    if a and b:
        r = stats.ratio(a, b, name, seed, n_boot)
        scale = _items_per_step(ref) / _items_per_step(base)
        if scale != 1.0:
            r = r.scaled(scale)
        return r.point, r.low, r.high
    ra = pd.to_numeric(ref["items_per_second"], errors="coerce")
    rb = pd.to_numeric(base["items_per_second"], errors="coerce")
    if ra.notna().any() and rb.notna().any() and float(rb.median()) > 0:
        return float(ra.median() / rb.median()), math.nan, math.nan
    return math.nan, math.nan, math.nan


def _none(x: float) -> float | None:
    return None if math.isnan(x) else x


def base_mode_of(mode: str, present: Collection[str] = ()) -> str | None:
    """The mode of ``present`` that a mode with settings is a variant of: same base, the most of
    its settings but not all (else the plain base mode). None for a plain mode."""
    m = mode_of(mode)
    if m is None:
        base, bracket, _ = str(mode).partition("[")
        return base if bracket else None
    if not m.settings:
        return None
    mine = set(m.settings)
    best, most = m.base_name, -1
    for other in present:
        o = mode_of(other)
        if o is None or o.base_name != m.base_name or not set(o.settings) < mine:
            continue
        if len(o.settings) > most:
            best, most = str(other), len(o.settings)
    return best


def _row(
    suite: Any, workload: Any, mode: Any, g: pd.DataFrame, invariant: bool | None, note: str | None
) -> dict[str, Any]:
    """``table``'s row for the records ``g`` of one (suite, workload, mode), prices None."""
    ok = g[g["status"] == Status.OK]
    first = pd.to_numeric(ok["batch_first_variant_size"], errors="coerce").dropna()
    diff = pd.to_numeric(ok["batch_max_abs_diff"], errors="coerce").dropna()
    col = "batch_distinct_results"
    distinct = pd.to_numeric(ok[col], errors="coerce").dropna() if col in ok else ()
    params = g["params"].iloc[0] if "params" in g.columns else None
    ips = pd.to_numeric(ok["items_per_second"], errors="coerce").dropna()
    base_name = _reference_of(params)
    return {
        "suite": suite,
        "workload": workload,
        "mode": mode,
        "invariant": invariant,
        "note": note,
        "ran": len(ok) > 0,
        "first_variant_size": int(first.min()) if len(first) else None,
        "max_abs_diff": float(diff.max()) if len(diff) else None,
        "batch_sizes": _sizes(g["batch_same_as_smallest"]) if "batch_same_as_smallest" in g else (),
        "distinct_results": int(max(distinct)) if len(distinct) else None,
        "completion": isinstance(params, dict) and COMPLETION_KEY in params,
        "sdpa_backend": params.get("sdpa_backend") if isinstance(params, dict) else None,
        "items_per_second": float(ips.median()) if len(ips) else None,
        "replicates": len(ok),
        "reference_of": base_name,
        "price": None,
        "price_low": None,
        "price_high": None,
        "reference_invariant": None,
        "base_invariant": None,
        "base_mode": None,
        "base_mode_invariant": None,
        "setting_price": None,
        "setting_price_low": None,
        "setting_price_high": None,
        "deterministic_algorithms": bool(g["deterministic_algorithms"].iloc[0])
        if "deterministic_algorithms" in g.columns
        else None,
    }


def table(df: pd.DataFrame, n_boot: int = N_BOOT, seed: int = stats.SEED) -> pd.DataFrame:
    """One row per (suite, workload, mode) of the workloads that declare batch sizes: its
    invariance verdict and measurements; for an invariant reference (params ``REFERENCE_KEY``)
    its ``price`` against its base workload in the same mode; for a mode with settings its
    ``setting_price`` against its base mode (``base_mode_of``). Prices have 95% intervals."""
    s = _sized(df)
    if s.empty:
        return pd.DataFrame()
    groups = {k: g for k, g in s.groupby(["suite", "workload", "mode"], sort=False)}
    verdicts = {k: _verdict(g) for k, g in groups.items()}
    modes = [str(m) for m in dict.fromkeys(s["mode"])]
    rows: list[dict[str, Any]] = []
    for (suite, workload, mode), g in groups.items():
        invariant, note = verdicts[(suite, workload, mode)]
        row = _row(suite, workload, mode, g, invariant, note)
        base_name = row["reference_of"]
        if base_name is not None:
            row["reference_invariant"] = invariant
            base = groups.get((suite, base_name, mode))
            if base is not None:
                row["base_invariant"] = verdicts[(suite, base_name, mode)][0]
                name = stats.key(f"{suite}/{workload}", mode, f"{suite}/{base_name}", mode)
                price = _price(g, base, name, seed, n_boot)
                row["price"], row["price_low"], row["price_high"] = map(_none, price)
        parent = base_mode_of(str(mode), modes)
        if parent is not None and (suite, workload, parent) in groups:
            row["base_mode"] = parent
            row["base_mode_invariant"] = verdicts[(suite, workload, parent)][0]
            name = stats.comparison_key(suite, workload, mode, parent)
            price = _price(g, groups[(suite, workload, parent)], name, seed, n_boot)
            names = ("setting_price", "setting_price_low", "setting_price_high")
            row.update(zip(names, map(_none, price), strict=True))
        rows.append(row)
    out = pd.DataFrame(rows, dtype=object)
    # A mode before its variants: fewer settings first, then the label.
    return in_report_order(out, s["workload"], variants_after=True)
