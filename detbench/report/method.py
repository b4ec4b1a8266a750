"""The report's Method (how a run was made) and Environment (where), from env.json and records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import earlier_design, paired_costs, quality
from detbench.analysis.recommend import RULE
from detbench.core.modes import CUBLAS_ENV
from detbench.report.aa_check import costs_item, secs
from detbench.report.render import Block, Bullets, Code, Heading, Table, num
from detbench.store.results import env_facts

FINGERPRINT_WORDS = {
    "device": "computed where the tensor lives, with integer arithmetic whose result does not "
    "depend on the order of the reduction",
    "sha256": "sha256 on the host",
}


def _range(lo: float, hi: float, unit: str = " s") -> str:
    a, b = secs(lo), secs(hi)
    return f"{a}{unit}" if a == b else f"{a}-{b}{unit}"


def _timing_item(df: pd.DataFrame) -> str | None:
    """What the records' paired timing sampled (``quality.sampled``); None where none has one."""
    got = quality.sampled(df)
    if got is None:
        return None
    lo, median, hi = got["seconds"]
    n_lo, n_hi = got["samples"]
    n = str(n_lo) if n_lo == n_hi else f"{n_lo}-{n_hi}"
    each = (
        f"each record sampled {secs(lo)} s"
        if secs(lo) == secs(hi)
        else f"the records sampled {_range(lo, hi)} each, median {secs(median)} s"
    )
    return (
        "Timing: side by side, in the paired phase (see Costs): a record's samples are its "
        f"worker's blocks, one a round, with no stopping rule; {each}, in {n} samples of "
        f"{_range(*got['block'])}. The figure per replicate is the median step time."
    )


def _digest_words(df: pd.DataFrame) -> str:
    methods = dict.fromkeys(df.get("fingerprint_method", pd.Series(dtype=object)).dropna())
    if not methods:
        return "a sha256 taken over the dtype, shape and bytes of every output of every step"
    words = "; ".join(f"{m}: {FINGERPRINT_WORDS.get(str(m), str(m))}" for m in methods)
    return f"a digest taken over the dtype, shape and bits of every output of every step ({words})"


def _intervals_item(df: pd.DataFrame, costs: pd.DataFrame | None) -> str:
    """How the intervals were made (the paired costs' t-intervals, where the run has any)."""
    baseline = analysis.baseline_mode(df["mode"])
    paired = costs is not None and len(costs) and (costs["design"] == paired_costs.DESIGN).any()
    said = (
        f"95% t-intervals of the paired ratio against the {baseline} mode on the replicates' "
        "median per-round ratios (replicates - 1 degrees of freedom; with one replicate, its "
        "rounds' median with the process level assumed at one round's robust spread, never "
        "narrower than the distribution-free interval of the median). "
        if paired
        else ""
    )
    return (
        f"Intervals: {said}A difference is significant when the interval excludes 1; a cost "
        f"is noisy when a replicate's samples have an IQR above {analysis.NOISY_IQR:.0%} of "
        "their median."
    )


