"""The ``Distributed`` section (``detbench.distributed.launch``): per workload and mode, its launch,
its verdict run to run, and whether the ranks held the same parameters (``ranks_agree``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from detbench import analysis
from detbench.analysis.labels import in_report_order
from detbench.report.render import Block, Heading, Para, Table, num
from detbench.store.schema import Status

#: The columns that say how a launch ran, beside the mode.
LAUNCH_COLUMNS = ("world_size", "backend", "bucket_cap_mb", "nccl_algo", "nccl_proto")


def _first(g: pd.DataFrame, column: str) -> Any:
    if column not in g.columns:
        return None
    values = g[column].dropna()
    if values.empty:
        return None
    v = values.iloc[0]
    return int(v) if column in ("world_size", "bucket_cap_mb") else v


def _agree(g: pd.DataFrame) -> tuple[bool | None, int | None]:
    """(ranks agree, first step where they did not) over a group's ok launches; None: unknown."""
    ok = g[g["status"] == Status.OK] if "ranks_agree" in g.columns else g.iloc[:0]
    said = [
        x for x in ok.get("ranks_agree", pd.Series(dtype=object)) if isinstance(x, (bool, np.bool_))
    ]
    if any(not x for x in said):
        steps = [
            int(x)
            for x in ok.get("ranks_first_disagree_step", pd.Series(dtype=object))
            if isinstance(x, (int, float, np.integer, np.floating)) and x == x
        ]
        return False, min(steps) if steps else None
    if said and len(said) == len(ok):
        return True, None
    return None, None


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (suite, workload, mode); ``launch_seconds``: a whole launch's, median."""
    if df.empty or "world_size" not in df.columns:
        return pd.DataFrame()
    d = analysis.counted(df)
    d = d[d["world_size"].notna()]  # the records of distributed workloads
    if d.empty:
        return pd.DataFrame()
    v = {(r["suite"], r["workload"], r["mode"]): r for r in analysis.verdicts(d).to_dict("records")}
    rows: list[dict[str, Any]] = []
    for (suite, workload, mode), g in d.groupby(["suite", "workload", "mode"], sort=False):
        agree, step = _agree(g)
        launch = [
            float(x["seconds"])
            for x in g.get("launch", pd.Series(dtype=object))
            if isinstance(x, Mapping) and x.get("seconds") is not None
        ]
        verdict = v[(suite, workload, mode)]
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "mode": mode,
                **{c: _first(g, c) for c in LAUNCH_COLUMNS},
                "verdict": verdict["verdict"],
                "ranks_agree": agree,
                "first_disagree_step": step,
                "launches": len(g),
                "ok": int((g["status"] == Status.OK).sum()),
                "items_per_second": verdict.get("items_per_second"),
                "launch_seconds": float(np.median(launch)) if launch else None,
            }
        )
    out = pd.DataFrame(rows, dtype=object)
    return in_report_order(out, d["workload"])


def _agree_cell(r: Mapping[Any, Any]) -> str:
    if r["ranks_agree"] is True:
        return "yes"
    if r["ranks_agree"] is False:
        step = r["first_disagree_step"]
        return "NO" + (f" (from step {step})" if step is not None else "")
    return "–"


def _launch_cell(r: Mapping[Any, Any]) -> str:
    parts = [f"{r['world_size']} x {r['backend']}"]
    if r["bucket_cap_mb"] is not None:
        parts.append(f"buckets {r['bucket_cap_mb']} MiB")
    for name in ("nccl_algo", "nccl_proto"):
        if r[name] is not None:
            parts.append(f"{name.upper()}={r[name]}")
    return ", ".join(parts)


def _rate(x: Any) -> str:
    if x is None or not isinstance(x, (int, float)) or x != x:
        return "–"
    return f"{x:,.0f}" if x >= 100 else num(x, ".3g")


def _method() -> Para:
    return Para(
        "How these ran: each record is one fresh launch with torchrun (torch.distributed.run) "
        "of world-size ranks on this host, gloo on a CPU and NCCL on GPUs (one GPU per rank); "
        "every rank applies the mode, seeds every generator alike and draws its own batch from "
        "its rank. The fingerprint covers every rank's outputs at every step (in rank order), so "
        "the run-to-run verdict compares whole launches. 'ranks agree' is a verdict of its own: "
        "after every fingerprint step, the parameters of every DistributedDataParallel module "
        "were compared bitwise across ranks. Throughput counts the items of every rank per "
        "second of the slowest rank (the ranks time on a shared clock)."
    )


def blocks(df: pd.DataFrame) -> list[Block]:
    """The section: [] when no record is distributed."""
    t = table(df)
    if t.empty:
        return []
    out: list[Block] = [Heading(2, "Distributed (torchrun)"), _method()]
    for suite, g in t.groupby("suite", sort=False):
        rows = [
            [
                r["workload"],
                r["mode"],
                _launch_cell(r),
                str(r["verdict"]),
                _agree_cell(r),
                _rate(r["items_per_second"]),
                num(r["launch_seconds"], ".1f") if r["launch_seconds"] is not None else "–",
            ]
            for r in g.to_dict("records")
        ]
        header = [
            "workload",
            "mode",
            "launch",
            "run to run",
            "ranks agree",
            "items/s",
            "s per launch (all its workloads)",
        ]
        out.append(Table(header, rows, caption=f"{suite}: distributed workloads per mode"))
        bad = g[g["ranks_agree"] == False]  # noqa: E712
        for r in bad.to_dict("records"):
            out.append(
                Para(
                    f"Warning: in {r['workload']} under {r['mode']} ({_launch_cell(r)}), the ranks "
                    "held different parameters after a step: data-parallel replicas that drift "
                    "apart are a bug (of the collective, the bucketing or the model), worth "
                    "reporting."
                )
            )
    return out
