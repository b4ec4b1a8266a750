"""The autotuner's choice: a difference across runs found only in modes with cudnn.benchmark on.

With cudnn.benchmark on, each process times the candidate algorithms of every convolution and
keeps the fastest, so the next process, on any GPU, may keep another with other bits. Such a
difference is put down to that choice, and the modes without it say whether the machines agree.
A workload that also differs in a mode without benchmark keeps "different bits" everywhere.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

#: The verdict of a difference found only in modes with cudnn.benchmark on.
AUTOTUNER = "autotuner's choice"

#: Why, in words.
WHY = "cudnn.benchmark was on, and its autotuner may pick another algorithm in each process"


def _plain(rows: Sequence[MutableMapping[str, Any]]) -> str:
    """What the modes without cudnn.benchmark say about the same workload."""
    plain = [r for r in rows if not r["benchmark"]]
    same = [str(r["mode"]) for r in plain if r["verdict"] == "same bits"]
    where = "in both runs" if len(rows[0]["runs"]) == 2 else "in every run"
    if not same:
        return "no mode without it has a verdict to compare"
    if len(same) == len(plain):
        if len(same) == 1:
            return f"the one mode without it ({same[0]}) gives the same bits {where}"
        every = "both" if len(same) == 2 else f"all {len(same)}"
        return f"{every} modes without it give the same bits {where}"
    return (
        f"{len(same)} of the {len(plain)} modes without it ({', '.join(same)}) give the "
        f"same bits {where}"
    )


def label(rows: Sequence[MutableMapping[str, Any]]) -> None:
    """Relabel, in place, the rows of each GPU workload whose only differences are in modes with
    cudnn.benchmark on: verdict ``AUTOTUNER``, ``differs`` moved to ``machine_facts``, and a note
    saying why (also on such a mode nondeterministic within a run where no plain mode is)."""
    by_workload: dict[tuple[str, str], list[MutableMapping[str, Any]]] = {}
    for r in rows:
        by_workload.setdefault((str(r["suite"]), str(r["workload"])), []).append(r)
    for group in by_workload.values():
        if any(r.get("device") != "cuda" for r in group):
            continue  # cudnn.benchmark acts on cuDNN alone: on a GPU
        bench = [r for r in group if r["benchmark"]]
        plain = [r for r in group if not r["benchmark"]]
        if not bench or any(r["verdict"] == "different bits" for r in plain):
            continue  # cudnn.benchmark acts on cuDNN alone: on a GPU
        words = _plain(group)
        for r in bench:
            if r["verdict"] == "different bits":
                r["verdict"], r["cause"] = AUTOTUNER, "cudnn.benchmark"
                r["machine_facts"], r["differs"] = r["differs"], {}
                r["note"] = f"{WHY}; {words}"
            elif (
                r["verdict"] == "nondeterministic within a run"
                and plain
                and not any(p["verdict"] == "nondeterministic within a run" for p in plain)
            ):
                r["cause"] = "cudnn.benchmark"
                r["note"] = f"{r['note']}; {WHY}"