def method_blocks(
    df: pd.DataFrame, env: dict[str, Any], costs: pd.DataFrame | None = None, aa_copy: bool = True
) -> list[Block]:
    o = env.get("options") or {}
    stats = env.get("run_stats") or {}
    facts = env_facts(env)
    order = env.get("mode_order") or {}
    digest = _digest_words(df)
    baseline = str(analysis.baseline_mode(df["mode"]))
    timing = [_timing_item(df), costs_item(df, env, baseline, aa_copy), earlier_design.words(costs)]
    items = [
        f"Modes: {', '.join(o.get('modes') or [])}. Each mode is applied once in a fresh worker "
        "process before any work, and checked against what torch reports.",
        f"Replicates: {o.get('replicates')} per mode, each in its own fresh process; "
        + (
            f"replicates are the outer loop, and the modes run in a shuffled order within each "
            f"(seed {order.get('seed')}; env.json mode_order), so a slow period of the machine "
            "widens the spread of the modes it meets instead of biasing them."
            if order.get("replicates")
            else "replicates are the outer loop and modes the inner one, so a slow period of "
            "the machine does not fall on one mode only."
        ),
        f"Reproducibility: every generator is seeded with {o.get('seed')} before each workload "
        f"is built; then {o.get('fingerprint_steps')} steps (training workloads: their own "
        f"count) are run and {digest}. A (workload, mode) is reproducible when every "
        "replicate's fingerprint is equal; the maximum absolute difference is measured against "
        "the first replicate.",
        *filter(None, timing),
        _intervals_item(df, costs),
        f"Recommendations: {RULE}. Per suite, a mode qualifies when it is reproducible for "
        "every workload; its throughput is the geometric mean over the workloads. The intervals "
        "compared there are each mode's own: its throughput's draws (those of its cost's 95% "
        "interval) over the baseline's point estimate (the baseline divides out of a "
        "comparison of two modes), per suite of the geometric mean with each workload "
        "resampled; a fixed seed per workload and mode.",
    ]
    if "settings_changed" in df.columns and df["settings_changed"].notna().any():
        items.append(
            "Settings read back: every setting is read back after each workload's build and "
            "after its last step. Records whose workload changed one the mode applied "
            "(settings_changed: a training script that turns deterministic algorithms off, or "
            "benchmark on) do not count toward their mode's verdict, throughput or memory; the "
            "Warnings name them."
        )
    if not analysis.peak_memory(df).empty:
        items.append(
            "Memory: each record's peak, measured over its workload alone. On a GPU, torch's "
            "peak allocated bytes (reset when the workload starts); on a CPU, how far the "
            "worker's peak RSS rose above its RSS at the workload's start, with the peak reset "
            "per workload through /proc/self/clear_refs (where Linux refuses that reset, the "
            "record says so in memory.peak_reset and its figure is a lower bound: 0 when an "
            "earlier workload of the worker peaked higher). The tables show the median over "
            f"replicates and its ratio to the {baseline} mode's."
        )
    items.append(
        f"Profile {o.get('profile')} on {facts['device']}; {len(df)} records, started "
        f"{env.get('started_utc')}, finished {env.get('finished_utc') or 'never'}"
        + (
            f", resumed {len(env['resumed_utc'])} time(s) ({', '.join(env['resumed_utc'])}); "
            f"the last session took {num(stats.get('wall'), '.0f')} s."
            if env.get("resumed_utc")
            else f"; {num(stats.get('wall'), '.0f')} s."
        )
    )
    if "seeding" in df.columns and (df["seeding"] == "recipe").any():
        suites = sorted(set(df.loc[df["seeding"] == "recipe", "suite"]))
        items.append(
            f"Seeding in {', '.join(suites)}: not done by detbench. Those workloads start from "
            "the generators' state in a fresh process (seeded from OS entropy) and seed as "
            "their recipe says; see Recipes."
        )
    return [Heading(2, "Method"), Bullets(items)]


def _before_after(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, key: str, unit: str
) -> str:
    """``before -> after unit`` (one value when they are equal); "–" for a missing side."""
    b = num((before or {}).get(key), ".4g")
    a = num((after or {}).get(key), ".4g")
    return f"{b} {unit}" if a == b else f"{b} → {a} {unit}"


def _reasons(snap: Mapping[str, Any] | None) -> str:
    if snap is None:
        return "–"
    reasons = snap.get("throttle_reasons")
    return ", ".join(map(str, reasons)) if reasons else "none"


