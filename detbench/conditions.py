"""The report's sections on the conditions of a run, beside its results: the warnings a reader
must see before citing a number, the float32 precision the modes ran in, the measurement's
quality (spread across replicates, timing intervals), the method and the environment, GPU state
included.

Each reads the fields of env.json and of the records (see ``detbench.quality``) and leaves out
what an older run did not record, so an old run's report keeps its old sections unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench import analysis, quality
from detbench.modes import CUBLAS_ENV, DEFAULT_MODE
from detbench.recommend import RULE
from detbench.render import Block, Bullets, Code, Heading, Para, Table, num
from detbench.results import env_facts

#: How the report names a record's ``precision`` values.
PRECISION_WORDS = {"tf32": "TF32", "ieee": "full fp32 (IEEE)", "n/a": "n/a"}


def _joined(values: list[Any], unit: str = "") -> str:
    return " / ".join(f"{v}{unit}" for v in values) if values else "not recorded"


# --- Precision ---------------------------------------------------------------------------------


def _precision_words(ps: list[tuple[str, ...]]) -> str:
    """``[("tf32", "ieee")]`` -> "matmuls in TF32 and convolutions in full fp32 (IEEE)"."""
    return " or ".join(
        f"matmuls in {PRECISION_WORDS.get(m, m)} and convolutions in {PRECISION_WORDS.get(c, c)}"
        for m, c in ps
    )


def precision_blocks(df: pd.DataFrame, baseline: str | None = None) -> list[Block]:
    """What float32 matmuls and convolutions ran in under the baseline mode (of every relative
    throughput; ``analysis.baseline_mode`` when None). Nothing for runs that did not record
    it."""
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
    """A warning when the modes of one run did not all run float32 in the same precision: their
    throughput ratios then mix precision with determinism."""
    groups: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    for mode, ps in quality.precision_by_mode(df).items():
        groups.setdefault(tuple(ps), []).append(mode)
    if len(groups) < 2:
        return None
    parts = [f"{_precision_words(list(ps))} under {', '.join(ms)}" for ps, ms in groups.items()]
    return (
        "The modes did not all run float32 in the same precision: "
        + "; ".join(parts)
        + ". A throughput ratio between these groups mixes the cost of precision with the cost "
        "of determinism (e.g. cuDNN convolutions in TF32 against their non-cuDNN fallback in "
        "full fp32)."
    )


# --- Warnings ----------------------------------------------------------------------------------


def warnings(df: pd.DataFrame, v: pd.DataFrame, env: dict[str, Any],
             costs: pd.DataFrame) -> list[str]:  # fmt: skip
    """What a reader must know before trusting or citing the numbers."""
    out: list[str] = []
    facts = env_facts(env)
    options = env.get("options") or {}
    if facts["device"] == "cpu":
        out.append(
            "This run was on a CPU. The cuDNN flags have no effect there, so modes that differ "
            "only in them measure the same thing, and their throughput differences are noise; "
            "they are never recommended. Run on a GPU for the costs that matter."
        )
    throttle = quality.throttle_lines(env)
    if throttle:
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
    modes = set(v["mode"])
    baseline = analysis.baseline_mode(modes)
    if DEFAULT_MODE.name not in modes:
        out.append(
            f"The {DEFAULT_MODE.name!r} mode was not run: every relative throughput, cost and "
            f"recommendation is measured against {baseline!r} instead."
        )
    det = {
        m for m in modes if (x := analysis.mode_of(m)) is not None and x.deterministic_algorithms
    }
    broken = v[(v["verdict"] == "nondeterministic") & v["mode"].isin(det)]
    for (suite, workload), g in broken.groupby(["suite", "workload"], sort=False):
        out.append(
            f"{suite}/{workload} was not bitwise reproducible even with deterministic algorithms "
            f"on ({', '.join(g['mode'])}): the nondeterminism comes from somewhere PyTorch's "
            "flags do not reach (seeding, threads, data order, the workload itself)."
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
        out.append(f"{len(g)} (workload, mode) pairs ended as '{status}': see Failures.")
    single = ran[ran["verdict"] == "single"]
    if len(single):
        out.append(
            f"{len(single)} (workload, mode) pairs had only one successful replicate: their "
            "run-to-run behaviour is unknown."
        )
    if len(costs):
        noisy = int(costs["noisy"].sum())
        if noisy:
            out.append(
                f"{noisy} of {len(costs)} costs are marked noisy: a replicate's timing samples "
                f"had an interquartile range above {analysis.NOISY_IQR:.0%} of their median."
            )
        nonbase = costs[costs["mode"] != baseline]
        insig = int((~nonbase["significant"]).sum())
        if insig:
            out.append(
                f"{insig} of {len(nonbase)} throughput differences from the {baseline} mode are "
                "not significant (the 95% interval contains 1)."
            )
    tq = quality.timing_quality(df)
    if len(tq) and tq["missed"].sum():
        rule = quality.stopping_rule(df, options)
        targets = _joined([f"±{100 * float(t):g}%" for t in rule["target_rel"]])
        out.append(
            f"{int(tq['missed'].sum())} of {int(tq['timed'].sum())} timed records hit the "
            f"timing budget ({_joined(rule['budget'], ' s')}) before the 95% interval of their "
            f"median step time reached {targets}: their figures are less certain (see Timing)."
        )
    mixed = precision_warning(df)
    if mixed:
        out.append(mixed)
    precision = (env.get("worker") or {}).get("precision") or {}
    if (
        not quality.precision_by_mode(df)  # the records say it more exactly; see Precision
        and facts["device"] == "cuda"
        and (precision.get("cuda_matmul_allow_tf32") or precision.get("cudnn_allow_tf32"))
    ):
        out.append(
            "TF32 was allowed (torch's defaults, left as they were: cuDNN "
            f"{precision.get('cudnn_allow_tf32')}, "
            f"cuBLAS {precision.get('cuda_matmul_allow_tf32')}):"
            " it changes float32 results against full precision, not their reproducibility."
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
    if options.get("replicates", 3) < 3:
        out.append(
            f"Only {options.get('replicates')} replicates per mode: a rare nondeterministic "
            "outcome can go unseen; use 3 or more for a report you publish."
        )
    return out


def settings_changed_warnings(v: pd.DataFrame) -> list[str]:
    """One warning per (workload, mode) with records whose workload changed a setting that the
    mode applied (``settings_changed``), naming the settings: those records are not counted."""
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


# --- Measurement quality -----------------------------------------------------------------------


def spread_table(df: pd.DataFrame) -> Table | None:
    """Per suite and mode: the geometric mean relative throughput within each replicate, its
    min and max, next to the pooled estimate."""
    baseline = str(analysis.baseline_mode(df["mode"]))
    s = quality.replicate_spread(analysis.counted(df), baseline)
    if s.empty:
        return None
    rows: list[list[str | Code]] = []
    for r in s[s["mode"] != baseline].to_dict("records"):  # the baseline's is 1 always
        per = r["per_replicate"]
        rows.append([
            str(r["suite"]), str(r["mode"]), num(r["pooled"], ".3f"), num(r["min"], ".3f"),
            num(r["max"], ".3f"), num(r["max"] / r["min"], ".2f") + "x",
            ", ".join(f"{k}: {num(x, '.3f')}" for k, x in per.items()), str(r["workloads"]),
        ])  # fmt: skip
    return Table(
        ["suite", "mode", "pooled", "min", "max", "max/min", "replicate: value", "workloads"],
        rows,
        caption=f"throughput relative to the {baseline} mode (geometric mean over the suite's "
        "workloads): pooled over replicates, and within each replicate",
    )


def _half_width(x: Any) -> str:
    """A relative half-width as a percentage to 0.1 (targets are 1% on a GPU, 3% on a CPU)."""
    return "–" if x is None else f"±{100 * float(x):.1f}%"


def timing_table(df: pd.DataFrame) -> Table | None:
    tq = quality.timing_quality(df)
    if tq.empty:
        return None
    rows: list[list[str | Code]] = []
    for r in tq.to_dict("records"):
        rows.append([
            str(r["suite"]), str(r["timed"]), str(r["reached"]), str(r["missed"]),
            _half_width(r["median_ci_rel"]), _half_width(r["max_ci_rel"]),
        ])  # fmt: skip
    return Table(
        ["suite", "timed records", "reached the target", "hit the budget first",
         "median 95% interval", "widest 95% interval"],
        rows,
        caption="95% interval of each record's median step time, as a fraction of the median",
    )  # fmt: skip


def quality_blocks(df: pd.DataFrame, env: dict[str, Any]) -> list[Block]:
    """How much each mode's cost moved between replicates, and how well the timing converged."""
    blocks: list[Block] = []
    baseline = analysis.baseline_mode(df["mode"])
    spread = spread_table(df)
    if spread is not None:
        order = env.get("mode_order") or {}
        how = (
            f"The modes ran in a shuffled order in each replicate (seed {order.get('seed')}), "
            "so a slow period of the machine lands on different modes in different replicates "
            "and widens their spread instead of biasing one mode."
            if order.get("replicates")
            else "The modes ran in the same order in every replicate (this run predates "
            "shuffling), so a slow period at the same point of each replicate biases the modes "
            "that ran then."
        )
        blocks += [
            Heading(3, "Spread across replicates"),
            Para(
                f"Each mode's throughput relative to the {baseline} mode, computed within each "
                f"replicate (the mode and the {baseline} mode measured in the same replicate) and "
                "pooled over replicates. Modes that are the same computation (on a CPU, those "
                f"that differ only in cuDNN flags) should agree: a wide spread is drift. {how} "
                "The pooled figure is the ratio of the medians over replicates (as in the tables "
                "above), so it can fall outside the per-replicate range."
            ),
            spread,
        ]
    timing = timing_table(df)
    if timing is not None:
        missed = (env.get("run_stats") or {}).get("timing_target_missed")
        blocks += [
            Heading(3, "Timing"),
            Para(
                "Each record was sampled until the 95% interval of its median step time was "
                "within the target, or until the budget ran out (see Method)."
                + (
                    f" The runner counted {missed} records that hit the budget first "
                    "(run_stats, last session)."
                    if missed is not None
                    else ""
                )
            ),
            timing,
        ]
    agreement = quality.fingerprint_agreement(df)
    if not agreement.empty:
        n, agree = len(agreement), int(agreement["agree"].sum())
        steps = int(agreement["steps_agree"].sum())
        differ = agreement[~agreement["agree"] | ~agreement["steps_agree"]]
        blocks += [
            Heading(3, "Fingerprints checked against sha256"),
            Para(
                "This run recorded both fingerprints of every record (--fingerprint both). The "
                f"device digest and sha256 split the replicates the same way for {agree} of {n} "
                f"(workload, mode) pairs, and step by step for {steps} of {n}; "
                f"{int((agreement['device_distinct'] > 1).sum())} pairs were nondeterministic "
                "by both."
                + (
                    " They disagree for: "
                    + ", ".join(f"{r.suite}/{r.workload} [{r.mode}]" for r in differ.itertuples())
                    if len(differ)
                    else ""
                )
            ),
        ]
    return [Heading(2, "Measurement quality"), *blocks] if blocks else []


