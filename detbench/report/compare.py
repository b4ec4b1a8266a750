"""``detbench compare DIR_A DIR_B``: two runs side by side (two GPUs, two torch versions). Every
difference of environment is a warning: the reader must know which facts changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import quality, stats
from detbench.core.modes import DEFAULT_MODE
from detbench.report.render import md_text, num, text_table
from detbench.store.identity import describe, differences, identity
from detbench.store.results import ENV_FACTS, env_facts, load_env, load_results

#: Environment facts whose difference is warned about, with the words used for them.
WARN_FACTS = {
    "gpu": "GPU",
    "driver": "driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "torch": "torch",
    "cpu_capability": "CPU capability",
}


@dataclass
class Comparison:
    a: Path
    b: Path
    facts_a: dict[str, str | None]
    facts_b: dict[str, str | None]
    table: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)


def compare(
    dir_a: str | Path, dir_b: str | Path, n_boot: int = stats.N_BOOT, seed: int = stats.SEED
) -> Comparison:
    """Compare run B with run A: ``change`` is B's throughput over A's (``stats.ratio``, seeded
    per comparison so that no row depends on the others)."""
    a, b = Path(dir_a), Path(dir_b)
    df_a, df_b = load_results(a), load_results(b)
    env_a = load_env(a) if (a / "env.json").exists() else {}
    env_b = load_env(b) if (b / "env.json").exists() else {}
    facts_a, facts_b = env_facts(env_a), env_facts(env_b)
    warnings = _env_warnings(env_a, env_b, facts_a, facts_b)

    va, vb = analysis.verdicts(df_a), analysis.verdicts(df_b)
    base_a = analysis.baseline_mode(va["mode"]) or DEFAULT_MODE.name
    base_b = analysis.baseline_mode(vb["mode"]) or DEFAULT_MODE.name
    va = va.assign(rel=analysis.relative_throughput(va, base_a))
    vb = vb.assign(rel=analysis.relative_throughput(vb, base_b))
    key = ["suite", "workload", "mode"]
    ka = set(map(tuple, va[key].to_numpy().tolist()))
    kb = set(map(tuple, vb[key].to_numpy().tolist()))
    only_a = ["/".join(map(str, k)) for k in va[key].to_numpy().tolist() if tuple(k) not in kb]
    only_b = ["/".join(map(str, k)) for k in vb[key].to_numpy().tolist() if tuple(k) not in ka]

    groups_a = {k: g for k, g in df_a.groupby(key, sort=False)}
    groups_b = {k: g for k, g in df_b.groupby(key, sort=False)}
    ib = vb.set_index(key)
    rows: list[dict[str, Any]] = []
    differing: dict[str, str] = {}
    for r in va.to_dict("records"):
        k = (r["suite"], r["workload"], r["mode"])
        if k not in kb:
            continue
        rb = ib.loc[k]  # type: ignore[index]
        ga, gb = groups_a[k], groups_b[k]
        unlike = _unlike(ga, gb, env_a, env_b)
        if unlike:
            differing[f"{r['suite']}/{r['workload']}"] = unlike
        rows.append(_row(r, rb, ga, gb, unlike, seed, n_boot))
    if differing:
        n = len(differing)
        warnings.append(
            f"{n} workload{'s are' if n != 1 else ' is'} not the same in A and B and "
            f"{'are' if n != 1 else 'is'} not compared on throughput: "
            + "; ".join(f"{w} ({why})" for w, why in sorted(differing.items()))
        )
    return Comparison(a, b, facts_a, facts_b, pd.DataFrame(rows), warnings, only_a, only_b)


def _env_warnings(
    env_a: dict[str, Any],
    env_b: dict[str, Any],
    facts_a: dict[str, str | None],
    facts_b: dict[str, str | None],
) -> list[str]:
    # On one device type a fact one run did not record (an older run) is unknown, not a
    # difference; across device types "none" says what is there (no GPU).
    same_device = facts_a["device"] == facts_b["device"]
    warnings = [
        f"the runs differ in {word}: {facts_a[k] or 'none'} (A) vs {facts_b[k] or 'none'} (B)"
        for k, word in WARN_FACTS.items()
        if facts_a[k] != facts_b[k] and not (same_device and None in (facts_a[k], facts_b[k]))
    ]
    if facts_a["device"] != facts_b["device"]:
        warnings.insert(
            0,
            f"the runs are on different devices: {facts_a['device']} (A) vs "
            f"{facts_b['device']} (B)",
        )
    warnings += gpu_warnings(env_a, env_b, same_model=facts_a["gpu"] == facts_b["gpu"])
    prof_a = (env_a.get("options") or {}).get("profile")
    prof_b = (env_b.get("options") or {}).get("profile")
    if prof_a != prof_b:
        warnings.append(
            f"the runs used different size profiles: {prof_a} (A) vs {prof_b} (B); workloads "
            "whose parameters differ are not compared"
        )
    return warnings


def _row(
    r: Mapping[Any, Any],
    rb: pd.Series,
    ga: pd.DataFrame,
    gb: pd.DataFrame,
    unlike: str,
    seed: int,
    n_boot: int,
) -> dict[str, Any]:
    """One (workload, mode) of both runs; compared on throughput only where ``unlike`` is ""."""
    row: dict[str, Any] = {
        "suite": r["suite"],
        "workload": r["workload"],
        "mode": r["mode"],
        "verdict_a": r["verdict"],
        "verdict_b": rb["verdict"],
        "verdict_changed": r["verdict"] != rb["verdict"],
        "items_per_second_a": r["items_per_second"],
        "items_per_second_b": rb["items_per_second"],
        **dict.fromkeys(("change", "ci_low", "ci_high", "significant")),
        "rel_default_a": r["rel"],
        "rel_default_b": rb["rel"],
        "comparable": not unlike,
        "benchmark": _autotuned(ga) or _autotuned(gb),
    }
    if not unlike:
        reps_a = analysis.replicate_samples(ga)
        reps_b = analysis.replicate_samples(gb)
        if reps_a and reps_b:
            name = stats.key(f"{r['suite']}/{r['workload']}", r["mode"], "run B", "run A")
            c = stats.ratio(reps_b, reps_a, name, seed, n_boot)
            row.update(change=c.point, ci_low=c.low, ci_high=c.high, significant=c.significant)
    return row


#: GPU facts compared beyond ``WARN_FACTS``: (env["worker"] or gpu_state, key, words, unit).
GPU_FACTS = (
    ("worker", "sm_count", "SM count (cuBLAS promises the same bits only on the same count)", ""),
    ("worker", "mig_mode", "MIG mode", ""),
    ("state", "max_sm_clock_mhz", "maximum SM clock", " MHz"),
    ("state", "power_limit_w", "power limit", " W"),
)


def gpu_warnings(env_a: dict[str, Any], env_b: dict[str, Any], same_model: bool) -> list[str]:
    """Differences in the GPUs themselves (a fact one run lacks is unknown) and throttling."""
    out: list[str] = []
    worker_a, worker_b = env_a.get("worker") or {}, env_b.get("worker") or {}
    state_a = quality.gpu_snapshot(env_a, "before") or quality.gpu_snapshot(env_a, "after") or {}
    state_b = quality.gpu_snapshot(env_b, "before") or quality.gpu_snapshot(env_b, "after") or {}
    for where, key, words, unit in GPU_FACTS:
        a, b = (worker_a, worker_b) if where == "worker" else (state_a, state_b)
        va, vb = a.get(key), b.get(key)
        if va is not None and vb is not None and va != vb:
            out.append(f"the runs differ in {words}: {va}{unit} (A) vs {vb}{unit} (B)")
    uuid_a, uuid_b = worker_a.get("gpu_uuid"), worker_b.get("gpu_uuid")
    if same_model and uuid_a and uuid_b and uuid_a != uuid_b:
        out.append(
            f"the runs are on two different GPUs of the same model: {uuid_a} (A) vs {uuid_b} (B)"
        )
    for name, env in (("A", env_a), ("B", env_b)):
        if lines := quality.throttle_lines(env):
            out.append(f"in run {name}, " + "; ".join(lines))  # "GPU 0 (...) held its clocks..."
    return out


def _autotuned(g: pd.DataFrame) -> bool:
    """Whether cuDNN's autotuner ran in any of ``g``'s records (it does nothing on a CPU)."""
    return bool(
        (g["benchmark"].eq(True) & g["cudnn_enabled"].ne(False) & g["device"].eq("cuda")).any()
    )


#: What makes a workload another one for its throughput: not the device (comparing a CPU with a
#: GPU is what a user may want), nor the seed.
THROUGHPUT_FIELDS = ("params", "profile", "source")


def _unlike(
    ga: pd.DataFrame, gb: pd.DataFrame, env_a: dict[str, Any], env_b: dict[str, Any]
) -> str:
    """How a workload's first record in A differs from its first in B ("" where it does not)."""
    ia, ib = identity(ga.iloc[0], env_a), identity(gb.iloc[0], env_b)
    return "; ".join(
        describe(f, ia[f], ib[f], "A", "B") for f in differences(ia, ib) if f in THROUGHPUT_FIELDS
    )


