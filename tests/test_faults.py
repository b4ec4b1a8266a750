"""Fault injection with real faults in real worker processes: every fault becomes a recorded
status with a message, and the other workloads of the same run are measured, intact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import WORKLOADS, detbench_cli

REPLICATES = 2
TIMEOUT = 8
#: workload -> (status, what its message says)
FAULTS = {
    "aborts": ("crashed", "worker killed by signal SIGABRT while running this workload"),
    "segfaults": ("crashed", "worker killed by signal SIGSEGV while running this workload"),
    "exits": ("crashed", "worker exit code 3 while running this workload"),
    "hangs": ("timeout", f"exceeded the --timeout of {TIMEOUT} s; worker killed"),
    "cpu_out_of_memory": ("oom", "can't allocate memory"),
    "python_memory_error": ("oom", "MemoryError"),
    "cuda_out_of_memory": ("oom", "OutOfMemoryError: CUDA out of memory"),
    "raises": ("error", "fingerprint: KeyError: \"no such layer: 'fc3'\""),
    "factory_raises": ("error", "build: FileNotFoundError: weights.pt"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("faults") / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "faults.py"), "--mode", "default",
        "--replicates", str(REPLICATES), "--min-run-time", "0.02", "--timeout", str(TIMEOUT),
        "--device", "cpu", "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = (out / "results.jsonl").read_text().splitlines()
    return out, [json.loads(line) for line in lines]


def test_every_record_is_there(run: tuple[Path, list[dict[str, Any]]]) -> None:
    records = run[1]
    keys = [(r["workload"], r["replicate"]) for r in records]
    assert len(keys) == len(set(keys)) == (len(FAULTS) + 2) * REPLICATES  # none lost, none twice


@pytest.mark.parametrize("workload", list(FAULTS))
def test_fault_becomes_a_status(run: tuple[Path, list[dict[str, Any]]], workload: str) -> None:
    status, says = FAULTS[workload]
    for rec in (r for r in run[1] if r["workload"] == workload):
        assert rec["status"] == status, rec["message"]
        assert says in rec["message"]
        assert rec["fingerprint"] is None and rec["items_per_second"] is None


def test_oom_records_memory_figures(run: tuple[Path, list[dict[str, Any]]]) -> None:
    for rec in (r for r in run[1] if r["status"] == "oom"):
        memory = rec["memory"]
        assert memory["process_peak_rss_bytes"] > 10 * 2**20  # torch is loaded: tens of MB
        assert memory["available_bytes"] > 0
        assert "peak RSS" in rec["message"] and "GiB available" in rec["message"]


def test_the_working_workloads_are_measured_and_intact(
    run: tuple[Path, list[dict[str, Any]]],
) -> None:
    for name in ("works_first", "works_last"):
        recs = [r for r in run[1] if r["workload"] == name]
        assert [r["status"] for r in recs] == ["ok"] * REPLICATES
        assert len({r["fingerprint"] for r in recs}) == 1
        for r in recs:
            assert r["items_per_second"] > 0 and len(r["timing"]["samples"]) >= 1


def test_report_of_a_faulty_run(run: tuple[Path, list[dict[str, Any]]]) -> None:
    out = run[0]
    proc = detbench_cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert "faults/segfaults ran in no mode (crashed)" in md
    assert "3 (workload, mode) pairs ended as 'oom': see Failures." in md


CRASH_LINES = {"aborts": "os.abort()", "segfaults": "os.kill(os.getpid(), signal.SIGSEGV)"}


@pytest.mark.parametrize(("workload", "error"), [("aborts", "Aborted"),
                                                 ("segfaults", "Segmentation fault")])  # fmt: skip
def test_a_crash_names_the_line_that_crashed(run: tuple[Path, list[dict[str, Any]]],
                                             workload: str, error: str) -> None:  # fmt: skip
    source = (WORKLOADS / "faults.py").read_text().splitlines()
    line = 1 + [text.strip() for text in source].index(CRASH_LINES[workload])
    expected = (
        f'log: Fatal Python error: {error} | File "{WORKLOADS / "faults.py"}", line {line} in step'
    )
    for rec in (r for r in run[1] if r["workload"] == workload):
        assert expected in rec["message"]