# --- Method ------------------------------------------------------------------------------------

FINGERPRINT_WORDS = {
    "device": "computed where the tensor lives, with integer arithmetic whose result does not "
    "depend on the order of the reduction",
    "sha256": "sha256 on the host",
}


def _timing_item(df: pd.DataFrame, o: Mapping[str, Any]) -> str:
    rule = quality.stopping_rule(df, o)
    if not rule:
        return (
            "Timing: torch.utils.benchmark.Timer.blocked_autorange with at least "
            f"{o.get('min_run_time')} s of samples after {o.get('warmup_steps')} warm-up steps, "
            "the device synchronised around each block; the figure per replicate is the median "
            "step time, and a mode's throughput is the median over replicates."
        )
    targets = _joined([f"±{100 * float(t):g}%" for t in rule["target_rel"]])
    return (
        f"Timing: after {_joined(rule['warmup_steps'])} warm-up steps, samples (clock: "
        f"{_joined(rule['clock'])}) until the 95% interval of the median step time is within "
        f"{targets} of the median, with at least {_joined(rule['min_samples'])} samples and at "
        f"most {_joined(rule['budget'], ' s')} of sampling; the figure per replicate is the "
        "median step time, and a mode's throughput is the median over replicates."
    )


def method_blocks(df: pd.DataFrame, env: dict[str, Any]) -> list[Block]:
    o = env.get("options") or {}
    stats = env.get("run_stats") or {}
    facts = env_facts(env)
    order = env.get("mode_order") or {}
    methods = (
        [str(m) for m in dict.fromkeys(df["fingerprint_method"].dropna())]
        if "fingerprint_method" in df.columns
        else []
    )
    digest = (
        "a digest taken over the dtype, shape and bits of every output of every step ("
        + "; ".join(f"{m}: {FINGERPRINT_WORDS.get(m, m)}" for m in methods)
        + ")"
        if methods
        else "a sha256 taken over the dtype, shape and bytes of every output of every step"
    )
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
        _timing_item(df, o),
        "Intervals: 95% percentile intervals of the throughput ratio against the "
        f"{analysis.baseline_mode(df['mode'])} mode "
        "from 2000 two-level bootstrap resamples (replicates, then the timing samples within "
        "each), drawn independently for the mode and the baseline, with a fixed seed. A "
        "difference is significant when the interval excludes 1; a cost is noisy when a "
        f"replicate's samples have an IQR above {analysis.NOISY_IQR:.0%} of their median.",
        f"Recommendations: {RULE}. Per suite, a mode qualifies when it is reproducible for "
        "every workload; its throughput is the geometric mean over the workloads. The intervals "
        "compared there are each mode's own: its bootstrap throughput over the baseline's point "
        "estimate (the baseline divides out of a comparison of two modes), per suite of the "
        "geometric mean with each workload resampled; a fixed seed per workload and mode.",
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
            f"replicates and its ratio to the {analysis.baseline_mode(df['mode'])} mode's."
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


