"""Which cuDNN engine each process settled on, from the records of ``run --cudnn-log``
(``record["cudnn_engines"]``), and the convolutions whose choice differed between replicates.
A different engine can change the bits but need not, so it is shown beside the verdict, never
as one. The log slows a step several-fold, so ``timings_logged`` marks timings that are no cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

#: (suite/workload, mode) -> replicate -> {"OP shapes": "engine:knobs"}.
Choices = dict[tuple[str, str], dict[int, dict[str, str]]]


def engine_choices(df: pd.DataFrame) -> Choices:
    """The engines each replicate of each (workload, mode) settled on, where the log lists any."""
    out: Choices = {}
    if "cudnn_engines" not in df.columns:
        return out
    columns = [df[c] for c in ("suite", "workload", "mode", "replicate", "cudnn_engines")]
    for suite, workload, mode, replicate, engines in zip(*columns, strict=True):
        if not isinstance(engines, list) or not engines:
            continue
        out.setdefault((f"{suite}/{workload}", str(mode)), {})[int(replicate)] = {
            f"{e['op']} {e['shapes']}": str(e["engine"]) for e in engines
        }
    return out


def differs(by_replicate: Mapping[int, Mapping[str, str]]) -> dict[str, dict[str, list[int]]]:
    """Convolution -> engine -> replicates, for those whose engine differed between replicates."""
    chosen: dict[str, dict[str, list[int]]] = {}
    for rep in sorted(by_replicate):
        for conv, engine in by_replicate[rep].items():
            chosen.setdefault(conv, {}).setdefault(engine, []).append(rep)
    return {conv: engines for conv, engines in chosen.items() if len(engines) > 1}


def _replicates(reps: Sequence[int]) -> str:
    names = [str(r) for r in reps]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"replicate{'s' if len(names) > 1 else ''} {listed}"


def describe(conv: str, engines: Mapping[str, Sequence[int]]) -> str:
    """One sentence: which replicates ran ``conv`` with which engine, the most common first."""
    ranked = sorted(engines.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    parts = [f"{_replicates(reps)} chose engine {engine}" for engine, reps in ranked]
    return f"{conv}: " + "; ".join(parts) + "."


def timings_logged(df: pd.DataFrame) -> pd.Series:
    """Whether each record was timed with cuDNN's API log on a GPU (on a CPU it slows nothing)."""
    if "cudnn_log" not in df.columns:
        return pd.Series(False, index=df.index)
    return (df["cudnn_log"] == True) & (df["device"] == "cuda")  # noqa: E712  (None: not on)
