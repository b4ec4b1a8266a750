"""Each suite's answer, decided once for the console and the report: the recommended mode
(``recommend.RULE``) where one made every workload reproducible. Else the mode that makes the
most reproducible (ties: the simplest) among those that give no different bits for a workload
another mode makes reproducible (if there are any), with what is true of the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from detbench.analysis import cause
from detbench.analysis.labels import baseline_mode, run_device, simplicity_key
from detbench.analysis.matrix import ONE_REPLICATE, RAN, ran_somewhere, unjudged, verdicts
from detbench.analysis.recommend import RULE, inert_changes, recommendations

#: How an unsupported record's message names an op with no deterministic implementation.
NO_DET = re.compile(r"(\w+) does not have a deterministic implementation")
#: Workloads named in a sentence before "and N more".
SHOWN = 4


@dataclass(frozen=True)
class SuiteAnswer:
    """One suite's answer."""

    suite: str
    mode: str | None  # the mode to use, or the best partial one; None where no mode helps
    complete: bool  # ``mode`` makes every workload of the suite that ran reproducible
    reproducible: int  # workloads ``mode`` makes reproducible
    workloads: int  # workloads of the suite that ran in some mode
    text: str  # what follows the suite's name: "det-algos" or "no one mode: ..."


def names(items: Sequence[str], shown: int = SHOWN) -> str:
    """The first ``shown`` of ``items``, then "and N more"."""
    return ", ".join(items[:shown]) + (
        f" and {len(items) - shown} more" if len(items) > shown else ""
    )


def _not_run(
    missing: list[str], g: pd.DataFrame, mode: str, fixers: Mapping[str, list[str]]
) -> list[str]:
    """Why ``missing`` have no verdict under ``mode``, and which mode makes them reproducible."""
    reasons: dict[str, list[str]] = {}
    for w in missing:
        row = g[(g["workload"] == w) & (g["mode"] == mode)]
        verdict = str(row["verdict"].iloc[0]) if len(row) else "not run"
        msg = " ".join(str(x) for x in row["message"].dropna()) if "message" in row else ""
        why = (
            f"no deterministic implementation here ({verdict} under {mode})"
            if NO_DET.search(msg)
            else f"{verdict} under {mode}"
        )
        reasons.setdefault(why, []).append(w)
    out = []
    for why, ws in reasons.items():
        verb = "has" if len(ws) == 1 else "have"
        out.append(f"{names(ws)} {verb} {why}" if why.startswith("no ") else f"{names(ws)}: {why}")
    by_fixer: dict[str, list[str]] = {}
    for w in missing:
        if fixers.get(w):
            by_fixer.setdefault(fixers[w][0], []).append(w)
    out += [f"{m} makes {names(ws)} reproducible" for m, ws in by_fixer.items()]
    return out


