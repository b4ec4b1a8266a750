"""Mode labels and the records that count: the order of the modes, the baseline every relative
throughput is measured against, and the records left out of every verdict and figure because
their workload changed a setting behind detbench's back."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from detbench.core.errors import DetbenchError
from detbench.core.modes import DEFAULT_MODE, MODES, Mode, get_mode

_ORDER = {m.name: i for i, m in enumerate(MODES)}


def mode_of(label: str) -> Mode | None:
    """The mode a record's label names; None for a label this detbench cannot parse."""
    try:
        return get_mode(str(label))
    except DetbenchError:
        return None


def mode_key(label: str) -> tuple[int, str]:
    """Sort key of a mode label: its base mode's place among the 10, then the label."""
    return _ORDER.get(str(label).partition("[")[0], len(_ORDER)), str(label)


def in_report_order(
    rows: pd.DataFrame, workloads: Iterable[Any], variants_after: bool = False
) -> pd.DataFrame:
    """``rows`` by suite, workload in the order of ``workloads``, then ``mode_key``;
    ``variants_after``: a mode's variants by their number of settings, then label."""
    keys = rows["mode"].map(mode_key)
    order = {w: i for i, w in enumerate(dict.fromkeys(workloads))}
    label = (lambda k: (k[1].count("="), k[1])) if variants_after else (lambda k: k[1])
    by = {"_w": rows["workload"].map(order), "_o": keys.map(lambda k: k[0]), "_l": keys.map(label)}
    return (
        rows.assign(**by)
        .sort_values(["suite", "_w", "_o", "_l"], kind="stable")
        .drop(columns=list(by))
        .reset_index(drop=True)
    )


def run_device(df: pd.DataFrame) -> str | None:
    """The device the records say they ran on; None where they do not say, or disagree."""
    if "device" not in df.columns:
        return None
    devices = set(df["device"].dropna().astype(str))
    return devices.pop() if len(devices) == 1 else None


def simplicity_key(label: str) -> tuple[int, tuple[int, str]]:
    """Fewest changes from torch's default first, then ``mode_key``."""
    mode = mode_of(label)
    changes = None if mode is None else mode.changes()
    return (len(changes) if changes is not None else 1 << 20), mode_key(label)


def ordered_modes(labels: Iterable[Any]) -> list[str]:
    """The distinct labels of ``labels`` in ``mode_key`` order."""
    return sorted(dict.fromkeys(str(x) for x in labels), key=mode_key)


def baseline_mode(labels: Iterable[Any]) -> str | None:
    """The mode every relative throughput is measured against: ``default``, else the mode
    based on it with the fewest overrides (``--set``), else the first by ``mode_key``."""
    modes = ordered_modes(labels)
    if DEFAULT_MODE.name in modes:
        return DEFAULT_MODE.name
    on_default = [
        (len(x.settings), mode_key(m), m)
        for m in modes
        if (x := mode_of(m)) is not None and x.base_name == DEFAULT_MODE.name
    ]
    if on_default:
        return min(on_default)[2]
    return modes[0] if modes else None


def changed_settings(value: Any) -> list[str]:
    """A record's ``settings_changed`` as a list of names ([] for none or not recorded)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(x) for x in value]
    return []


def changed_mask(df: pd.DataFrame) -> pd.Series:
    """The records whose workload changed a setting the mode applied: they count nowhere."""
    if "settings_changed" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["settings_changed"].map(lambda x: bool(changed_settings(x))).astype(bool)


def counted(df: pd.DataFrame) -> pd.DataFrame:
    """The records of ``df`` that count (see ``changed_mask``)."""
    mask = changed_mask(df)
    return df[~mask] if mask.any() else df
