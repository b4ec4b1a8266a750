"""The report of ``detbench exec``: "Your command", from the run's ``exec.json`` beside its records.

For each mode: whether its replicates left the same bits (every comparable item: the tensors of
its checkpoints, its printed lines, its ``detbench.fingerprint`` calls), and where they first
part (which file and tensor, or which printed line and step, with the largest difference); its
wall time, start-up apart, and its cost against the baseline from the paired analysis (the
command's own time, a round a replicate: ``analysis.costs``), with the steps a second where the
script prints its steps, each with a 95% t-interval over the rounds. Then what can never be equal
and was set aside; the flags the script set itself (file and line: the mode measured was not the
one asked for); what differing replicates in every mode point to (seeding, DataLoader workers);
and the ops the script calls that can race, named even where the runs agreed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from detbench.analysis.stats import within_noise
from detbench.report.render import Block, Bullets, Code, Heading, Para, Table
from detbench.run.execdoc import CUDNN_FLAGS
from detbench.run.execrun import EXEC_FILE, census_failure

#: The columns of the table of modes.
HEADER = [
    "mode",
    "verdict",
    "where the replicates first part",
    "wall (median)",
    "start-up",
    "throughput vs baseline",
    "steps/s vs baseline",
]
#: Where the seeding recipe is (the ``recipes`` suite).
RECIPE = "docs/suites.md#recipes"


def load(d: Path) -> dict[str, Any] | None:
    p = Path(d) / EXEC_FILE
    return json.loads(p.read_text()) if p.exists() else None


def _median(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def ratio_interval(pairs: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Geometric mean of ``mode / base`` over rounds with a 95% t-interval (rounds - 1 degrees
    of freedom), or None below 2 rounds."""
    logs = [math.log(m / b) for b, m in pairs if b and m and b > 0 and m > 0]
    if len(logs) < 2:
        return None
    mean, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))
    q = float(sps.t.ppf(0.975, len(logs) - 1)) * sd / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - q), math.exp(mean + q)


def _fmt(r: tuple[float, float, float] | None) -> str:
    """``1.06x [1.01, 1.12]``, with as many decimals (2 to 4) as show whether the interval
    holds 1: ``0.990x [0.981, 0.998]``, not ``[0.98, 1.00]``."""
    if r is None:
        return "–"
    holds = within_noise(r[1], r[2])
    for nd in (2, 3, 4):
        if within_noise(round(r[1], nd), round(r[2], nd)) == holds:
            break
    return f"{r[0]:.{nd}f}x [{r[1]:.{nd}f}, {r[2]:.{nd}f}]"


def false_costs(body: Any, steps: Any) -> list[tuple[str, tuple[float, float, float]]]:
    """The A/A copy's (name, interval) of throughput and steps a second whose interval excludes
    1 (``stats.within_noise``): costs that are not there."""
    named = (("throughput", body), ("steps/s", steps))
    return [(name, r) for name, r in named if r is not None and not within_noise(r[1], r[2])]


def aa_reading(body: Any, steps: Any) -> str:
    """The A/A copy's verdict: whether an interval of its costs excludes 1 (a false cost)."""
    false = [name for name, _ in false_costs(body, steps)]
    if not false:
        return "A/A copy: no false cost"
    return f"A/A copy: a false cost in {' and '.join(false)} (its interval excludes 1)"


def aa_warning(doc: dict[str, Any]) -> str | None:
    """What an A/A copy with a false cost means for the run's costs, or None."""
    base = doc["config"]["modes"][0]["name"]
    false = [f"{name} {_fmt(r)}" for name, r in false_costs(*mode_costs(doc, base, 1))]
    if not false:
        return None
    return (
        f"the A/A copy, the baseline against itself, shows a cost that is not there "
        f"({'; '.join(false)}): in this run a cost of that size may be noise too. One A/A "
        "interval in 20 excludes 1 at a true 95%; more rounds (--replicates) narrow them all."
    )


def _runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["runs"].values() if f.get("status") == "ok"]


def _by_round(runs: list[dict[str, Any]], mode: str, copy: int, key: str) -> dict[int, float]:
    return {
        int(f["round"]): float(f[key])
        for f in runs
        if f["mode"] == mode and f["copy"] == copy and f.get(key)
    }


