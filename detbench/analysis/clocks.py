"""The clock state a rate was measured at, in a few words beside each rate: the record's clock
mode and the SM clock during its counted samples; per (suite, workload, mode), one state with
its clock range where the replicates agree, each state with its count where they do not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench.store.schema import Status

#: The state of a rate measured on a CPU.
CPU = "n/a (CPU)"


def record_state(timing: Mapping[str, Any] | None, device: str | None) -> str:
    """One record's clock state, without the clock: "side by side, no hold" (paired: the modes
    share their clocks), else the clock mode an earlier record names ("burst" for none)."""
    if not timing:
        return "not timed"
    if not str(device or "").startswith("cuda") and timing.get("clock") != "cuda-event":
        return CPU
    mode = timing.get("clock_mode") or "burst"
    return "side by side, no hold" if mode == "paired" else str(mode)


def sm_clock(timing: Mapping[str, Any] | None) -> float | None:
    """The SM clock (MHz) during the counted samples (NVML's median, else its end reading)."""
    clocks = (timing or {}).get("gpu_clocks") or {}
    sm = clocks.get("sm_clock_mhz") or {}
    value = sm.get("median") if sm.get("median") is not None else sm.get("end")
    return float(value) if value is not None else None


def _mhz(values: list[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return f", {lo:.0f} MHz" if lo == hi else f", {lo:.0f}-{hi:.0f} MHz"


def clock_states(df: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """(suite, workload, mode) -> the clock state of its successful records' rates."""
    if df.empty or "timing" not in df.columns:
        return {}
    ok = df[df["status"] == Status.OK] if "status" in df.columns else df
    out: dict[tuple[str, str, str], str] = {}
    for group, g in ok.groupby(["suite", "workload", "mode"], sort=False):
        key = (str(group[0]), str(group[1]), str(group[2]))
        rep = g["timed_as"].dropna() if "timed_as" in g.columns else pd.Series([], dtype=object)
        if len(rep) and not any(g["timing"]):  # the paired phase timed another mode for it
            out[key] = f"timed as {rep.iloc[0]}: the same computation here"
            continue
        devices = g["device"] if "device" in g.columns else pd.Series([None] * len(g))
        pairs = list(zip(g["timing"], devices, strict=True))
        states = Counter(record_state(t, d) for t, d in pairs)
        clocks = [c for c in (sm_clock(t) for t, _ in pairs) if c is not None]
        each = "; ".join(f"{s} ({n}/{len(g)})" for s, n in states.most_common())
        out[key] = (next(iter(states)) if len(states) == 1 else each) + _mhz(clocks)
    return out
