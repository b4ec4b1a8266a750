from __future__ import annotations

import json
from pathlib import Path

import pytest

import detbench
from detbench.results import COLUMNS, SCHEMA_VERSION, ResultsError, ResultWriter

RECORD = {
    "suite": "s",
    "workload": "w",
    "mode": "default",
    "benchmark": False,
    "cudnn_deterministic": False,
    "deterministic_algorithms": False,
    "cudnn_enabled": True,
    "replicate": 0,
    "status": "ok",
    "fingerprint": "ab" * 32,
    "seconds_per_step": 0.5,
    "items_per_second": 8.0,
    "message": None,
    "timing": {"samples": [0.5, 0.5], "iqr": 0.0, "number_per_block": 1},
}


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
