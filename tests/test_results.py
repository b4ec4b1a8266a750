from __future__ import annotations

import json
from pathlib import Path

import pytest

import detbench
from detbench.store.results import (
    COLLECT_ENV_CACHE,
    COLUMNS,
    SCHEMA_VERSION,
    ResultsError,
    ResultWriter,
    collect_env_later,
    env_facts,
    host_env,
)

from .synthetic import record

#: A record as a worker writes it (``store.record.measured``, filled by the passes).
RECORD = record("w", "default", 0, "ab" * 32, [0.5, 0.5])


def test_writer_appends_whole_lines_that_load_results_reads(tmp_path: Path) -> None:
    with ResultWriter(tmp_path) as w:
        w.append(RECORD)
        w.append(
            {
                **RECORD,
                "replicate": 1,
                "status": "unsupported",
                "fingerprint": None,
                "seconds_per_step": None,
                "items_per_second": None,
                "message": "no det impl",
                "timing": None,
            }
        )
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["schema_version"] == SCHEMA_VERSION
    assert lines[0] == json.dumps(json.loads(lines[0]), sort_keys=True, separators=(",", ":"))
    df = detbench.load_results(tmp_path)
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert df["replicate"].tolist() == [0, 1]
    assert df["fingerprint"].tolist() == ["ab" * 32, None]
    assert df["timing_samples"].iloc[0] == [0.5, 0.5]
    assert df["message"].iloc[1] == "no det impl"


def test_no_nan_in_json(tmp_path: Path) -> None:
    with ResultWriter(tmp_path) as w, pytest.raises(ValueError):
        w.append({**RECORD, "seconds_per_step": float("nan")})
    assert (tmp_path / "results.jsonl").read_text() == ""


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 1, "suite": "s"\n', "malformed record"),
        ('{"schema_version": 99}\n', "unknown schema version 99"),
        ('{"suite": "s"}\n', "unknown schema version None"),
        ("[1, 2]\n", "must be a JSON object"),
        ('{"schema_version": 1}', "truncated record"),
    ],
)
def test_bad_files_are_refused_with_the_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "results.jsonl").write_text(content)
    with pytest.raises(ResultsError, match=message) as err:
        detbench.load_results(tmp_path)
    assert "results.jsonl:1:" in str(err.value)


def test_missing_results(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"no results\.jsonl in"):
        detbench.load_results(tmp_path)


# --- schema versions -----------------------------------------------------------------------------

#: A version-1 record verbatim, line 164 of the published run results/20261123-002720-cpu-quick.
GOLDEN_V1 = (
    '{"benchmark":true,"bytes_per_second":3513728019.992002,"bytes_per_step":3211264.0,'
    '"cublas_workspace_config":null,"cudnn_deterministic":false,"cudnn_enabled":true,'
    '"deterministic_algorithms":false,"device":"cpu","diff_reference":"self","fingerprint":'
    '"3cb00fead4fa7c05a133e9d9867dbf90d7e8eb7486ba8ee61375bfa4c7125fb6","flops_per_second":null,'
    '"flops_per_step":null,"flops_source":"counted","items_per_second":4376.753851432959,'
    '"items_per_step":4.0,"max_abs_diff":null,"message":null,"mode":"bench","num_threads":2,'
    '"params":{"batch":4,"channels":64,"dtype":"float32","from":"ResNet-50 conv2_x","grads":'
    '"input","input":"28x28","module_mode":"eval","op":"BatchNorm2d"},"phases":{"build":'
    '0.002412460000414285,"cleanup":0.0002788859992506332,"count":0.0005260150001049624,'
    '"fingerprint":0.005926062999606074,"timing":0.9803020120007204},"profile":"quick",'
    '"replicate":0,"schema_version":1,"seconds_per_step":0.000913919342000554,"seed":0,'
    '"status":"ok","step_fingerprints":["8e94211c6974f44b5a887fcbf8a43e8424c05af370c9a833eddfab2a'
    '174c814b","8e94211c6974f44b5a887fcbf8a43e8424c05af370c9a833eddfab2a174c814b","8e94211c6974f'
    '44b5a887fcbf8a43e8424c05af370c9a833eddfab2a174c814b"],"suite":"batchnorm","timing":{"iqr":'
    '0.0,"median":0.000913919342000554,"min_run_time":0.1,"num_threads":2,"number_per_block":'
    '1000,"samples":[0.000913919342000554],"warmup_steps":2},"utc":"2026-11-23T00:27:54Z",'
    '"workload":"batchnorm2d_eval_resnet50_stage1"}'
)
NEW_COLUMNS = ("peak_memory_bytes", "timing_ci_rel", "timing_reached_target",
               "fingerprint_method", "matmul_fp32", "conv_fp32")  # fmt: skip


