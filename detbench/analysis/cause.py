"""Which switch made a mode nondeterministic (different bits in different processes).

A mode's nondeterminism is put down to a switch when the run has a mode that differs from it in
that switch alone (``switches.pairs``) and the workload was reproducible there: ``bench+cudnn-det
+det-algos`` nondeterministic beside a reproducible ``cudnn-det+det-algos`` names cudnn.benchmark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from detbench.analysis.labels import mode_of, run_device
from detbench.analysis.matrix import verdicts
from detbench.analysis.switches import FLAG_WORDS, pairs

#: What a switch did, in words, when it was on in the nondeterministic mode ...
ON_WORDS = {
    "benchmark": (
        "cudnn.benchmark: its autotuner timed candidate algorithms in each process, and the "
        "processes did not all pick the same one"
    ),
}
#: ... and the remedy, where the report can name one.
REMEDY = {
    "benchmark": "leave torch.backends.cudnn.benchmark = False (torch's default) where the bits "
    "must repeat",
}


@dataclass(frozen=True)
class Cause:
    """The switch that separates a nondeterministic (workload, mode) from a reproducible one."""

    suite: str
    workload: str
    mode: str  # the nondeterministic mode
    switch: str  # a flag of MODE_FLAGS or a setting's name
    on: bool  # whether the switch was on (the "with" side of its pair) in ``mode``

    @property
    def words(self) -> str:
        if self.on and self.switch in ON_WORDS:
            return ON_WORDS[self.switch]
        name = FLAG_WORDS.get(self.switch, self.switch)
        return f"{name} {'on' if self.on else 'off'}"


def causes(df: pd.DataFrame, v: pd.DataFrame | None = None) -> list[Cause]:
    """Every (workload, nondeterministic mode, switch) the run's modes can name. A switch is
    named only where all its pairs point one way (breaks with it on, or fixes): one that breaks
    in one pair and fixes in another (beside cudnn.benchmark's autotuner, say) is chance."""
    v = verdicts(df) if v is None else v
    if v.empty:
        return []
    verdict = v.set_index(["suite", "workload", "mode"])["verdict"]
    keys = list(dict.fromkeys(zip(v["suite"], v["workload"], strict=True)))
    lottery = run_device(df) != "cpu"  # cuDNN's autotuner runs only where cuDNN does
    out: list[Cause] = []
    for sw, ps in pairs(v["mode"]).items():
        for suite, w in keys:
            breaks, fixes = [], []
            for without, with_ in ps:
                # Two draws of the autotuner, whose choice may differ: it names no other switch.
                if lottery and sw != "benchmark" and autotuned(without) and autotuned(with_):
                    continue
                a, b = verdict.get((suite, w, without)), verdict.get((suite, w, with_))
                if b == "nondeterministic" and a == "reproducible":
                    breaks.append(Cause(str(suite), str(w), with_, sw, True))
                elif a == "nondeterministic" and b == "reproducible":
                    fixes.append(Cause(str(suite), str(w), without, sw, False))
            if not (breaks and fixes):
                out += breaks or fixes
    return out


def autotuned(label: str) -> bool:
    """Whether mode ``label`` runs cuDNN's autotuner: cudnn.benchmark on, cuDNN on."""
    m = mode_of(label)
    return m is not None and m.benchmark and m.cudnn_enabled


def lottery(df: pd.DataFrame, v: pd.DataFrame | None = None) -> set[tuple[str, str]]:
    """The (suite, workload) pairs in which cudnn.benchmark made a mode nondeterministic."""
    return {(c.suite, c.workload) for c in causes(df, v) if c.switch == "benchmark" and c.on}


def by_luck(drawn: set[tuple[str, str]], suite: str, mode: str, workloads: Iterable[str]) -> bool:
    """Whether ``mode`` runs the autotuner where cudnn.benchmark broke one of ``workloads``
    elsewhere (``drawn``: ``lottery``): its own agreement was then luck, never the answer."""
    return autotuned(mode) and any((suite, w) in drawn for w in workloads)


def unexplained(v: pd.DataFrame, found: Sequence[Cause]) -> pd.DataFrame:
    """The nondeterministic (workload, mode) rows of ``v`` that no switch explains."""
    named = {(c.suite, c.workload, c.mode) for c in found}
    keys = zip(v["suite"], v["workload"], v["mode"], strict=True)
    keep = pd.Series([k not in named for k in keys], index=v.index, dtype=bool)
    return v[(v["verdict"] == "nondeterministic") & keep]


def by_switch(found: Iterable[Cause]) -> dict[tuple[str, bool], dict[str, list[str]]]:
    """(switch, on) -> "suite/workload" -> the nondeterministic modes it explains, in order."""
    out: dict[tuple[str, bool], dict[str, list[str]]] = {}
    for c in found:
        modes = out.setdefault((c.switch, c.on), {}).setdefault(f"{c.suite}/{c.workload}", [])
        if c.mode not in modes:
            modes.append(c.mode)
    return out


def sentences(found: Sequence[Cause]) -> list[str]:
    """One sentence per switch that broke reproducibility while on: where, and what to do."""
    out = []
    for (sw, on), where in by_switch(found).items():
        if not on:
            continue
        c = next(x for x in found if x.switch == sw and x.on)
        names = "; ".join(f"{w} in {', '.join(modes)}" for w, modes in where.items())
        remedy = REMEDY.get(sw, f"turn {FLAG_WORDS.get(sw, sw)} off where the bits must repeat")
        n = len(where)
        out.append(
            f"{n} workload{'s were' if n != 1 else ' was'} not bitwise reproducible in some modes "
            f"with {FLAG_WORDS.get(sw, sw)} on and reproducible in the same modes without it "
            f"({names}). The cause is {c.words}" + (f"; {remedy}." if remedy else ".")
        )
    return out


def text(df: pd.DataFrame, v: pd.DataFrame | None = None) -> str:
    """The console's lines: ``sentences`` of the run."""
    return "\n".join(sentences(causes(df, v)))