def _partial(
    suite: str, g: pd.DataFrame, device: str | None, drawn: set[tuple[str, str]]
) -> SuiteAnswer:
    """The answer where no one mode made every workload reproducible."""
    workloads = [str(w) for w in dict.fromkeys(g["workload"])]
    n = len(workloads)
    modes = [
        m
        for m in dict.fromkeys(map(str, g["mode"]))
        if not inert_changes(m, device) and not cause.by_luck(drawn, suite, m, workloads)
    ]

    def with_verdict(m: str, verdict: str) -> set[str]:
        return {str(w) for w in g.loc[(g["mode"] == m) & (g["verdict"] == verdict), "workload"]}

    repro = {m: with_verdict(m, "reproducible") for m in modes}
    fixers: dict[str, list[str]] = {}
    for m in sorted(modes, key=simplicity_key):
        for w in sorted(repro[m]):
            fixers.setdefault(w, []).append(m)
    spoils = {
        m: sorted(w for w in with_verdict(m, "nondeterministic") if w in fixers) for m in modes
    }
    clean = [m for m in modes if repro[m] and not spoils[m]]
    pool = clean or [m for m in modes if repro[m]]
    open_ = unjudged(g)  # one replicate only in every mode that ran them: no verdict yet
    if not pool:
        return SuiteAnswer(suite, None, False, 0, n, _none(n, open_))
    best = min(pool, key=lambda m: (-len(repro[m]), simplicity_key(m)))
    k = len(repro[best])
    parts = [f"no one mode: {best} makes {k} of {n} reproducible"]
    if not clean:
        parts[0] = (
            "no one mode: each mode gives different bits for a workload another mode makes "
            f"reproducible; {best} makes {k} of {n} reproducible, but not "
            + names([f"{w} (reproducible under {fixers[w][0]})" for w in spoils[best]])
        )
    ran = {str(w) for w in g.loc[(g["mode"] == best) & g["verdict"].isin(RAN), "workload"]}
    single = g[(g["mode"] == best) & (g["verdict"] == "single")]
    parts += _not_run([w for w in workloads if w not in ran], g, best, fixers)
    if len(single):
        parts.append(f"{names(list(map(str, single['workload'])))}: {ONE_REPLICATE}")
    never = [w for w in workloads if w not in fixers and w not in open_]
    if never:
        parts.append(f"no mode makes {names(never)} reproducible")
    return SuiteAnswer(suite, best, False, k, n, "; ".join(parts))


def _none(n: int, open_: list[str]) -> str:
    """The answer where no mode made a workload reproducible (``open_``: one replicate only)."""
    if len(open_) == n:
        return f"no verdict yet: every workload has {ONE_REPLICATE}"
    if not open_:
        return "no mode made any workload reproducible"
    return (
        f"no mode made any of the {n - len(open_)} workloads with two replicates reproducible; "
        f"{names(open_)}: {ONE_REPLICATE}"
    )


def answers(
    df: pd.DataFrame, rec: pd.DataFrame | None = None, v: pd.DataFrame | None = None
) -> list[SuiteAnswer]:
    """One answer per suite, in the order of ``rec`` (``recommend.recommendations``)."""
    v = verdicts(df) if v is None else v
    rec = recommendations(df) if rec is None else rec
    device = run_device(df)
    drawn = cause.lottery(df, v)
    out = []
    for r in rec[rec["workload"] == "*"].to_dict("records"):
        suite = str(r["suite"])
        g = v[v["suite"] == suite]
        g = g[g["workload"].isin(ran_somewhere(g))]
        n = int(g["workload"].nunique())
        if r["mode"] is not None:
            out.append(SuiteAnswer(suite, str(r["mode"]), True, n, n, str(r["mode"])))
        elif not n:
            out.append(SuiteAnswer(suite, None, False, 0, 0, f"none: {r['reason']}"))
        else:
            out.append(_partial(suite, g, device, drawn))
    return out


def recommendation_text(
    df: pd.DataFrame, rec: pd.DataFrame | None = None, v: pd.DataFrame | None = None
) -> str:
    """The console's closing lines: the rule, then per suite its answer, why and throughput."""
    rec = recommendations(df) if rec is None else rec
    by_suite: dict[Any, Any] = {
        r["suite"]: r for r in rec[rec["workload"] == "*"].to_dict("records")
    }
    baseline = baseline_mode(df["mode"]) if len(df) else None
    lines = [f"recommended mode per suite: {RULE}."]
    for a in answers(df, rec, v):
        r = by_suite[a.suite]
        if not a.complete:
            lines.append(f"  {a.suite}: {a.text}")
            continue
        speed = ""
        if r["relative_throughput"] is not None and r["mode"] != baseline:
            speed = f"; throughput {r['relative_throughput']:.2f}x {baseline}'s (geometric mean)"
        if r["cost_vs_fastest"] is not None and r["fastest_mode"] not in (None, r["mode"]):
            speed += (
                f", {100 * r['cost_vs_fastest']:.0f}% below the fastest mode, {r['fastest_mode']}"
            )
        lines.append(f"  {a.suite}: {a.mode}: {r['reason']}{speed}")
    return "\n".join(lines)