HEADER = (
    "workload",
    "mode",
    "items/s A",
    "items/s B",
    "B/A",
    "95% CI",
    "significant",
    "vs default A",
    "vs default B",
    "verdict A -> B",
)


def rows(c: Comparison) -> list[list[str]]:
    out = []
    for r in c.table.to_dict("records"):
        if pd.isna(r["significant"]):
            sig = "not comparable" if not r["comparable"] else "–"
        else:
            sig = "yes" if r["significant"] else "no"
        verdict = f"{r['verdict_a']} -> {r['verdict_b']}"
        changed = "CHANGED under cudnn.benchmark: " if r["benchmark"] else "CHANGED: "
        verdict = changed + verdict if r["verdict_changed"] else str(r["verdict_a"])
        out.append(
            [
                f"{r['suite']}/{r['workload']}",
                str(r["mode"]),
                num(r["items_per_second_a"], ".4g"),
                num(r["items_per_second_b"], ".4g"),
                num(r["change"], ".3f"),
                "–" if pd.isna(r["ci_low"]) else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
                sig,
                num(r["rel_default_a"], ".2f"),
                num(r["rel_default_b"], ".2f"),
                verdict,
            ]
        )
    return out


def summary_lines(c: Comparison) -> list[str]:
    t = c.table
    if t.empty:
        return ["no (workload, mode) pair is in both runs"]
    sig = t[t["significant"].astype(object).eq(True)]
    faster = int((sig["change"] > 1).sum())
    slower = int((sig["change"] < 1).sum())
    changed = t[t["verdict_changed"]]
    lines = [
        f"{len(t)} (workload, mode) pairs in both runs: {faster} significantly faster in B, "
        f"{slower} significantly slower, {len(t) - faster - slower} without a significant "
        f"change; {len(changed)} changed verdict."
    ]
    for r in changed.to_dict("records"):
        lines.append(
            f"verdict changed: {r['suite']}/{r['workload']} under {r['mode']}: "
            f"{r['verdict_a']} (A) -> {r['verdict_b']} (B)"
        )
    if tuned := int(changed["benchmark"].sum()) if len(changed) else 0:
        lines.append(
            f"{tuned} of the {len(changed)} changed verdicts are in modes with cudnn.benchmark "
            "on. It times candidate algorithms in each process and may pick another one in the "
            "next, so such a verdict can change between two runs on one GPU too: it is the "
            "autotuner's choice, not the GPU's."
        )
    for name, only in (("A", c.only_a), ("B", c.only_b)):
        if only:
            more = " ..." if len(only) > 10 else ""
            lines.append(f"only in {name} ({len(only)}): {', '.join(only[:10])}{more}")
    return lines