def mode_rows(doc: dict[str, Any], costs: Any = None) -> list[list[str | Code]]:
    """One row per mode (and the A/A copy): verdict, parting, times, costs."""
    runs = _runs(doc)
    modes = [m["name"] for m in doc["config"]["modes"]]
    base = modes[0]
    parts = doc.get("partings") or {}
    rows: list[list[str | Code]] = []
    for mode, copy in [(m, 0) for m in modes] + [(base, 1)]:
        mine = [f for f in runs if f["mode"] == mode and f["copy"] == copy]
        if not mine:
            continue
        digests = {f.get("digest") for f in mine}
        body, steps = mode_costs(doc, mode, copy)
        if copy:
            verdict = aa_reading(body, steps)
        elif len(mine) < 2:
            verdict = "one run: no verdict"
        else:
            verdict = "reproducible" if len(digests) == 1 else "not reproducible"
        part = parts.get(mode) if not copy else None
        where = "–" if part is None else where_text(part)
        wall = _median([f["wall"] for f in mine])
        start = _median([f["startup"] for f in mine if f.get("startup") is not None])
        rows.append(
            [
                mode + (" (copy 1)" if copy else ""),
                f"{verdict} ({len(mine)} runs)" if not copy else verdict,
                where,
                f"{wall:.2f} s" if wall is not None else "–",
                f"{start:.2f} s" if start is not None else "–",
                "1x: the baseline" if mode == base and not copy else _fmt(body),
                "1x: the baseline" if mode == base and not copy else _fmt(steps),
            ]
        )
    return rows


def mode_costs(doc: dict[str, Any], mode: str, copy: int = 0) -> tuple[Any, Any]:
    """The (throughput, steps a second) of ``mode``'s ``copy`` against the baseline's copy 0,
    each ``ratio_interval``'s (point, low, high) or None."""
    runs = _runs(doc)
    base = doc["config"]["modes"][0]["name"]
    return (
        _ratio(runs, base, mode, copy, "body"),
        _ratio(runs, base, mode, copy, "steps_per_second"),
    )


def _ratio(runs: list[dict[str, Any]], base: str, mode: str, copy: int, key: str) -> Any:
    """The mode's throughput relative to the baseline (time: base / mode; a rate: mode /
    base), paired by round."""
    b = _by_round(runs, base, 0, key)
    m = _by_round(runs, mode, copy, key)
    if key == "steps_per_second":
        return ratio_interval([(b[r], m[r]) for r in sorted(m) if r in b])
    return ratio_interval([(m[r], b[r]) for r in sorted(m) if r in b])


def where_text(p: dict[str, Any]) -> str:
    """Where two replicates first part, in words."""
    w = p.get("where") or {}
    diff = p.get("max_abs_diff")
    size = f"; max |diff| {diff:.3g}" if isinstance(diff, float | int) else ""
    rounds = p.get("rounds") or [0, 1]
    intro = f"rounds {rounds[0] + 1} and {rounds[1] + 1} part at "
    if p.get("kind") == "line":
        step = f" (step {w['step']})" if w.get("step") is not None else ""
        return (
            f"{intro}{w.get('stream', 'stdout')} line {w.get('line_no')}{step}: "
            f"{p.get('a')!r} vs {p.get('b')!r}{size}"
        )
    if p.get("kind") in ("tensor", "value"):
        return f"{intro}{w.get('file')}, {p.get('kind')} {w.get('tensor') or p['item']}{size}"
    if p.get("kind") == "fingerprint":
        return f"{intro}detbench.fingerprint {w.get('name')!r} call {w.get('index')}"
    return f"{intro}{p.get('item')}{size}"


def doc_device(doc: dict[str, Any]) -> str:
    """Where the script ran its tensors (its runs' boots say)."""
    used = {(f.get("boot") or {}).get("device") for f in _runs(doc)}
    return "cuda" if "cuda" in used else "cpu"


def changes_lines(doc: dict[str, Any]) -> list[str]:
    """The flags the script set itself, once per (setting, line)."""
    seen: dict[tuple[str, str, int], dict[str, Any]] = {}
    for f in _runs(doc):
        for ch in (f.get("boot") or {}).get("changes") or []:
            seen.setdefault((ch["setting"], ch["file"], ch["line"]), ch)
    inert = doc_device(doc) != "cuda"
    out = []
    for ch in seen.values():
        said = (
            f"{Path(ch['file']).name}:{ch['line']} ({ch['code']}) sets {ch['setting']} from "
            f"{ch['from']} to {ch['to']}, after the mode was applied: "
        )
        if inert and ch["setting"] in CUDNN_FLAGS:
            said += (
                "a cuDNN flag acts on nothing on a CPU, where the script ran, so these runs "
                "measured the modes asked for; on a GPU every mode would run with it"
            )
        else:
            said += "every mode ran with it, so the mode measured was not the one asked for"
        out.append(said)
    return out


