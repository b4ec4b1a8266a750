"""The autotuner's choice: a difference across runs found only in modes with cudnn.benchmark on.

With ``torch.backends.cudnn.benchmark`` on, each process times the candidate algorithms of every
convolution shape it meets and keeps the fastest; the next process, on the same GPU or another,
may keep another algorithm, with other bits (seed 001). So where a workload's runs on a GPU differ
only in modes with benchmark on (the records' ``benchmark`` read back), the difference is put down
to that choice, never to the machines' arithmetic, and the modes without it say whether the
machines agree. On a CPU the flag acts on nothing, and nothing is relabelled. A workload that
differs in a mode without benchmark keeps "different bits" in every mode: there the machines
differ whatever the autotuner chose.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

#: The verdict of a difference found only in modes with cudnn.benchmark on.
AUTOTUNER = "autotuner's choice"

#: Why, in words (the module docstring and the Across machines section say the rest).
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
    """Relabel, in place, the rows of each workload whose only differences are in modes with
    cudnn.benchmark on (``row["benchmark"]``): their verdict becomes ``AUTOTUNER``, the facts of
    the machines move from ``differs`` to ``machine_facts`` (they may differ, but they are not
    what the bits show), and the note says why and what the modes without it say. A row of such
    a mode that is nondeterministic within a run, where no mode without it is, gets the same
    cause in its note."""
    by_workload: dict[tuple[str, str], list[MutableMapping[str, Any]]] = {}
    for r in rows:
        by_workload.setdefault((str(r["suite"]), str(r["workload"])), []).append(r)
    for group in by_workload.values():
        if any(r.get("device") != "cuda" for r in group):
            continue  # cudnn.benchmark acts on cuDNN's convolutions alone: on a GPU
        bench = [r for r in group if r["benchmark"]]
        plain = [r for r in group if not r["benchmark"]]
        if not bench or any(r["verdict"] == "different bits" for r in plain):
            continue
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