# --- Environment -------------------------------------------------------------------------------


def _before_after(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, key: str,
                  unit: str) -> str:  # fmt: skip
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
    """The GPU's clocks, power and temperature before and after the run; "not recorded" (with
    the reason) where the run has no snapshot. Nothing for an older CPU run."""
    state = env.get("gpu_state")
    if state is None:
        return [["GPU state", "not recorded"]] if env_facts(env)["device"] == "cuda" else []
    before, after = quality.gpu_snapshot(env, "before"), quality.gpu_snapshot(env, "after")
    if before is None and after is None:
        why = (state or {}).get("reason") or "no NVML"
        return [["GPU state", f"not recorded ({why})"]]
    return [
        ["GPU state (before → after the run)", f"from {state.get('source')}"],
        ["SM clock", _before_after(before, after, "sm_clock_mhz", "MHz")
         + f" (max {num((before or after or {}).get('max_sm_clock_mhz'), '.4g')} MHz)"],
        ["memory clock", _before_after(before, after, "mem_clock_mhz", "MHz")],
        ["power limit", _before_after(before, after, "power_limit_w", "W")],
        ["power draw", _before_after(before, after, "power_draw_w", "W")],
        ["temperature", _before_after(before, after, "temperature_c", "°C")],
        ["throttle reasons", f"{_reasons(before)} → {_reasons(after)}"],
    ]  # fmt: skip


