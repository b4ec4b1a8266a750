"""The verdict ``same bits across GPUs`` and its section, for a run on several devices side by
side (``detbench run --devices``). True: every ok replicate on every device gave the same bits;
False: some two differ (``note``: whether each device agreed with itself); None: no verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis.labels import in_report_order
from detbench.report.render import Block, Heading, Para, Table
from detbench.store.schema import Status

#: The verdict's name, as the report calls it.
VERDICT = "same bits across GPUs"


def _ok(g: pd.DataFrame) -> pd.DataFrame:
    """A group's records that voted: ok, fingerprinted, and saying where they ran."""
    return g[(g["status"] == Status.OK) & g["fingerprint"].notna() & g["device_name"].notna()]


def _verdict(g: pd.DataFrame) -> tuple[bool | None, str | None]:
    ok = _ok(g)
    devices = sorted(set(ok["device_name"]))
    if ok.empty:
        return None, f"did not run ({', '.join(sorted(set(g['status'].astype(str))))})"
    if len(ok) < 2:
        return None, "one ok replicate"
    if len(devices) < 2:
        return None, f"ran on {devices[0]} only"
    if ok["fingerprint"].nunique() == 1:
        return True, None
    if all(d["fingerprint"].nunique() == 1 for _, d in ok.groupby("device_name")):
        return False, "each device gave the same bits every time, but not the others' bits"
    return False, "the replicates differ on one device too (run-to-run nondeterminism)"


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (suite, workload, mode): ``same_bits`` and ``note``, over its ok records."""
    if df.empty or "device_name" not in df.columns:
        return pd.DataFrame()
    df = analysis.counted(df)
    rows: list[dict[str, Any]] = []
    for (suite, workload, mode), g in df.groupby(["suite", "workload", "mode"], sort=False):
        same, note = _verdict(g)
        ok = _ok(g)
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "mode": mode,
                "same_bits": same,
                "note": note,
                "devices": tuple(sorted(set(ok["device_name"]))),
                "replicates": len(ok),
                "fingerprints": int(ok["fingerprint"].nunique()),
            }
        )
    out = pd.DataFrame(rows, dtype=object)
    return in_report_order(out, df["workload"])


def _cell(r: Mapping[Any, Any]) -> str:
    if r["same_bits"] is True:
        return "same bits"
    if r["same_bits"] is False:
        return f"DIFFERENT bits: {r['note']}"
    return f"no verdict: {r['note']}"


def _device_facts(names: list[str], env: dict[str, Any]) -> str:
    workers = env.get("device_workers") or {}
    parts = []
    for n in names:
        w = workers.get(n) or {}
        if w.get("gpu_name"):
            sm = f", {w['sm_count']} SMs" if w.get("sm_count") else ""
            parts.append(f"{n}: {w['gpu_name']}{sm}")
    return "; ".join(parts)


def conclusion(t: pd.DataFrame, gpus: bool) -> str:
    """How many (workload, mode) gave the same bits on every device, and which did not."""
    judged = t[t["same_bits"].notna()]
    where = "GPUs" if gpus else "devices"
    if judged.empty:
        return f"No (workload, mode) has ok replicates on two {where}: no verdict."
    same = judged[judged["same_bits"] == True]  # noqa: E712
    differ = judged[judged["same_bits"] == False]  # noqa: E712
    text = (
        f"{len(same)} of {len(judged)} (workload, mode) that ran on more than one of the "
        f"{where} gave the same bits on every one"
    )
    if len(differ):
        names = ", ".join(f"{r['workload']} in {r['mode']}" for r in differ.to_dict("records"))
        text += f"; different bits: {names}"
    return text + "."


def blocks(df: pd.DataFrame, env: dict[str, Any]) -> list[Block]:
    """The section: [] for a run on one device."""
    if df.empty or "device_name" not in df.columns:
        return []
    names = sorted({str(x) for x in df["device_name"].dropna()})  # where the records ran
    if len(names) < 2:
        return []
    t = table(df)
    gpus = all(n.startswith("cuda") for n in names)
    facts = _device_facts(names, env)
    out: list[Block] = [
        Heading(2, "Same bits across GPUs" if gpus else "Same bits across devices"),
        Para(
            f"The workers of this run ran side by side on {', '.join(names)}"
            + (f" ({facts})" if facts else "")
            + ", one worker per device at a time, the replicates of each mode spread over the "
            "devices. A (workload, mode) gives the same bits across "
            + ("GPUs" if gpus else "devices")
            + " when the fingerprints of its ok replicates agree on every device it ran on; a "
            "difference is marked as the devices' own when each device agreed with itself."
            + (
                ""
                if gpus
                else " These are parallel CPU workers on one host: the verdict checks that "
                "running side by side changed no bits."
            )
        ),
    ]
    rows = [
        [r["workload"], r["mode"], ", ".join(r["devices"]) or "–", str(r["replicates"]), _cell(r)]
        for r in t.to_dict("records")
    ]
    name = VERDICT if gpus else "same bits across devices"
    header = ["workload", "mode", "devices", "ok replicates", name]
    verdicts = Table(header, rows, caption=f"{name}, per workload and mode")
    return [*out, verdicts, Para(conclusion(t, gpus))]
