"""The conditions of a run: the warnings a reader must see before citing a number, and the
float32 precision the modes ran in. What an older run did not record is left out."""

from __future__ import annotations

from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import cause, engines, quality
from detbench.analysis.busy import host_load
from detbench.core.modes import CUBLAS_ENV, DEFAULT_MODE
from detbench.report.render import Block, Para
from detbench.store.results import env_facts

#: How the report names a record's ``precision`` values.
PRECISION_WORDS = {"tf32": "TF32", "ieee": "full fp32 (IEEE)", "n/a": "n/a"}


def of(n: int, total: int, noun: str) -> str:
    """A warning's subject: "3 of 18 timed records", "The one timed record"."""
    return f"The one {noun}" if total == 1 else f"{n} of {total} {noun}s"


def pairs(n: int) -> str:
    return f"{n} (workload, mode) pair{'' if n == 1 else 's'}"


def be(n: int) -> str:
    return "is" if n == 1 else "are"


def _precision_words(ps: list[tuple[str, ...]]) -> str:
    """``[("tf32", "ieee")]`` -> "matmuls in TF32 and convolutions in full fp32 (IEEE)"."""
    return " or ".join(
        f"matmuls and convolutions in {PRECISION_WORDS.get(m, m)}"
        if m == c
        else f"matmuls in {PRECISION_WORDS.get(m, m)} and convolutions in "
        f"{PRECISION_WORDS.get(c, c)}"
        for m, c in ps
    )


def precision_blocks(df: pd.DataFrame, baseline: str | None = None) -> list[Block]:
    """What float32 matmuls and convolutions ran in under the baseline mode, where recorded."""
    baseline = analysis.baseline_mode(df["mode"]) if baseline is None else baseline
    base = quality.precision_by_mode(df).get(str(baseline))
    if not base:
        return []
    return [
        Para(
            f"Precision of the baseline: the {baseline} mode ran float32 "
            f"{_precision_words(base)} (as each record says; TF32 keeps 10 of float32's 23 "
            "mantissa bits of a product's inputs)."
        )
    ]