def hints(doc: dict[str, Any]) -> list[str]:
    """What replicates that differ in every mode point to."""
    parts = doc.get("partings") or {}
    modes = [m["name"] for m in doc["config"]["modes"]]
    if not modes or not all(parts.get(m) for m in modes):
        return []
    boot = next((f.get("boot") for f in _runs(doc) if f.get("boot")), None) or {}
    seeds = {s["call"] for s in boot.get("seeds") or []}
    out = []
    missing = [
        c for c in ("torch.manual_seed", "random.seed", "numpy.random.seed") if c not in seeds
    ]
    if missing:
        out.append(f"no call of {', '.join(missing)} was seen: unseeded generators")
    for dl in boot.get("dataloaders") or []:
        where = f"{Path(dl['file']).name}:{dl['line']}"
        if dl["shuffle"] and not dl["generator"]:
            out.append(f"the DataLoader at {where} shuffles without a generator: data order")
        if dl["num_workers"] and not dl["worker_init_fn"]:
            out.append(
                f"the DataLoader at {where} has {dl['num_workers']} workers and no "
                "worker_init_fn: their generators"
            )
    return out


def census_rows(doc: dict[str, Any]) -> list[list[str | Code]]:
    census = (doc.get("census") or {}).get("boot") or {}
    return [
        [
            f"{e['op']}"
            + (f" (accumulate={e['accumulate']})" if e.get("accumulate") is not None else ""),
            e["phase"],
            str(e["count"]),
            str(e["steps"]),
            f"{Path(e['file']).name}:{e['line']}" if e.get("file") else "–",
            e.get("module") or "–",
        ]
        for e in census.get("census") or []
    ]


def exec_blocks(doc: dict[str, Any]) -> list[Block]:
    """The "Your command" section."""
    c = doc["config"]
    out: list[Block] = [
        Heading(2, "Your command"),
        Para(
            f"{' '.join(c['command'])} (in {c['cwd']}), {c['replicates']} rounds; in each, "
            "every mode once and the baseline a second time (the A/A copy), in an order "
            "balanced over the rounds (every mode in every place of a round alike), after one "
            "untimed run of the baseline. A verdict compares every item each run left, "
            "bitwise; a cost is the geometric mean over rounds of the baseline's time over the "
            "mode's (the command's own time, its start-up apart), with a 95% t-interval over "
            "the rounds."
        ),
        Table(HEADER, mode_rows(doc)),
    ]
    warning = aa_warning(doc)
    if warning:
        out.append(Para(warning[0].upper() + warning[1:]))
    aside = sorted(
        {
            re.sub(r" \(\d+, first on line \d+\)", "", s)
            for f in _runs(doc)
            for s in f.get("set_aside") or []
        }
    )
    if aside:
        out.append(Para("Set aside, never equal between runs: " + "; ".join(aside) + "."))
    changes = changes_lines(doc)
    if changes:
        out += [Para("The script sets these itself:", alert=True), Bullets(changes)]
    why = hints(doc)
    if why:
        out += [
            Para(f"Every mode's replicates differ. What that points to (see {RECIPE}):"),
            Bullets(why),
        ]
    rows = census_rows(doc)
    if rows:
        out += [
            Para(
                "Ops the script calls that the installed torch documents as nondeterministic "
                "by default on their device, counted in an untimed run of the baseline, whether "
                "or not the runs above agreed:"
            ),
            Table(["op", "phase", "calls", "steps", "line", "module"], rows),
        ]
    elif failed := census_failed(doc):
        out.append(Para(f"The run that counts the ops that can race failed: {failed}."))
    elif doc.get("census"):
        out.append(Para("No op documented as nondeterministic on its device was called."))
    return out


def census_failed(doc: dict[str, Any]) -> str | None:
    """Why the run that counts the ops that can race failed, or None."""
    census = doc.get("census")
    if not census or census.get("status") == "ok":
        return None
    return census_failure(census)


def summary_text(d: Path) -> str:
    """The console's summary of an exec run."""
    doc = load(d)
    if doc is None:
        return ""
    lines = []
    for row in mode_rows(doc):
        lines.append(f"{row[0]}: {row[1]}; throughput {row[5]}; steps/s {row[6]}")
        if row[2] != "–":
            lines.append(f"    {row[2]}")
    if warning := aa_warning(doc):
        lines.append(f"warning: {warning}")
    lines += [f"warning: {x}" for x in changes_lines(doc)]
    lines += [f"points to: {x}" for x in hints(doc)]
    for r in census_rows(doc):
        lines.append(f"can race: {r[0]} ({r[1]}), {r[2]} calls in {r[3]} steps at {r[4]}")
    if failed := census_failed(doc):
        lines.append(f"can race: not counted, that run failed ({failed})")
    elif doc.get("census") and not census_rows(doc):
        lines.append("can race: no op that torch documents as nondeterministic on its device")
    return "\n".join(str(x) for x in lines)
