"""How far a run's numbers can be trusted: the float32 precision each mode ran in, what the paired
timing sampled, the drift of each mode's cost across replicates, and the GPU's state. A run
without these fields gets an empty result, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import earlier_design
from detbench.analysis.cost_intervals import paired
from detbench.analysis.matrix import cost_points, verdicts
from detbench.analysis.paired_costs import DESIGN, process_points
from detbench.analysis.pairs import is_paired, pair, side_from_records
from detbench.core.modes import DEFAULT_MODE, MODES
from detbench.store.gpustate import throttled
from detbench.store.schema import Status

#: The record's ``precision`` keys, in the order the report names them.
PRECISION_KEYS = ("matmul_fp32", "conv_fp32")


def _mode_order(modes: list[Any]) -> list[Any]:
    order = {m.name: i for i, m in enumerate(MODES)}
    return sorted(dict.fromkeys(modes), key=lambda m: order.get(m, len(order)))


def precision_by_mode(df: pd.DataFrame) -> dict[str, list[tuple[str, ...]]]:
    """Per mode: the distinct (matmul_fp32, conv_fp32) pairs its records ran in."""
    if "precision" not in df.columns:
        return {}
    out: dict[str, list[tuple[str, ...]]] = {}
    for mode in _mode_order(list(df["mode"])):
        seen: dict[tuple[str, ...], None] = {}
        for p in df.loc[df["mode"] == mode, "precision"]:
            if isinstance(p, Mapping):
                seen[tuple(str(p.get(k, "n/a")) for k in PRECISION_KEYS)] = None
        if seen:
            out[str(mode)] = sorted(seen)
    return out


def sampled(df: pd.DataFrame) -> dict[str, Any] | None:
    """What the ok records' paired timing sampled: ``records``, ``seconds`` (min, median, max
    per record), ``samples`` (min, max per record), ``block`` (min, max seconds). None: none."""
    if "timing" not in df.columns:
        return None
    ok = df[df["status"] == Status.OK]
    totals, counts, blocks = [], [], []
    for t in ok["timing"]:
        if not is_paired(t) or not t.get("samples"):
            continue
        k = float(t.get("number_per_block") or 1)
        each = [float(x) * k for x in t["samples"]]
        totals.append(sum(each))
        counts.append(len(each))
        blocks += each
    if not totals:
        return None
    return {
        "records": len(totals),
        "seconds": (min(totals), float(np.median(totals)), max(totals)),
        "samples": (min(counts), max(counts)),
        "block": (min(blocks), max(blocks)),
    }


def replicate_spread(
    df: pd.DataFrame, baseline: str = DEFAULT_MODE.name, c: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (suite, mode): the geometric mean over the suite's workloads (those with a ratio in
    every replicate) of throughput relative to ``baseline`` within each replicate, its min and
    max over replicates, and ``pooled``, the same of the costs as the report states them (of
    ``c`` where given). A machine that slows down for a while shows as spread. Empty without
    ``baseline`` or with one replicate."""
    ok = df[df["status"] == Status.OK].assign(
        ips=lambda d: pd.to_numeric(d["items_per_second"], errors="coerce")
    )
    ok = ok[ok["ips"] > 0]
    if ok.empty or baseline not in set(ok["mode"]) or ok["replicate"].nunique() < 2:
        return pd.DataFrame()
    points = _cost_points(df, baseline, c)
    rows = []
    for suite in dict.fromkeys(ok["suite"]):
        s = ok[ok["suite"] == suite]
        reps = sorted(set(s["replicate"]))
        for mode in _mode_order(list(s["mode"])):
            ratio, pooled, paired = _workload_ratios(s, str(mode), baseline)
            ratio = ratio.reindex(columns=reps).dropna()  # a ratio in every replicate
            if ratio.empty:
                continue
            per_rep = np.exp(np.log(ratio).mean(axis=0))
            for w in ratio.index:  # the cost the tables state, where known
                pooled[w] = points.get((str(suite), str(w), str(mode)), pooled[w])
            kinds = {paired[w] for w in ratio.index}
            rows.append(
                {
                    "suite": suite,
                    "mode": mode,
                    "pooled": float(np.exp(np.log(pooled.reindex(ratio.index)).mean())),
                    "min": float(per_rep.min()),
                    "max": float(per_rep.max()),
                    "per_replicate": {int(r): float(x) for r, x in per_rep.items()},
                    "workloads": len(ratio),
                    "design": kinds.pop() if len(kinds) == 1 else "mixed",
                }
            )
    return pd.DataFrame(rows)