def precision_warning(df: pd.DataFrame) -> str | None:
    """A warning when the modes did not all run float32 in the same precision."""
    groups: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    for mode, ps in quality.precision_by_mode(df).items():
        groups.setdefault(tuple(ps), []).append(mode)
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda g: len(g[1]))
    parts = []
    for i, (kinds, ms) in enumerate(ordered):
        last = i == len(ordered) - 1 and len(ms) > 3
        who = f"the other {len(ms)} modes" if last else _and(ms)
        parts.append(f"{who} ran {_precision_words(list(kinds))}")
    return (
        "The modes did not all run float32 in the same precision: "
        + "; ".join(parts)
        + ". A throughput ratio between these groups mixes the cost of precision with the cost "
        "of determinism (e.g. cuDNN convolutions in TF32 against their non-cuDNN fallback in "
        "full fp32)."
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def warnings(
    df: pd.DataFrame, v: pd.DataFrame, env: dict[str, Any], costs: pd.DataFrame
) -> list[str]:
    """What a reader must know before citing the numbers, in the order they rest on it."""
    facts = env_facts(env)
    options = env.get("options") or {}
    out = _run_warnings(
        env, facts, timed_once="timed_as" in df and bool(df["timed_as"].notna().any())
    )
    # The answer says it too, first; the console prints this list.
    load = host_load(df, env.get("paired_lines"))
    if load is not None and load.is_busy:
        out.insert(0, load.sentence())
    modes = set(v["mode"])
    baseline = analysis.baseline_mode(modes)
    if DEFAULT_MODE.name not in modes:
        out.append(
            f"The {DEFAULT_MODE.name!r} mode was not run: every relative throughput, cost and "
            f"recommendation is measured against {baseline!r} instead."
        )
    out += _verdict_warnings(df, v, modes)
    out += _timing_warnings(costs, baseline)
    out += _precision_warnings(df, env, facts, baseline)
    if options.get("replicates", 3) < 3:
        out.append(
            f"Only {options.get('replicates')} replicates per mode: a rare nondeterministic "
            "outcome can go unseen; use 3 or more for a report you publish."
        )
    return out


def _run_warnings(
    env: dict[str, Any], facts: dict[str, str | None], timed_once: bool = False
) -> list[str]:
    """``timed_once``: the paired phase timed each computation once (``acts.timed_as``)."""
    out: list[str] = []
    if facts["device"] == "cpu":
        out.append(
            "This run was on a CPU. The cuDNN flags have no effect there, so modes that differ "
            "only in them measure the same thing, and their throughput differences are noise; "
            "they are never recommended. Run on a GPU for the costs that matter."
            + (
                " This run timed each such computation once, as the first mode that runs it: "
                "the others' costs say which mode they were timed as."
                if timed_once
                else ""
            )
        )
    if throttle := quality.throttle_lines(env):
        out.append(
            "The GPU throttled during the run, so modes measured while it did look slower than "
            "they are (see the GPU state under Environment): " + "; ".join(throttle)
        )
    if not env.get("finished_utc"):
        out.append(
            "The run did not finish (interrupted or still running): the results are partial."
        )
    git = env.get("git") or {}
    if git.get("dirty"):
        out.append(
            f"The detbench checkout had uncommitted changes (commit {str(git.get('commit'))[:12]})."
        )
    return out


def _verdict_warnings(df: pd.DataFrame, v: pd.DataFrame, modes: set[str]) -> list[str]:
    out: list[str] = []
    det = {
        m for m in modes if (x := analysis.mode_of(m)) is not None and x.deterministic_algorithms
    }
    # Only where no switch the run varied separates reproducible from not (analysis.cause): a
    # named cause, cudnn.benchmark say, is told in the answer instead.
    loose = cause.unexplained(v, cause.causes(df, v))
    broken = loose[loose["mode"].isin(det)]
    for (suite, workload), g in broken.groupby(["suite", "workload"], sort=False):
        out.append(
            f"{suite}/{workload} was not bitwise reproducible even with deterministic algorithms "
            f"on ({', '.join(g['mode'])}), and no switch the run varied made it so. The "
            "nondeterminism comes from something PyTorch does not set: seeding, threads, data "
            "order or the workload itself."
        )
    if logged := int(engines.timings_logged(df).sum()):
        out.append(
            f"{logged} records were timed with cuDNN's API log on (--cudnn-log), which slows "
            "convolutions and changes what the autotuner picks: their timings are not costs."
        )
    out += settings_changed_warnings(v)
    ran = v[v["verdict"].isin(analysis.RAN)]
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        if not g["verdict"].isin(analysis.RAN).any():
            out.append(
                f"{suite}/{workload} ran in no mode ({', '.join(sorted(set(g['verdict'])))}): "
                "it is left out of its suite's recommendation."
            )
    failed = v[~v["verdict"].isin((*analysis.RAN, "settings_changed"))]
    for status, g in failed.groupby("verdict", sort=False):
        out.append(f"{pairs(len(g))} ended with status {status} (see Failures).")
    single = ran[ran["verdict"] == "single"]
    if len(single):
        their = "its" if len(single) == 1 else "their"
        out.append(
            f"{pairs(len(single))} had only one successful replicate, so {their} run-to-run "
            "behaviour is unknown."
        )
    return out


def _timing_warnings(costs: pd.DataFrame, baseline: str | None) -> list[str]:
    out: list[str] = []
    # A cost is a mode's against the baseline: the baseline's own row (1 by definition) is none.
    costs = costs[costs["mode"] != baseline] if len(costs) else costs
    if len(costs):
        if noisy := int(costs["noisy"].sum()):
            out.append(
                f"{of(noisy, len(costs), 'cost')} {be(noisy)} marked noisy: a "
                "replicate's timing samples had an interquartile range above "
                f"{analysis.NOISY_IQR:.0%} of their median."
            )
        if insig := int((~costs["significant"]).sum()):
            out.append(
                f"{of(insig, len(costs), 'throughput difference')} from the "
                f"{baseline} mode {be(insig)} not significant (the 95% interval contains 1)."
            )
    return out


def _precision_warnings(
    df: pd.DataFrame, env: dict[str, Any], facts: dict[str, str | None], baseline: str | None
) -> list[str]:
    out: list[str] = []
    if mixed := precision_warning(df):
        out.append(mixed)
    precision = (env.get("worker") or {}).get("precision") or {}
    flags = (("cuDNN", "cudnn_allow_tf32"), ("cuBLAS", "cuda_matmul_allow_tf32"))
    allowed = [name for name, key in flags if precision.get(key)]
    # Where the records say the precision, they say it more exactly (see Precision).
    if allowed and facts["device"] == "cuda" and not quality.precision_by_mode(df):
        out.append(
            f"TF32 was allowed for {' and '.join(allowed)} (torch's defaults, left as they "
            "were): it changes float32 results against full precision, not their "
            "reproducibility."
        )
    column = CUBLAS_ENV.lower()
    if column in df.columns:
        base = df.loc[df["mode"] == baseline, column].dropna()
        if len(base):
            out.append(
                f"The {baseline} mode ran with {CUBLAS_ENV}={base.iloc[0]}: the baseline "
                "had cuBLAS's deterministic workspace too, so the cost of the modes that set it "
                "is understated."
            )
    return out


def settings_changed_warnings(v: pd.DataFrame) -> list[str]:
    """One warning per (workload, mode) whose workload changed a setting its mode applied."""
    out: list[str] = []
    if "changed" not in v.columns:
        return out
    for r in v[v["changed"] > 0].to_dict("records"):
        names = ", ".join(r["changed_settings"])
        where = (
            f"{r['suite']}/{r['workload']} under {r['mode']} changed {names} during the workload"
        )
        if r["changed"] >= r["replicates"]:
            out.append(f"{where}; its verdict is not counted.")
        else:
            out.append(
                f"{where} in {r['changed']} of {r['replicates']} replicates; those replicates "
                f"are not counted in its verdict ({r['verdict']})."
            )
    return out
