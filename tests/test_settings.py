"""The settings beside the modes: the table, --set, mode names with settings, the snippet, and what
a worker records when it applies them, reads them back and restores them (all genuine torch runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import detbench
from detbench.core import settings as st
from detbench.core.modes import MODES, get_mode
from detbench.core.settings import CUBLAS_ENV, SettingError
from detbench.worker.applied import NOT_LOADED, changed
from tests.conftest import ROOT, WORKLOADS, detbench_cli, requires_cuda

PROBE = WORKLOADS / "settings_probe.py"
#: The record columns the issue names, one per setting.
NAMED = ("fill_uninitialized_memory", "warn_only", "cublas_workspace_config", "sdpa_backend",
         "autocast", "execution")  # fmt: skip


def test_modes_json_keeps_its_ten_entries_unchanged() -> None:
    data = json.loads(detbench_cli("modes", "--json").stdout)
    assert [d["name"] for d in data] == [m.name for m in MODES]
    keys = {"name", "benchmark", "cudnn_deterministic", "deterministic_algorithms",
            "cudnn_enabled", "description", "snippet"}  # fmt: skip
    assert all(set(d) == keys for d in data)


def test_settings_json_lists_every_setting_with_levels_and_torchs_default() -> None:
    out = detbench_cli("settings", "--json")
    assert out.returncode == 0, out.stderr
    data = {d["name"]: d for d in json.loads(out.stdout)}
    assert set(NAMED) <= set(data)
    assert {"float32_matmul_precision", "cudnn_tf32", "fp16_reduced_precision_reduction",
            "bf16_reduced_precision_reduction"} <= set(data)  # fmt: skip
    assert data["fill_uninitialized_memory"]["levels"] == ["on", "off"]
    assert data["fill_uninitialized_memory"]["default"] == "on"  # torch's, read on this install
    assert data["float32_matmul_precision"]["default"] == "highest"
    assert data["cublas_workspace_config"]["levels"] == ["unset", ":4096:8", ":16:8"]
    assert data["sdpa_backend"]["levels"] == ["default", "math", "flash", "efficient", "cudnn"]
    assert data["autocast"]["levels"] == ["off", "fp16", "bf16"]
    assert data["execution"]["levels"] == ["eager", "compile"]
    assert data["inductor_batch_invariant"]["levels"] == ["on", "off"]
    assert data["inductor_batch_invariant"]["default"] == (
        "on" if os.environ.get("TORCHINDUCTOR_BATCH_INVARIANT") == "1" else "off"
    )
    assert all({"name", "levels", "default"} <= set(d) for d in data.values())
    table = detbench_cli("settings")
    assert table.returncode == 0 and "fill_uninitialized_memory" in table.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "nope=on"], "unknown setting 'nope'"),
        (["--set", "fill_uninitialized_memory=maybe"], "has no level 'maybe'"),
        (["--set", "fill_uninitialized_memory"], "--set takes NAME=LEVEL"),
        (["--set", "fp16_reduced_precision_reduction_split_k=off"], "needs"),
        (["--mode", "det-algos[warn_only=sometimes]"], "has no level 'sometimes'"),
    ],
)
def test_a_bad_set_is_one_line_and_runs_nothing(tmp_path: Path, args: list[str],
                                                words: str) -> None:  # fmt: skip
    out = tmp_path / "run"
    proc = detbench_cli("run", "--workload", str(PROBE), "--device", "cpu", "--out", str(out),
                        *args)  # fmt: skip
    assert proc.returncode == 2
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_mode_names_carry_their_settings_canonically() -> None:
    a = get_mode("det-algos[warn_only=on,fill_uninitialized_memory=off]")
    b = get_mode("det-algos").with_settings(
        st.parse_assignments(["fill_uninitialized_memory=false", "warn_only=on"])
    )
    assert a == b and a.name == "det-algos[fill_uninitialized_memory=off,warn_only=on]"
    assert a.base_name == "det-algos"
    assert a.changes() == ["deterministic_algorithms", "fill_uninitialized_memory", "warn_only"]
    assert get_mode("det-algos").changes() == ["deterministic_algorithms"]
    assert get_mode("default").changes() == []
    with pytest.raises(SettingError, match="given twice"):
        st.parse_assignments(["warn_only=on", "warn_only=off"])


def test_cublas_setting_replaces_the_modes_own_workspace() -> None:
    shell = {CUBLAS_ENV: ":16:8", "PATH": "/bin"}
    assert get_mode("det-algos").environment(shell)[CUBLAS_ENV] == ":16:8"
    unset = get_mode("det-algos[cublas_workspace_config=unset]").environment(shell)
    assert CUBLAS_ENV not in unset
    forced = get_mode("default[cublas_workspace_config=:4096:8]").environment({})
    assert forced[CUBLAS_ENV] == ":4096:8"


READ_BACK = """
import json
from detbench.worker.applied import read_all
print(json.dumps(read_all()))
"""


@pytest.mark.parametrize(
    "overrides",
    [
        {
            "fill_uninitialized_memory": "off",
            "warn_only": "on",
            "float32_matmul_precision": "high",
            "cudnn_tf32": "off",
            "cublas_workspace_config": ":16:8",
        },
        {
            "fp16_reduced_precision_reduction": "off",
            "fp16_reduced_precision_reduction_split_k": "off",
            "bf16_reduced_precision_reduction": "off",
            "sdpa_backend": "math",
            "inductor_deterministic": "on",
            "inductor_batch_invariant": "on",
        },
    ],
    ids=["fill-warn-tf32-cublas", "reductions-sdpa-inductor"],
)
def test_the_snippet_puts_a_fresh_process_in_the_settings(overrides: dict[str, str]) -> None:
    """What a user pastes does what the worker did: read back in a fresh interpreter."""
    mode = get_mode("det-algos").with_settings(st.normalise(overrides))
    env = {k: v for k, v in os.environ.items() if k != CUBLAS_ENV}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", "import os\n" + mode.snippet() + READ_BACK],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    levels = json.loads(proc.stdout.strip().splitlines()[-1])
    assert levels["deterministic_algorithms"] is True
    for name, level in overrides.items():
        assert levels[name] == level, name


#: A level of inductor_deterministic apart from deterministic algorithms (see the test below).
TIED = "det-algos[execution=compile,inductor_deterministic=off]"


@pytest.fixture(scope="module")
def probe_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory (TMPDIR) of the probe run: empty before it."""
    return tmp_path_factory.mktemp("probe-tmpdir")


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory, probe_tmp: Path) -> pd.DataFrame:
    """One run of the probe workloads under the modes the tests below read, with a temporary
    directory of its own. Where torch ties inductor_deterministic to deterministic algorithms,
    also under a level apart from theirs (unsupported before anything compiles; elsewhere that
    mode would compile every probe workload, so it is left out)."""
    from detbench.core import torchstate as ts

    out = tmp_path_factory.mktemp("settings") / "run"
    modes = ["det-algos", "det-algos[fill_uninitialized_memory=off]", "det-algos[warn_only=on]",
             "default[sdpa_backend=efficient]", "default[autocast=bf16]"]  # fmt: skip
    modes += [TIED] if ts.inductor_tied() else []
    args = ["-m", "detbench", "run", "--workload", str(PROBE), "--replicates", "2", "--device",
            "cpu", "--out", str(out), "--no-report", "--budget", "0.02"]  # fmt: skip
    for m in modes:
        args += ["--mode", m]
    env = {**os.environ, "TMPDIR": str(probe_tmp), "PYTHONPATH": str(ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return detbench.load_results(out)


def _row(df: pd.DataFrame, workload: str, mode: str, replicate: int = 0) -> Any:
    sel = df[(df["workload"] == workload) & (df["mode"] == mode) & (df["replicate"] == replicate)]
    assert len(sel) == 1, (workload, mode)
    return sel.iloc[0]


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_every_record_carries_every_setting(probe_run: pd.DataFrame) -> None:
    for name in st.NAMES:
        assert name in probe_run.columns, name
    row = _row(probe_run, "empty_unwritten", "det-algos[fill_uninitialized_memory=off]")
    assert row["fill_uninitialized_memory"] is False and row["base_mode"] == "det-algos"
    row = _row(probe_run, "empty_unwritten", "det-algos")
    assert row["fill_uninitialized_memory"] is True
    assert row["cublas_workspace_config"] == ":4096:8" and row["execution"] == "eager"
    assert row["settings_changed"] == []


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_workload_that_turns_det_algos_off_is_recorded_as_it_ran(
    probe_run: pd.DataFrame,
) -> None:
    """The first workload turns deterministic algorithms off in its build: its record says so,
    its change is named, and the next workload of the same worker runs in the mode again, so
    max_unpool2d is unsupported there as it must be."""
    first = _row(probe_run, "turns_det_algos_off", "det-algos")
    assert not bool(first["deterministic_algorithms"])
    assert "deterministic_algorithms" in first["settings_changed"]
    assert first["settings_changes"]["deterministic_algorithms"]["applied"] is True
    nxt = _row(probe_run, "max_unpool_after", "det-algos")
    assert nxt["status"] == "unsupported" and bool(nxt["deterministic_algorithms"])
    assert nxt["settings_changed"] == []
    late = _row(probe_run, "benchmark_on_in_step", "det-algos")
    assert late["settings_changed"] == ["benchmark"]
    assert late["settings_changes"]["benchmark"] == {"applied": False, "after_steps": True}
    assert bool(late["benchmark"])  # its column: what its steps last ran under


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_warn_only_runs_the_op_that_has_no_deterministic_implementation(
    probe_run: pd.DataFrame,
) -> None:
    row = _row(probe_run, "max_unpool_after", "det-algos[warn_only=on]")
    assert row["status"] == "ok" and row["warn_only"] is True


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_the_fill_makes_unwritten_memory_nan_and_reproducible(probe_run: pd.DataFrame) -> None:
    both = probe_run[(probe_run["workload"] == "empty_unwritten")
                     & (probe_run["mode"] == "det-algos")]  # fmt: skip
    assert set(both["status"]) == {"ok"} and both["fingerprint"].nunique() == 1
    import torch

    torch.use_deterministic_algorithms(True)
    try:
        assert torch.empty(8).isnan().all()  # what the fill writes, as the record's bits say
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_backend_the_device_lacks_and_undeclared_autocast_are_unsupported(
    probe_run: pd.DataFrame,
) -> None:
    sdpa = _row(probe_run, "sdpa_fwd_bwd", "default[sdpa_backend=efficient]")
    assert sdpa["status"] == "unsupported" and "No viable backend" in sdpa["message"]
    assert sdpa["sdpa_backend"] == "efficient"
    plain = _row(probe_run, "linear_plain", "default[autocast=bf16]")
    assert plain["status"] == "unsupported" and "autocast=True" in plain["message"]
    amp = _row(probe_run, "linear_amp", "default[autocast=bf16]")
    assert amp["status"] == "ok" and amp["autocast"] == "bf16"


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_compiled_workload_beside_its_eager_twin(tmp_path: Path) -> None:
    """torch.compile (inductor) compiles here in about 15 s for a small graph: one workload, two
    fresh workers, each with its own empty compile cache, removed at the end. The run has a
    temporary directory of its own: /tmp is shared with whatever else runs beside this test."""
    out, tmpdir = tmp_path / "run", tmp_path / "tmpdir"
    tmpdir.mkdir()
    proc = detbench_cli(
        "run", "--workload", str(PROBE), "--only", "settings_probe/linear_plain",
        "--mode", "default", "--mode", "default[execution=compile]", "--replicates", "2",
        "--device", "cpu", "--out", str(out), "--no-report", "--budget", "0.02",
        env={"TMPDIR": str(tmpdir)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(out)
    compiled = df[df["mode"] == "default[execution=compile]"]
    eager = df[df["mode"] == "default"]
    assert set(compiled["status"]) == {"ok"} and set(compiled["execution"]) == {"compile"}
    assert (compiled["compile_seconds"] > 0).all() and eager["compile_seconds"].isna().all()
    assert all(s["unique_graphs"] >= 1 for s in compiled["compile_stats"])
    assert compiled["fingerprint"].nunique() == 1  # reproducible across fresh compilations
    assert sorted(p.name for p in tmpdir.iterdir()) == []  # its caches were removed


def test_torchs_own_change_of_inductor_deterministic_is_not_the_workloads() -> None:
    from detbench.core import torchstate as ts
    from detbench.worker.applied import changed, differ

    applied = {"deterministic_algorithms": True, "inductor_deterministic": "on"}
    now = {"deterministic_algorithms": False, "inductor_deterministic": "off"}
    assert differ(applied, now) == ["deterministic_algorithms", "inductor_deterministic"]
    blamed = ["deterministic_algorithms"] if ts.inductor_tied() else differ(applied, now)
    assert changed(applied, now) == blamed
    assert st.inert_reason("inductor_batch_invariant", "cuda", {}, False) == (
        "inductor_batch_invariant acts only with execution=compile"
    )


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_workers_leave_no_shared_compile_cache_and_a_tied_level_is_unsupported(
    probe_run: pd.DataFrame, probe_tmp: Path
) -> None:
    """Every worker imports torch._dynamo, which makes inductor's cache directory: each gets its
    own, removed at the end, and the command makes none in the shared temporary directory. Where
    torch ties inductor_deterministic to deterministic algorithms, a level apart from theirs is
    unsupported with the reason, and nothing is blamed on the workload."""
    assert sorted(p.name for p in probe_tmp.iterdir()) == []  # no torchinductor_*, no cache
    tied = probe_run[probe_run["mode"] == TIED]
    from detbench.core import torchstate as ts

    assert len(tied) == (2 * len(set(probe_run["workload"])) if ts.inductor_tied() else 0)
    for row in tied.to_dict("records"):
        assert row["status"] == "unsupported" and "ties" in row["message"], row["message"]
        assert row["settings_changed"] == []


# --- on a GPU ---------------------------------------------------------------------------------


@requires_cuda
def test_cuda_precision_and_workspace_settings_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--workload", str(PROBE), "--device", "cuda", "--profile", "quick",
        "--mode", "det-algos[cublas_workspace_config=unset]",
        "--mode", "default[float32_matmul_precision=high,cudnn_tf32=off]",
        "--mode", "default[sdpa_backend=flash,autocast=fp16]",
        "--replicates", "2", "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(out)
    unset = _row(df, "linear_plain", "det-algos[cublas_workspace_config=unset]")
    assert unset["cublas_workspace_config"] is None
    # Whether this torch still refuses cuBLAS without the variable is what the run found out.
    assert unset["status"] == "ok" or CUBLAS_ENV in (unset["message"] or "")
    tf32 = _row(df, "linear_plain", "default[float32_matmul_precision=high,cudnn_tf32=off]")
    assert tf32["float32_matmul_precision"] == "high" and tf32["cudnn_tf32"] is False
    assert tf32["matmul_fp32"] == "tf32"
    amp = _row(df, "linear_amp", "default[sdpa_backend=flash,autocast=fp16]")
    assert amp["status"] == "ok" and amp["autocast"] == "fp16"
    flash = _row(df, "sdpa_fwd_bwd", "default[sdpa_backend=flash,autocast=fp16]")
    assert flash["status"] in ("ok", "unsupported")  # flash needs sm80+ and half inputs


@requires_cuda
def test_the_probe_run_on_cuda_records_every_setting(tmp_path: Path) -> None:
    """The CUDA twin of probe_run's CPU facts, structure only: on a GPU the efficient SDPA kernel
    may take fp32 (sm90 does) and its refusal reads otherwise, so only the shape is asserted."""
    out = tmp_path / "run"
    modes = ["det-algos", "det-algos[fill_uninitialized_memory=off]", "det-algos[warn_only=on]",
             "default[sdpa_backend=efficient]", "default[autocast=bf16]"]  # fmt: skip
    proc = detbench_cli(
        "run", "--workload", str(PROBE), "--device", "cuda", "--profile", "quick",
        "--replicates", "2", "--budget", "0.02", "--out", str(out), "--no-report",
        *(a for m in modes for a in ("--mode", m)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(out)
    assert set(df["device"]) == {"cuda"} and set(df["mode"]) == set(modes)
    for name in st.NAMES:
        assert name in df.columns, name
    assert len(df) == 2 * len(modes) * df["workload"].nunique()
    assert set(df["status"]) <= {"ok", "unsupported"}, df[["workload", "mode", "message"]]
    assert set(df[df["mode"] == "default[sdpa_backend=efficient]"]["sdpa_backend"]) == {"efficient"}
    fill_off = _row(df, "empty_unwritten", "det-algos[fill_uninitialized_memory=off]")
    assert fill_off["fill_uninitialized_memory"] is False and fill_off["base_mode"] == "det-algos"


def test_a_users_command_reads_inductor_as_not_loaded_without_importing_it() -> None:
    """detbench exec's boot reads with ``loaded_only``: importing ``torch._inductor.config``
    brings ``torch._dynamo`` into the user's process (and its import at a torchrun rank's exit
    hung the rank). In a fresh interpreter, as the boot is."""
    code = (
        "import sys, json\n"
        "from detbench.worker.applied import read_all\n"
        "levels = read_all(loaded_only=True)\n"
        "print(json.dumps([levels['inductor_deterministic'], 'torch._dynamo' in sys.modules]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert json.loads(proc.stdout) == [NOT_LOADED, False]


def test_a_module_imported_since_the_boot_is_no_change_but_a_level_set_is() -> None:
    before = {"inductor_deterministic": NOT_LOADED, "deterministic_algorithms": False}
    imported = {"inductor_deterministic": "off", "deterministic_algorithms": False}
    turned = {"inductor_deterministic": "on", "deterministic_algorithms": False}
    assert changed(before, imported) == []
    assert changed(before, turned) == ["inductor_deterministic"]