def test_a_version_1_record_still_loads(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text(GOLDEN_V1 + "\n")
    df = detbench.load_results(tmp_path)
    row = df.iloc[0]
    assert row["schema_version"] == 1 and row["status"] == "ok"
    assert row["fingerprint"] == "3cb00fead4fa7c05a133e9d9867dbf90d7e8eb7486ba8ee61375bfa4c7125fb6"
    assert row["seconds_per_step"] == 0.000913919342000554
    for col in (*NEW_COLUMNS, "precision", "memory", "mode_position"):
        assert row[col] is None, col


def test_a_version_2_record_fills_the_new_columns(tmp_path: Path) -> None:
    assert SCHEMA_VERSION == 4
    rec = {
        **RECORD,
        "fingerprint_method": "device",
        "peak_memory_bytes": 3 << 20,
        "memory": {"peak_allocated_bytes": 3 << 20, "peak_reserved_bytes": 4 << 20},
        "precision": {"matmul_fp32": "ieee", "conv_fp32": "tf32"},
        "timing": {**RECORD["timing"], "ci_rel": 0.004, "reached_target": True},
    }
    with ResultWriter(tmp_path) as w:
        w.append(rec)
        # A record with none of the new values (each column below holds None, not NaN, for it).
        w.append(
            {
                **RECORD,
                "replicate": 1,
                "status": "error",
                "timing": None,
                "fingerprint_method": None,
            }
        )
    with (tmp_path / "results.jsonl").open("a") as f:  # versions 1 and 2 in one file
        f.write(GOLDEN_V1 + "\n")
    df = detbench.load_results(tmp_path)
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert set(NEW_COLUMNS) <= set(COLUMNS)
    assert df["schema_version"].tolist() == [4, 4, 1]
    first = df.iloc[0]
    assert (first["peak_memory_bytes"], first["timing_ci_rel"]) == (3 << 20, 0.004)
    assert first["timing_reached_target"] is True
    assert (first["fingerprint_method"], first["matmul_fp32"], first["conv_fp32"]) == (
        "device", "ieee", "tf32")  # fmt: skip
    for col in NEW_COLUMNS:  # None, not NaN, where a record has no value
        assert df[col].iloc[1] is None and df[col].iloc[2] is None, col


def test_records_before_version_3_load_with_their_mode_as_base_and_no_settings(
    tmp_path: Path,
) -> None:
    from detbench.core.settings import NAMES

    v2 = json.loads(GOLDEN_V1) | {"schema_version": 2, "cublas_workspace_config": ":4096:8"}
    (tmp_path / "results.jsonl").write_text(GOLDEN_V1 + "\n" + json.dumps(v2) + "\n")
    df = detbench.load_results(tmp_path)
    assert df["base_mode"].tolist() == ["bench", "bench"]
    for name in NAMES:  # not recorded then: unknown, never a made-up default
        if name != "cublas_workspace_config":
            assert df[name].tolist() == [None, None], name
    assert df["cublas_workspace_config"].tolist() == [None, ":4096:8"]  # recorded since v1
    assert df["settings_changed"].tolist() == [None, None]


PUBLISHED = Path(__file__).resolve().parent.parent / "results" / "20261123-002720-cpu-quick"


@pytest.mark.skipif(not PUBLISHED.is_dir(), reason="the published run is not in this checkout")
def test_the_published_version_1_run_loads() -> None:
    df = detbench.load_results(PUBLISHED)
    assert len(df) == 2370 and set(df["schema_version"]) == {1}
    assert df["peak_memory_bytes"].isna().all() and df["matmul_fp32"].isna().all()


# --- where a result came from ---------------------------------------------------------------------


def test_env_facts_read_the_cuda_build_and_old_runs_cuda_runtime() -> None:
    assert env_facts({"worker": {"cuda_build": "12.4"}})["cuda"] == "12.4"
    assert env_facts({"worker": {"cuda_runtime": "12.1"}})["cuda"] == "12.1"  # schema-1 env.json
    assert env_facts({"worker": {}, "host": {"torch_cuda": "11.8"}})["cuda"] == "11.8"


def test_host_env_runs_collect_env_in_a_child_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv(COLLECT_ENV_CACHE, raising=False)  # the real child, not the tests' cache
    env = host_env()
    assert "collect_env_error" not in env, env.get("collect_env_error")
    assert env["collect_env"]["torch_version"] == torch.__version__
    assert "pip_packages" not in env["collect_env"]
    # collect_env initialises CUDA on a GPU host; it must have done so in the child only.
    assert not torch.cuda.is_initialized()


def test_a_failing_collect_env_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COLLECT_ENV_CACHE, raising=False)
    info, error = collect_env_later(timeout=0.01)()  # far less than importing torch takes
    assert info == {} and error is not None and error.startswith("TimeoutExpired")