def _facts_line(f: dict[str, str | None]) -> str:
    return ", ".join(f"{k} {f[k]}" for k in ENV_FACTS if f.get(k))


def to_text(c: Comparison) -> str:
    lines = [f"A: {c.a}  ({_facts_line(c.facts_a)})", f"B: {c.b}  ({_facts_line(c.facts_b)})", ""]
    lines += [f"WARNING: {w}" for w in c.warnings]
    if c.warnings:
        lines.append("")
    lines += text_table([list(HEADER), *rows(c)])
    lines.append("")
    lines += summary_lines(c)
    return "\n".join(lines) + "\n"


def to_markdown(c: Comparison) -> str:
    lines = [
        "# detbench comparison",
        "",
        f"- **A**: `{c.a}`: {md_text(_facts_line(c.facts_a))}",
        f"- **B**: `{c.b}`: {md_text(_facts_line(c.facts_b))}",
        "",
    ]
    if c.warnings:
        lines += ["## Warnings", ""] + [f"- **{md_text(w)}**" for w in c.warnings] + [""]
    lines += ["## Summary", ""] + [f"- {md_text(s)}" for s in summary_lines(c)] + [""]
    lines += ["## Per workload and mode", ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "---|" * len(HEADER))
    lines += ["| " + " | ".join(md_text(x) for x in r) + " |" for r in rows(c)]
    lines += [
        "",
        "B/A: B's throughput over A's (median over replicates of each replicate's median); 95% "
        "interval from 2000 two-level bootstrap resamples of each run; significant when it "
        "excludes 1. 'vs default': each run's throughput relative to its own default mode.",
    ]
    return "\n".join(lines) + "\n"