def environment_table(env: dict[str, Any]) -> Table:
    facts = env_facts(env)
    host = env.get("host") or {}
    worker = env.get("worker") or {}
    git = env.get("git") or {}
    options = env.get("options") or {}
    collected = host.get("collect_env") or {}
    if worker.get("cuda_build"):  # torch.version.cuda (older runs: "cuda_runtime")
        facts["cuda"] = str(worker["cuda_build"])
    rows: list[list[str | Code]] = [[k, v if v is not None else "–"] for k, v in facts.items()]
    for key, label in (("cublas_version", "cuBLAS"), ("sm_count", "SM count"),
                       ("gpu_uuid", "GPU UUID"), ("mig_mode", "MIG mode")):  # fmt: skip
        if key in worker:
            rows.append([label, str(worker[key]) if worker[key] is not None else "unknown"])
    rows += gpu_state_rows(env)
    rows += [
        ["OS", str(collected.get("os") or host.get("platform") or "–")],
        ["CUBLAS_WORKSPACE_CONFIG (outside the modes)", str(worker.get("CUBLAS_WORKSPACE_CONFIG"))],
    ]
    if "inherited_cublas_workspace_config" in options:
        inherited = options["inherited_cublas_workspace_config"]
        rows.append([f"{CUBLAS_ENV} in the shell that started the run",
                     "not set" if inherited is None else str(inherited)])  # fmt: skip
    rows += [
        ["precision settings", Code(", ".join(
            f"{k}={v}" for k, v in sorted((worker.get("precision") or {}).items())))],
        ["detbench commit", str(git.get("commit"))[:12] + (" (dirty)" if git.get("dirty") else "")],
    ]  # fmt: skip
    return Table(["", "value"], rows)
