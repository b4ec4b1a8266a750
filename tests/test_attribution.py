"""The attribution study: which variants it runs, the effects it reads from records, its report
section, and ``detbench attribute`` end to end on this CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from detbench.analysis import attribution as at
from detbench.cli import main as cli
from detbench.core.modes import get_mode
from detbench.core.workload import Workload, builtin_suite_files, load_file
from detbench.report import attribution as ar
from detbench.report.render import Details, Figure, Heading, Para, Table, to_markdown
from detbench.store.results import load_env, load_results
from tests import synthetic as syn
from tests.conftest import requires_cuda

TRANSFORMER = "training/transformer_encoder"
BN_EVAL = "batchnorm/batchnorm2d_eval_resnet50_stage1"


def suite_workloads(*suites: str) -> list[Workload]:
    files = builtin_suite_files()
    return [w for s in suites for w in load_file(files[s]) if w.suite == s]


def by_mode(study: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for v in study["variants"]:
        out.setdefault(v["mode"], []).append(v)
    return out


def test_cpu_study_of_batchnorm_and_training() -> None:
    workloads = suite_workloads("batchnorm", "training")
    assert [w.key for w in workloads if w.attention] == [TRANSFORMER]
    study = at.build_study("cpu", workloads)
    det = "cudnn-det+det-algos[sdpa_backend=math]"
    assert (study["kind"], study["default_end"], study["deterministic_end"]) == (
        "attribution", "default", det,
    )  # fmt: skip
    assert [m.name for m in at.study_modes(study)] == [
        "default",
        det,
        "det-algos",
        "default[sdpa_backend=math]",
        "cudnn-det[sdpa_backend=math]",
        "cudnn-det+det-algos[fill_uninitialized_memory=off,sdpa_backend=math]",
        "cudnn-det+det-algos[float32_matmul_precision=high,sdpa_backend=math]",
        "cudnn-det+det-algos[sdpa_backend=default]",
        "cudnn-det+det-algos[sdpa_backend=flash]",
        "cudnn-det+det-algos[sdpa_backend=efficient]",
        "cudnn-det+det-algos[sdpa_backend=cudnn]",
    ]
    v = by_mode(study)
    assert v["det-algos"] == [{
        "mode": "det-algos", "switch": "deterministic_algorithms", "level": "on",
        "end": "default", "direction": "added", "workloads": None,
    }]  # fmt: skip
    fill = v["cudnn-det+det-algos[fill_uninitialized_memory=off,sdpa_backend=math]"][0]
    assert (fill["switch"], fill["level"], fill["end"], fill["direction"]) == (
        "fill_uninitialized_memory", "off", "deterministic", "removed",
    )  # fmt: skip
    # The attention backends run only on the workload that calls SDPA.
    sdpa = [x for x in study["variants"] if x["switch"] == "sdpa_backend"]
    assert [(x["end"], x["level"]) for x in sdpa] == [
        ("default", "math"), ("deterministic", "default"), ("deterministic", "flash"),
        ("deterministic", "efficient"), ("deterministic", "cudnn"),
    ]  # fmt: skip
    assert all(x["workloads"] == [TRANSFORMER] for x in sdpa)
    assert at.only_for(study) == {x["mode"]: [TRANSFORMER] for x in sdpa}
    skipped = {(x["switch"], x["end"]): x["reason"] for x in study["skipped"]}
    assert (
        "acts only with deterministic algorithms"
        in skipped[("fill_uninitialized_memory", "default")]
    )
    assert "only on cuda" in skipped[("cudnn_deterministic", "default")]
    assert "only on cuda" in skipped[("cudnn_deterministic", "deterministic")]
    for name in ("cudnn_tf32", "cublas_workspace_config", "fp16_reduced_precision_reduction"):
        assert {(name, "default"), (name, "deterministic")} <= set(skipped)
    # Only the switches of the study are switches: no warn_only, autocast or execution.
    assert not {x["switch"] for x in study["variants"]} & {"warn_only", "autocast", "execution"}


def test_batchnorm_alone_has_no_attention_variants() -> None:
    study = at.build_study("cpu", suite_workloads("batchnorm"))
    assert study["deterministic_end"] == "cudnn-det+det-algos"
    assert not [x for x in study["variants"] if x["switch"] == "sdpa_backend"]
    assert at.only_for(study) == {}
    reasons = {(x["switch"], x["end"]): x["reason"] for x in study["skipped"]}
    assert "scaled_dot_product_attention" in reasons[("sdpa_backend", "deterministic")]


def test_cuda_study_adds_tf32_and_cublas_switches() -> None:
    study = at.build_study("cuda", suite_workloads("training"))
    det = get_mode(study["deterministic_end"])
    assert det.base_name == "cudnn-det+det-algos"
    assert det.overrides["cudnn_tf32"] == "off"
    assert det.overrides["cublas_workspace_config"] == ":4096:8"
    assert det.overrides["fp16_reduced_precision_reduction"] == "off"
    assert det.overrides["sdpa_backend"] == "math"
    got = {(x["switch"], x["end"], x["level"]): x["mode"] for x in study["variants"]}
    assert got[("cudnn_deterministic", "default", "on")] == "cudnn-det"
    assert got[("cudnn_tf32", "default", "off")] == "default[cudnn_tf32=off]"
    assert got[("cublas_workspace_config", "default", ":4096:8")] == (
        "default[cublas_workspace_config=:4096:8]"
    )
    for level in ("unset", ":16:8"):
        mode = get_mode(got[("cublas_workspace_config", "deterministic", level)])
        assert mode.overrides == {**det.overrides, "cublas_workspace_config": level}
    assert get_mode(got[("cudnn_tf32", "deterministic", "on")]).overrides["cudnn_tf32"] == "on"
    assert get_mode(got[("cudnn_deterministic", "deterministic", "off")]).base_name == ("det-algos")
    assert ("execution", "default", "compile") not in got


@pytest.mark.parametrize("tied", [False, True])
def test_compile_is_a_switch_only_when_asked(tied: bool) -> None:
    study = at.build_study("cpu", suite_workloads("batchnorm"), compile=True, tied=tied)
    comp = [x for x in study["variants"] if x["switch"] == "execution"]
    det_compiled = "cudnn-det+det-algos[execution=compile,inductor_deterministic=on]"
    assert [(x["end"], x["mode"]) for x in comp] == [
        ("default", "default[execution=compile]"), ("deterministic", det_compiled),
    ]  # fmt: skip
    ind = [x for x in study["variants"] if x["switch"] == "inductor_deterministic"]
    said = [x["reason"] for x in study["skipped"] if x["switch"] == "inductor_deterministic"]
    assert not any("acts only with execution=compile" in x for x in said)
    if tied:  # torch sets it with deterministic algorithms: no level of its own to attribute
        assert ind == [] and len(said) == 2 and all("ties" in x for x in said)
    else:  # each end's compiled mode with inductor's switch flipped, against that mode
        assert [(x["end"], x["mode"], x["against"]) for x in ind] == [
            ("default", "default[execution=compile,inductor_deterministic=on]",
             "default[execution=compile]"),
            ("deterministic", "cudnn-det+det-algos[execution=compile,inductor_deterministic=off]",
             det_compiled),
        ]  # fmt: skip
        modes = [m.name for m in at.study_modes(study)]
        assert "default[execution=compile,inductor_deterministic=on]" in modes
        assert at.only_for(study) == {}
        plan = "\n".join(at.describe(study))
        assert "+ inductor_deterministic=on at the default end" in plan
        assert "(against default[execution=compile])" in plan


def test_a_mode_shared_by_variants_runs_once() -> None:
    v = {"switch": "s", "level": "on", "end": "default", "direction": "added"}
    study = {
        "kind": "attribution", "device": "cpu", "default_end": "default",
        "deterministic_end": "cudnn-det+det-algos", "skipped": [],
        "variants": [
            {**v, "mode": "det-algos", "workloads": ["a/x"]},
            {**v, "mode": "det-algos", "workloads": ["a/y"], "end": "deterministic"},
            {**v, "mode": "default[sdpa_backend=math]", "workloads": ["a/x"]},
            {**v, "mode": "default[sdpa_backend=math]", "workloads": None},
            {**v, "mode": "default", "workloads": ["a/x"]},
        ],
    }  # fmt: skip
    assert [m.name for m in at.study_modes(study)] == [
        "default", "cudnn-det+det-algos", "det-algos", "default[sdpa_backend=math]",
    ]  # fmt: skip
    assert at.only_for(study) == {"det-algos": ["a/x", "a/y"]}


# -- effects on records with known fingerprints and timings ------------------------------------

DET = "cudnn-det+det-algos"
NO_DET = "cudnn-det"
FILL_OFF = "cudnn-det+det-algos[fill_uninitialized_memory=off]"
HIGH = "cudnn-det+det-algos[float32_matmul_precision=high]"


def study_records() -> list[dict[str, Any]]:
    """Suite ``s``: ``scatter`` is nondeterministic by default and without deterministic
    algorithms, reproducible with them at half the speed, twice as fast again with the fill off
    (same bits), other bits with float32_matmul_precision=high; ``plain`` is reproducible with
    the same bits and speed everywhere. One more record of the fill off, whose workload changed
    deterministic_algorithms itself, has other bits: it must not count."""
    secs = {"default": 0.010, "det-algos": 0.020, DET: 0.020, NO_DET: 0.010, FILL_OFF: 0.010,
            HIGH: 0.020}  # fmt: skip
    out = []
    for r in range(3):
        for mode, s in secs.items():
            fp = f"d{r}" if mode in ("default", NO_DET) else ("b" if mode == HIGH else "a")
            out.append(syn.record("scatter", mode, r, fp, [s] * 6, settings_changed=[]))
            out.append(syn.record("plain", mode, r, "x", [0.004] * 6, settings_changed=[]))
    out.append(syn.record("scatter", FILL_OFF, 3, "z", [0.5] * 6,
                          settings_changed=["deterministic_algorithms"]))  # fmt: skip
    return out


@pytest.fixture
def study() -> dict[str, Any]:
    return at.build_study("cpu", suite_workloads("batchnorm"))


@pytest.fixture
def run_dir(tmp_path: Path, study: dict[str, Any]) -> Path:
    env = syn.env(gpu=None, study=study)
    return syn.write_run(tmp_path / "run", study_records(), env)


def test_effects_from_records(run_dir: Path, study: dict[str, Any]) -> None:
    e = at.effects(load_results(run_dir), study)
    row = {(r["workload"], r["mode"], r["end"]): r for r in e.to_dict("records")}
    assert len(e) == 2 * 4  # two workloads x (1 added + 3 removed) on a CPU without attention
    # Removing deterministic algorithms from the deterministic end breaks scatter.
    r = row[("scatter", NO_DET, "deterministic")]
    assert (r["needed"], r["bits_changed"], r["verdict"], r["end_verdict"]) == (
        True, "varies", "nondeterministic", "reproducible",
    )  # fmt: skip
    assert r["relative_throughput"] == pytest.approx(2.0)
    # The fill off: the same bits, twice as fast, not needed (the changed record is not counted).
    r = row[("scatter", FILL_OFF, "deterministic")]
    assert (r["needed"], r["bits_changed"], r["verdict"]) == (False, False, "reproducible")
    assert r["relative_throughput"] == pytest.approx(2.0) and r["significant"]
    r = row[("scatter", HIGH, "deterministic")]
    assert (r["needed"], r["bits_changed"]) == (False, True)
    assert r["relative_throughput"] == pytest.approx(1.0) and not r["significant"]
    # From the default end, deterministic algorithms alone make scatter reproducible.
    r = row[("scatter", "det-algos", "default")]
    assert (r["sufficient"], r["needed"], r["bits_changed"]) == (True, None, "varies")
    assert r["relative_throughput"] == pytest.approx(0.5)
    # plain: nothing needed, nothing to make sufficient, no bits changed.
    for (w, _, _end), r in row.items():
        if w == "plain":
            assert r["bits_changed"] is False and r["needed"] in (False, None)
            assert r["sufficient"] is None


def test_suite_effects_and_conclusions(run_dir: Path, study: dict[str, Any]) -> None:
    df = load_results(run_dir)
    s = ar.suite_effects(df, study).set_index("mode")
    assert s.loc[FILL_OFF, "relative_throughput"] == pytest.approx(2**0.5)  # geomean of 2 and 1
    assert s.loc[NO_DET, "needed"] == 1 and s.loc[FILL_OFF, "needed"] == 0
    said = ar.conclusions(df, study)["s"]
    fill = next(x for x in said if "fill_uninitialized_memory=off" in x)
    assert fill.startswith(f"{DET} with fill_uninitialized_memory=off: bitwise reproducible on "
                           "all 2 workloads")  # fmt: skip
    assert "41% faster than with fill_uninitialized_memory=on" in fill
    no_det = next(x for x in said if x.startswith(f"{DET} with deterministic algorithms off"))
    assert "deterministic algorithms on is needed for reproducibility on 1 of 2" in no_det
    assert "bitwise reproducible on 1 of 2 workloads" in no_det
    high = next(x for x in said if "float32_matmul_precision=high" in x)
    assert "throughput within the noise" in high and "other bits than" in high
    added = next(x for x in said if x.startswith("the default mode with deterministic"))
    assert "alone makes 1 of 2 reproducible" in added and "29% slower" in added


def test_a_noisy_or_wide_cost_is_no_finding_in_words(tmp_path: Path, study: dict[str, Any]) -> None:
    """The fill off measured 1.3x faster on scatter, but with samples that spread over more
    than 10% of their median: the conclusion says it is no finding, not "N% faster", and never
    "within the noise", which is said only of an interval that contains 1 (issue 35)."""
    recs = []
    for r in range(3):
        for mode, sec in ((DET, 0.020), (FILL_OFF, 0.0154), (NO_DET, 0.020), (HIGH, 0.020),
                          ("default", 0.020), ("det-algos", 0.020)):  # fmt: skip
            spread = [sec * f for f in (0.8, 0.9, 1.0, 1.0, 1.1, 1.25)]  # IQR about 17%
            fp = "a" if "det-algos" in mode else f"d{r}"
            recs.append(syn.record("scatter", mode, r, fp, spread, settings_changed=[]))
    df = load_results(syn.write_run(tmp_path / "noisy", recs, syn.env(gpu=None, study=study)))
    s = ar.suite_effects(df, study).set_index("mode")
    assert bool(s.loc[FILL_OFF, "noisy"]) and bool(s.loc[FILL_OFF, "significant"])
    assert ar.near_noise(s.loc[FILL_OFF]) is not None
    fill = next(x for x in ar.conclusions(df, study)["s"] if "fill_uninitialized_memory" in x)
    assert "throughput not a finding" in fill and "faster" not in fill, fill
    assert "within the noise" not in fill and "excludes 1" in fill, fill
    wide = {"relative_throughput": 1.2, "ci_low": 1.02, "ci_high": 1.6, "noisy": False,
            "significant": True}  # fmt: skip
    assert ar.near_noise(wide) is None and ar.uncertain(wide)
    assert ar._speed(wide, "on") == (
        "faster than on by an uncertain amount (1.20x, 95% interval 1.02x to 1.60x: the "
        "interval is wider than the difference)"
    )
    clear = {"relative_throughput": 2.0, "ci_low": 1.8, "ci_high": 2.2, "noisy": True}
    assert ar.near_noise(clear) is None  # beyond the noise, even where timing is noisy
    # Two replicates' paired interval (a t with 1 degree of freedom): it holds both half and
    # twice, so it measures nothing, and says so rather than "within the noise".
    none = {
        "relative_throughput": 0.85,
        "ci_low": 0.004,
        "ci_high": 468.09,
        "noisy": False,
        "significant": False,
    }
    assert ar._speed(none, "with it on") == (
        "throughput not measured (0.85x, 95% interval 0.00x to 468.09x: the interval holds both "
        "half and twice the throughput with it on; more replicates, or a quieter machine, "
        "narrow it)"
    )


def test_report_section(run_dir: Path, tmp_path: Path, study: dict[str, Any]) -> None:
    df, env = load_results(run_dir), load_env(run_dir)
    plots = ar.write_plots(df, env, tmp_path / "plots")
    assert [(p.kind, p.suite) for p in plots] == [("attribution", "s")]
    assert plots[0].png.stat().st_size > 0 and plots[0].svg.stat().st_size > 0
    blocks = ar.blocks(df, env, plots)
    assert blocks[0] == Heading(2, "Attribution")
    assert any(isinstance(b, Figure) for b in blocks)
    # The per-workload table: collapsed under the chart and its conclusions.
    table = next(t for b in blocks if isinstance(b, Details) for t in b.blocks
                 if isinstance(t, Table))  # fmt: skip
    cells = {(r[0], r[1], r[3]): r for r in table.rows}
    assert cells[("scatter", "deterministic_algorithms", "deterministic")][-1] == "needed"
    assert cells[("scatter", "fill_uninitialized_memory", "deterministic")][-1] == "not needed"
    method = next(b for b in blocks if isinstance(b, Para)).text
    assert "fill_uninitialized_memory at the default end" in method
    assert "1 records whose workload changed a setting" in method
    assert "Attribution" in to_markdown(blocks, tmp_path)
    # A run that is not a study has no section and no chart.
    assert ar.blocks(df, {"study": None}, plots) == []
    assert ar.write_plots(df, {}, tmp_path / "none") == []


# -- the command -------------------------------------------------------------------------------


@pytest.mark.slow  # a whole attribution study: test-slow (CI runs it)
def test_attribute_end_to_end_on_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from detbench.report.write import write_report

    out = tmp_path / "att"
    code = cli.main(["attribute", "--suite", "batchnorm", "--only", BN_EVAL, "--replicates",
                     "2", "--budget", "0.02", "--device", "cpu", "--out", str(out),
                     "--no-report"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    df = load_results(out)
    study = load_env(out)["study"]
    assert at.is_study(study)
    assert set(df["mode"]) == {m.name for m in at.study_modes(study)}
    assert len(df) == 2 * len(set(df["mode"]))
    assert (df["status"] == "ok").all()
    e = at.effects(df, study)
    assert set(e["switch"]) == {"deterministic_algorithms", "fill_uninitialized_memory",
                                "float32_matmul_precision"}  # fmt: skip
    md, _ = write_report(out)
    text = md.read_text()
    assert "## Attribution" in text and "batchnorm-attribution.png" in text
    assert (out / "plots" / "batchnorm-attribution.png").is_file()


@requires_cuda
def test_attribute_end_to_end_on_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CUDA twin of the test above, structure only: a CUDA study adds the cuDNN, TF32,
    reduction and workspace switches, and which of them matter is what the GPU measures. (17
    modes x 2 fresh workers of one small workload: about a minute on a GPU host.)"""
    out = tmp_path / "att"
    code = cli.main(["attribute", "--suite", "batchnorm", "--only", BN_EVAL, "--replicates",
                     "2", "--budget", "0.02", "--device", "cuda", "--profile", "quick", "--out",
                     str(out), "--no-report"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    df = load_results(out)
    study = load_env(out)["study"]
    assert at.is_study(study) and set(df["device"]) == {"cuda"}
    assert set(df["mode"]) == {m.name for m in at.study_modes(study)}
    assert len(df) == 2 * len(set(df["mode"]))
    assert set(df["status"]) <= {"ok", "unsupported"}
    switches = {x["switch"] for x in study["variants"]}
    assert {"deterministic_algorithms", "cudnn_deterministic", "cudnn_tf32"} <= switches
    assert set(at.effects(df, study)["switch"]) <= switches


def test_bad_only_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "att"
    code = cli.main(["attribute", "--suite", "batchnorm", "--only", "batchnorm/nope",
                     "--device", "cpu", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and "unknown workload 'batchnorm/nope'" in err
    assert not out.exists()


def test_dry_run_prints_the_study_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "att"
    code = cli.main(["attribute", "--suite", "batchnorm", "--only", BN_EVAL, "--compile",
                     "--device", "cpu", "--dry-run", "--out", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    assert "deterministic end cudnn-det+det-algos" in text
    assert "default[execution=compile]" in text and "compiles every workload" not in text
    assert "--compile: every workload is also compiled" in text
    assert "x 8 modes" in text
    assert not out.exists()


def test_effects_of_no_records_is_empty(study: dict[str, Any]) -> None:
    empty = pd.DataFrame(columns=["suite", "workload", "mode", "status", "fingerprint"])
    assert at.effects(empty, study).empty
