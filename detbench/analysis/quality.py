"""How far a run's numbers can be trusted, from its records and env.json: the float32 precision
each mode ran in, what the paired timing sampled, how much each mode's cost moved from one
replicate to the next (drift), and the GPU's state before and after the run.

Every function here tolerates runs written before these fields existed: it returns an empty
result, never an error, and the report then leaves the matching section out.
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


# --- Precision ---------------------------------------------------------------------------------


def precision_by_mode(df: pd.DataFrame) -> dict[str, list[tuple[str, ...]]]:
    """Per mode (canonical order): the distinct (matmul_fp32, conv_fp32) pairs its records ran
    in, e.g. ``[("tf32", "tf32")]``. Empty when no record carries ``precision``."""
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


# --- Paired timing ----------------------------------------------------------------------------


def sampled(df: pd.DataFrame) -> dict[str, Any] | None:
    """What the successful records' paired timing (``pairs.is_paired``) sampled, from their
    samples (each the seconds per step of a block of ``number_per_block`` steps): ``records``,
    ``seconds`` (min, median, max of a record's seconds of sampling), ``samples`` (min, max per
    record) and ``block`` (min, max seconds of one block). None where no such record has
    samples."""
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


# --- Drift: the spread across replicates -------------------------------------------------------


def replicate_spread(
    df: pd.DataFrame, baseline: str = DEFAULT_MODE.name, c: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (suite, mode): the geometric mean over the suite's workloads of throughput relative
    to ``baseline`` within each replicate, its min and max over replicates, and ``pooled``: the
    geometric mean over the same workloads of each workload's cost as the report states it
    (``matrix.cost_points`` of ``c``, the run's ``costs``, where given).

    Within a replicate, a workload's ratio is, where the mode and the baseline were timed side
    by side, that process's median per-round ratio (``paired_costs.process_points``: the
    paired cost is the geometric mean of these, so ``pooled`` lies within min and max); for
    records timed in their own worker, ``earlier_design.replicate_ratios``.

    The workloads are those with a ratio in every replicate, so each replicate's mean is over
    the same set. A machine that slows down for a while makes the modes that ran then look
    slower in that replicate only: the spread shows it. Empty without ``baseline`` or with one
    replicate. ``design``: ``paired_costs.DESIGN`` where every workload's ratio came from pairs,
    ``earlier_design.DESIGN`` where none did, "mixed" otherwise.
    """
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
    """(suite, workload, mode) -> the cost's point as the report's tables state it
    (``matrix.cost_points``); {} where ``c`` is not given."""
    if c is None:
        return {}
    v = verdicts(df)
    if v.empty:
        return {}
    rel = cost_points(v, baseline, c)
    keys = v[["suite", "workload", "mode"]].astype(str).itertuples(index=False, name=None)
    return {k: float(x) for k, x in zip(keys, rel, strict=True) if np.isfinite(x)}


def _workload_ratios(
    s: pd.DataFrame, mode: str, baseline: str
) -> tuple[pd.DataFrame, pd.Series, dict[Any, str]]:
    """One suite's ok records ``s`` (with ``ips``): (workloads x replicates of ``mode``'s
    throughput relative to ``baseline`` within each replicate, each workload's pooled ratio,
    each workload's ``design``); see ``replicate_spread``."""
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


# --- GPU state ---------------------------------------------------------------------------------


def gpu_snapshot(env: Mapping[str, Any], when: str) -> dict[str, Any] | None:
    """The run's GPU in ``env["gpu_state"][when]`` (``"before"`` or ``"after"``): the entry whose
    UUID is the worker's ``gpu_uuid``, else the first. None where not recorded."""
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
    """``detbench.store.gpustate.throttled`` on the run's GPU state (restricted to the worker's GPU
    where its UUID is known): lines saying the GPU throttled during the run; empty when it did
    not, or when unknown."""
    state = env.get("gpu_state")
    if not state:
        return []
    uuid = (env.get("worker") or {}).get("gpu_uuid")
    lines = throttled(state, uuid=uuid) if uuid else throttled(state)  # uuid: the run's GPU only
    return [str(line) for line in lines]


# --- Fingerprint cross-check -------------------------------------------------------------------


def _partition(values: list[Any]) -> tuple[int, ...]:
    """Which replicates share a fingerprint: each value replaced by the index of its first
    occurrence, so two methods agree exactly when their partitions are equal."""
    first: dict[Any, int] = {}
    return tuple(first.setdefault(v, i) for i, v in enumerate(values))


def fingerprint_agreement(df: pd.DataFrame) -> pd.DataFrame:
    """For a run made with ``--fingerprint both``: per (suite, workload, mode), whether the
    device digest and sha256 split the replicates the same way (equal fingerprints for exactly
    the same pairs of replicates), hence give the same verdict. Empty for other runs."""
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