def gpu_state_rows(env: dict[str, Any]) -> list[list[str | Code]]:
    """The GPU's clocks, power and temperature before and after the run."""
    state = env.get("gpu_state")
    if state is None:
        return [["GPU state", "not recorded"]] if env_facts(env)["device"] == "cuda" else []
    before, after = quality.gpu_snapshot(env, "before"), quality.gpu_snapshot(env, "after")
    if before is None and after is None:
        why = (state or {}).get("reason") or "no NVML"
        return [["GPU state", f"not recorded ({why})"]]
    return [
        ["GPU state (before → after the run)", f"from {state.get('source')}"],
        [
            "SM clock",
            _before_after(before, after, "sm_clock_mhz", "MHz")
            + f" (max {num((before or after or {}).get('max_sm_clock_mhz'), '.4g')} MHz)",
        ],
        ["memory clock", _before_after(before, after, "mem_clock_mhz", "MHz")],
        ["power limit", _before_after(before, after, "power_limit_w", "W")],
        ["power draw", _before_after(before, after, "power_draw_w", "W")],
        ["temperature", _before_after(before, after, "temperature_c", "°C")],
        ["throttle reasons", f"{_reasons(before)} → {_reasons(after)}"],
    ]


def cublas_words(df: pd.DataFrame | None, env: Mapping[str, Any]) -> tuple[str, str]:
    """The row on ``CUBLAS_WORKSPACE_CONFIG``: set per mode, so from the records if they say."""
    column = CUBLAS_ENV.lower()
    if df is not None and column in df.columns and len(df):
        by_value: dict[str, list[str]] = {}
        for mode in analysis.ordered_modes(df["mode"]):
            values = df.loc[df["mode"] == mode, column]
            seen = sorted({"not set" if v is None or pd.isna(v) else str(v) for v in values})
            by_value.setdefault(" or ".join(seen), []).append(str(mode))
        parts = [f"{v} in {', '.join(ms)}" for v, ms in by_value.items()]
        return f"{CUBLAS_ENV} (each mode's, from the records)", "; ".join(parts)
    worker = env.get("worker") or {}
    value = worker.get(CUBLAS_ENV)
    return (
        f"{CUBLAS_ENV} (in the first worker, which ran one mode)",
        "not set" if value is None else str(value),
    )


def _commit(git: Mapping[str, Any]) -> str:
    """The checkout's commit as env.json has it; never "None"."""
    commit = git.get("commit")
    if not commit:
        return "not recorded (detbench did not run from a git checkout)"
    return str(commit)[:12] + (" (dirty)" if git.get("dirty") else "")


def environment_table(env: dict[str, Any], df: pd.DataFrame | None = None) -> Table:
    facts = env_facts(env)
    host = env.get("host") or {}
    worker = env.get("worker") or {}
    git = env.get("git") or {}
    options = env.get("options") or {}
    collected = host.get("collect_env") or {}
    if worker.get("cuda_build"):  # torch.version.cuda (older runs: "cuda_runtime")
        facts["cuda"] = str(worker["cuda_build"])
    rows: list[list[str | Code]] = [[k, v if v is not None else "–"] for k, v in facts.items()]
    for key, label in (
        ("cublas_version", "cuBLAS"),
        ("sm_count", "SM count"),
        ("gpu_uuid", "GPU UUID"),
        ("mig_mode", "MIG mode"),
    ):
        if key in worker:
            rows.append([label, str(worker[key]) if worker[key] is not None else "unknown"])
    rows += gpu_state_rows(env)
    rows += [
        ["OS", str(collected.get("os") or host.get("platform") or "–")],
        list(cublas_words(df, env)),
    ]
    if "inherited_cublas_workspace_config" in options:
        inherited = options["inherited_cublas_workspace_config"]
        rows.append(
            [
                f"{CUBLAS_ENV} in the shell that started the run",
                "not set" if inherited is None else str(inherited),
            ]
        )
    precision = ", ".join(f"{k}={v}" for k, v in sorted((worker.get("precision") or {}).items()))
    rows += [["precision settings", Code(precision)], ["detbench commit", _commit(git)]]
    return Table(["", "value"], rows)