def _cost_points(
    df: pd.DataFrame, baseline: str, c: pd.DataFrame | None
) -> dict[tuple[str, str, str], float]:
    """(suite, workload, mode) -> ``matrix.cost_points`` of ``c``; {} without ``c``."""
    v = verdicts(df) if c is not None else pd.DataFrame()
    if v.empty or c is None:
        return {}
    rel = cost_points(v, baseline, c)
    keys = v[["suite", "workload", "mode"]].astype(str).itertuples(index=False, name=None)
    return {k: float(x) for k, x in zip(keys, rel, strict=True) if np.isfinite(x)}


def _workload_ratios(
    s: pd.DataFrame, mode: str, baseline: str
) -> tuple[pd.DataFrame, pd.Series, dict[Any, str]]:
    """(workloads x replicates ratios, pooled ratios, designs) of one suite's ok records."""
    per: dict[Any, dict[int, float]] = {}
    pooled: dict[Any, float] = {}
    design: dict[Any, str] = {}
    for w, g in s.groupby("workload", sort=False):
        m, b = g[g["mode"] == mode], g[g["mode"] == baseline]
        if m.empty or b.empty:
            continue
        if paired(m, b):
            p = pair(side_from_records(b), side_from_records(m))
            per[w] = process_points(p)
            pooled[w] = float(np.exp(np.mean(np.log(list(per[w].values())))))
            design[w] = DESIGN
            continue
        per[w], pooled[w] = earlier_design.replicate_ratios(m, b)
        design[w] = earlier_design.DESIGN
    ratio = pd.DataFrame.from_dict(per, orient="index")
    return ratio, pd.Series(pooled, dtype=float), design


def gpu_snapshot(env: Mapping[str, Any], when: str) -> dict[str, Any] | None:
    """The run's GPU (by the worker's UUID, else the first) in ``env["gpu_state"][when]``."""
    state = env.get("gpu_state") or {}
    snap = state.get(when)
    if not isinstance(snap, list) or not snap:
        return None
    uuid = (env.get("worker") or {}).get("gpu_uuid")
    for gpu in snap:
        if isinstance(gpu, dict) and uuid and gpu.get("uuid") == uuid:
            return gpu
    first = snap[0]
    return first if isinstance(first, dict) else None


def throttle_lines(env: Mapping[str, Any]) -> list[str]:
    """Lines saying the run's GPU throttled during the run (``store.gpustate.throttled``)."""
    state = env.get("gpu_state")
    if not state:
        return []
    uuid = (env.get("worker") or {}).get("gpu_uuid")
    lines = throttled(state, uuid=uuid) if uuid else throttled(state)
    return [str(line) for line in lines]


def _partition(values: list[Any]) -> tuple[int, ...]:
    """Each value replaced by the index of its first occurrence: equal for equal partitions."""
    first: dict[Any, int] = {}
    return tuple(first.setdefault(v, i) for i, v in enumerate(values))


def fingerprint_agreement(df: pd.DataFrame) -> pd.DataFrame:
    """Per (suite, workload, mode) of a ``--fingerprint both`` run: do both digests agree?"""
    if "fingerprint_sha256" not in df.columns:
        return pd.DataFrame()
    rows = []
    ok = df[df["fingerprint"].notna() & df["fingerprint_sha256"].notna()]
    for (suite, workload, mode), g in ok.groupby(["suite", "workload", "mode"], sort=True):
        g = g.sort_values("replicate")
        device, sha = list(g["fingerprint"]), list(g["fingerprint_sha256"])
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "mode": mode,
                "replicates": len(g),
                "device_distinct": len(set(device)),
                "sha256_distinct": len(set(sha)),
                "agree": _partition(device) == _partition(sha),
                "steps_agree": all(
                    _partition(list(a)) == _partition(list(b))
                    for a, b in zip(
                        zip(*g["step_fingerprints"], strict=True),
                        zip(*g["step_fingerprints_sha256"], strict=True),
                        strict=True,
                    )
                ),
            }
        )
    return pd.DataFrame(rows)
