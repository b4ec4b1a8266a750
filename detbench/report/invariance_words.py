"""The sentences of the report's ``Batch invariance`` section (``detbench.report.invariance``),
from the numbers of ``detbench.analysis.invariance_table``: which workloads are batch invariant in
which modes, what each invariant reference costs, a decoder's distinct completions, and what a
mode's settings do against its base mode.
"""

from __future__ import annotations

import pandas as pd

from detbench import analysis
from detbench.report.invariance_tables import price_text, speed_text, value_range, verdict_cell


def _join(modes: list[str]) -> str:
    """Mode names, or "all N modes" past three (the modes are listed in the tables)."""
    return f"all {len(modes)} modes" if len(modes) > 3 else ", ".join(modes)


def _workload_words(w: str, m: pd.DataFrame) -> str:
    """Which modes ``w`` is batch invariant in, varies in, or did not run in."""
    ran = m[m["ran"] == True]  # noqa: E712
    if ran.empty:
        return f"{w} ran in no mode ({'; '.join(dict.fromkeys(str(x) for x in m['note']))})"
    modes = list(m["mode"])
    inv = list(ran.loc[ran["invariant"] == True, "mode"])  # noqa: E712
    var = ran[ran["invariant"] == False]  # noqa: E712
    if len(inv) == len(modes):
        return (
            f"{w} is batch invariant in {'every' if len(modes) > 1 else 'the'} mode"
            f" ({_join(modes)})"
        )
    if len(var) == len(modes):
        first = sorted({int(x) for x in var["first_variant_size"] if x is not None})
        det = bool(var["deterministic_algorithms"].map(lambda x: x is True).any())
        text = f"{w} is not batch invariant in any mode ({_join(modes)})"
        text += ", deterministic algorithms included" if det else ""
        return text + (f"; row 0 varies from batch {'/'.join(map(str, first))}" if first else "")
    text = f"{w} is batch invariant in {_join(inv) or 'no mode'}"
    if len(var):
        text += f" and not in {_join(list(var['mode']))}"
    rest = len(ran) - len(inv) - len(var)
    if rest:
        text += f" (no verdict in {rest} mode(s))"
    for note, nm in m[m["ran"] != True].groupby("note", sort=False):  # noqa: E712
        text += f" (did not run in {_join(list(nm['mode']))}: {note})"
    return text


def completion_words(w: str, m: pd.DataFrame) -> str:
    """The study's measure for a decoder: ``N distinct completions of the same request over K
    batch compositions, at X tokens/s``, per mode that ran."""
    said = []
    for r in m[(m["ran"] == True) & m["distinct_results"].notna()].to_dict("records"):  # noqa: E712
        d = int(r["distinct_results"])
        said.append(
            f"in {r['mode']}, {d} distinct completion{'s' if d != 1 else ''} of the same "
            f"request over {len(r['batch_sizes'])} batch compositions, at {speed_text(r)}"
        )
    return f"{w}: " + "; ".join(said) if said else ""


def _added(mode: str, base: str) -> str:
    """The settings ``mode`` has beyond ``base`` (``inductor_batch_invariant=on`` for
    ``default[execution=compile,inductor_batch_invariant=on]`` against
    ``default[execution=compile]``)."""
    m, b = analysis.mode_of(mode), analysis.mode_of(base)
    if m is None or b is None:
        return mode.partition("[")[2].rstrip("]") or mode
    extra = [f"{n}={v}" for n, v in m.settings if (n, v) not in set(b.settings)]
    return ",".join(extra) or mode


def setting_words(mode: str, m: pd.DataFrame) -> str:
    """What a mode's settings do to batch invariance against its base mode, workload by
    workload, and at what price."""
    base = str(m["base_mode"].iloc[0])
    setting = _added(mode, base)
    head = f"The setting {setting} ({mode} against {base})"
    parts: list[str] = []
    was = m["base_mode_invariant"] == True  # noqa: E712
    now = m["invariant"] == True  # noqa: E712
    for r in m[~was & now].to_dict("records"):
        parts.append(
            f"makes {r['workload']} batch invariant, at {price_text(r, 'setting_price')}"
            f" the throughput of {base}"
        )
    for r in m[~was & ~now].to_dict("records"):
        what = (
            "the setting does not make it invariant on this device"
            if r["ran"]
            else (f"it did not run with the setting ({r['note']})")
        )
        price = f"; {price_text(r, 'setting_price')} the throughput of {base}" if r["ran"] else ""
        parts.append(f"{r['workload']}: {what} ({verdict_cell(r)}{price})")
    for r in m[was & ~now].to_dict("records"):
        parts.append(f"{r['workload']} is invariant in {base} but not with it ({verdict_cell(r)})")
    kept = int((was & now).sum())
    if kept:
        parts.append(f"{kept} workload(s) invariant in {base} stay invariant (prices in the table)")
    return head + ": " + "; ".join(parts)


def conclusions(t: pd.DataFrame) -> dict[str, list[str]]:
    """Per suite, sentences from the numbers: which workloads are batch invariant in which
    modes, what each invariant reference costs (and whether it is invariant itself), a
    decoder's distinct completions and tokens/s, and what each mode's settings do against its
    base mode."""
    out: dict[str, list[str]] = {}
    for suite, g in t.groupby("suite", sort=False):
        parts: list[str] = []
        ran = set(g.loc[g["ran"] == True, "workload"])  # noqa: E712
        refs = g[g["reference_of"].notna() & g["workload"].isin(ran)]
        for w, m in g[g["reference_of"].isna() & g["workload"].isin(ran)].groupby(
            "workload", sort=False
        ):
            text = _workload_words(str(w), m)
            for rw, rm in refs[refs["reference_of"] == w].groupby("workload", sort=False):
                rm = rm[rm["ran"] == True]  # noqa: E712
                rs = rm.to_dict("records")
                prices = "; ".join(f"{price_text(r)} in {r['mode']}" for r in rs[:1])
                if len(rs) > 1:
                    spread = value_range([r["price"] for r in rs], ".2f", "x")
                    prices += f" ({spread} over the {len(rs)} modes it ran in)"
                text += f"; its invariant reference {rw} costs {prices}"
                bad = [r["mode"] for r in rm.to_dict("records") if r["invariant"] is not True]
                if bad:
                    text += (
                        f", but {rw} is NOT batch invariant itself in {_join(bad)}, "
                        "so that is not the price of invariance"
                    )
            parts.append(text)
        orphans = refs[~refs["reference_of"].isin(ran)]
        for rw, rm in orphans.groupby("workload", sort=False):
            parts.append(
                f"{_workload_words(str(rw), rm)}; it is the invariant reference of "
                f"{rm['reference_of'].iloc[0]}, which ran in no mode with a batch "
                "verdict: no price"
            )
        idle = g[~g["workload"].isin(ran)]
        for note, m in idle.groupby(idle["note"].astype(str), sort=False):
            names = ", ".join(dict.fromkeys(m["workload"]))
            parts.append(f"Ran in no mode: {names} ({note})")
        for w, m in g[g["completion"] == True].groupby("workload", sort=False):  # noqa: E712
            parts.append(completion_words(str(w), m))
        for mode, m in g[g["base_mode"].notna()].groupby("mode", sort=False):
            parts.append(setting_words(str(mode), m))
        out[str(suite)] = [p + "." for p in parts if p]
    return out
