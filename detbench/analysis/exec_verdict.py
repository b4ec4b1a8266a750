"""The verdicts of a ``detbench exec`` run, from its ``exec.json``: per mode, whether its replicates
left the same bits and on what evidence, its cost against the baseline, paired by round, and what
differing runs truly point to. **Diagnoses** are said only where every mode's replicates differ, and
only where true of what the script was seen to do (``locate.watched``): a DataLoader's order only
where it shuffles without a generator of its own *and* torch's global generator was never seeded;
its workers only where they have no ``worker_init_fn`` and their base seed comes from an unseeded
generator (each worker seeds ``random``, numpy and torch from it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from detbench.analysis.stats import within_noise

Interval = tuple[float, float, float]
#: The seeding calls that seed torch's global generator (``locate.watched``).
TORCH_SEEDS = frozenset({"torch.manual_seed"})


def runs_ok(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["runs"].values() if f.get("status") == "ok"]


def modes_of(doc: dict[str, Any]) -> list[str]:
    return [m["name"] for m in doc["config"]["modes"]]


def ratio_interval(pairs: list[tuple[float, float]]) -> Interval | None:
    """Geometric mean of ``mode / base`` over rounds with a 95% t-interval; None below 2."""
    logs = [math.log(m / b) for b, m in pairs if b and m and b > 0 and m > 0]
    if len(logs) < 2:
        return None
    mean, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))
    q = float(sps.t.ppf(0.975, len(logs) - 1)) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - q), math.exp(mean + q)


def _by_round(runs: list[dict[str, Any]], mode: str, copy: int, key: str) -> dict[int, float]:
    return {
        int(f["round"]): float(f[key])
        for f in runs
        if f["mode"] == mode and f["copy"] == copy and f.get(key)
    }


def mode_costs(doc: dict[str, Any], mode: str, copy: int = 0) -> tuple[Any, Any]:
    """The (throughput, steps a second) of ``mode``'s ``copy`` against the baseline's copy 0."""
    runs, base = runs_ok(doc), modes_of(doc)[0]
    out = []
    for key in ("body", "steps_per_second"):
        b, m = _by_round(runs, base, 0, key), _by_round(runs, mode, copy, key)
        if key == "body":  # a time: the baseline's over the mode's is its relative throughput
            b, m = m, b
        out.append(ratio_interval([(b[r], m[r]) for r in sorted(m) if r in b]))
    return out[0], out[1]


def false_costs(body: Any, steps: Any) -> list[tuple[str, Interval]]:
    """The A/A copy's (name, interval) whose interval excludes 1: costs that are not there."""
    named = (("throughput", body), ("steps/s", steps))
    return [(name, r) for name, r in named if r is not None and not within_noise(r[1], r[2])]


@dataclass(frozen=True)
class ModeVerdict:
    """One mode's (or the A/A copy's) verdict and costs."""

    mode: str
    copy: int
    runs: list[dict[str, Any]]
    verdict: str  # "reproducible", "not reproducible", "one run", or "A/A" for the copy
    basis: str | None  # the evidence that decided (``evidence.split``): "tensors and results"
    counts: dict[str, int]  # what one run left to compare, by tier
    parting: dict[str, Any] | None  # where the decisive evidence parts
    text_parting: dict[str, Any] | None  # where only the rest parts (a reproducible verdict)
    throughput: Interval | None
    steps: Interval | None


def verdicts(doc: dict[str, Any]) -> list[ModeVerdict]:
    """Each mode's verdict, in the run's order, then the A/A copy's."""
    runs, modes = runs_ok(doc), modes_of(doc)
    parts, text = doc.get("partings") or {}, doc.get("text_partings") or {}
    out = []
    for mode, copy in [(m, 0) for m in modes] + [(modes[0], 1)]:
        mine = [f for f in runs if f["mode"] == mode and f["copy"] == copy]
        if not mine:
            continue
        body, steps = mode_costs(doc, mode, copy)
        if copy:
            verdict = "A/A"
        elif len(mine) < 2:
            verdict = "one run"
        else:
            same = len({f.get("digest") for f in mine}) == 1
            verdict = "reproducible" if same else "not reproducible"
        first = mine[0]
        out.append(
            ModeVerdict(
                mode,
                copy,
                mine,
                verdict,
                first.get("basis"),
                dict(first.get("counts") or {}),
                None if copy else parts.get(mode),
                None if copy else text.get(mode),
                body,
                steps,
            )
        )
    return out


def seen(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """What the script's interpreters were seen to do (``key``), each (what, file, line) once."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for f in runs_ok(doc):
        view = f.get("script") or f.get("boot") or {}
        for e in view.get(key) or []:
            mark = (e.get("setting") or e.get("call"), e.get("file"), e.get("line"))
            found.setdefault(mark, e)
    return list(found.values())


def device(doc: dict[str, Any]) -> str:
    """Where the script ran its tensors (its runs' interpreters say)."""
    used = {(f.get("script") or f.get("boot") or {}).get("device") for f in runs_ok(doc)}
    return "cuda" if "cuda" in used else "cpu"


def diagnoses(doc: dict[str, Any]) -> list[str]:
    """What replicates that differ in every mode truly point to (module docstring)."""
    parts = doc.get("partings") or {}
    modes = modes_of(doc)
    if not modes or not all(parts.get(m) for m in modes):
        return []
    seeds = seen(doc, "seeds")
    torch_seeded = any(s["call"] in TORCH_SEEDS for s in seeds)
    out = []
    if not seeds:
        out.append(
            "no seeding call was seen (torch.manual_seed, random.seed, numpy.random.seed, or "
            "the helpers of Transformers, Lightning or accelerate): unseeded generators"
        )
    elif not torch_seeded:
        called = sorted({s["call"] for s in seeds})
        out.append(
            f"torch's generator is never seeded ({', '.join(called)} only): its weights' "
            "initialisation, dropout and every draw from it differ run to run"
        )
    for dl in seen(doc, "dataloaders"):
        where = f"{Path(dl['file']).name}:{dl['line']}"
        if torch_seeded or dl["generator"]:
            continue  # its order and its workers' base seed come from a seeded generator
        if dl["shuffle"]:
            out.append(
                f"the DataLoader at {where} shuffles with torch's unseeded generator: data order"
            )
        if dl["num_workers"] and not dl["worker_init_fn"]:
            out.append(
                f"the DataLoader at {where} has {dl['num_workers']} workers whose base seed "
                "(and so random, numpy and torch in each) comes from torch's unseeded generator"
            )
    return list(dict.fromkeys(out))
