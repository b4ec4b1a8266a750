"""Fault injection with real faults in real worker processes: every fault becomes a recorded
status with a message, and the other workloads of the same run are measured, intact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from detbench.store.paired import iter_paired
from detbench.store.results import load_results

from .conftest import WORKLOADS, detbench_cli, requires_cuda

REPLICATES = 2
TIMEOUT = 5
#: workload -> (status, what its message says)
FAULTS = {
    "aborts": ("crashed", "worker killed by signal SIGABRT while running this workload"),
    "segfaults": ("crashed", "worker killed by signal SIGSEGV while running this workload"),
    "exits": ("crashed", "worker exit code 3 while running this workload"),
    "hangs": ("timeout", f"exceeded the --timeout of {TIMEOUT} s; worker killed"),
    "cpu_out_of_memory": ("oom", "can't allocate memory"),
    "python_memory_error": ("oom", "MemoryError"),
    "cuda_out_of_memory": ("oom", "OutOfMemoryError: CUDA out of memory"),
    "device_assert": ("error", "fingerprint: IndexError: index 10 is out of bounds"),
    "raises": ("error", "fingerprint: KeyError: \"no such layer: 'fc3'\""),
    "factory_raises": ("error", "build: FileNotFoundError: weights.pt"),
}

WORKING = ("works_first", "works_after_oom", "works_last")


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


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_every_record_is_there(run: tuple[Path, list[dict[str, Any]]]) -> None:
    records = run[1]
    keys = [(r["workload"], r["replicate"]) for r in records]
    # none lost, none twice
    assert len(keys) == len(set(keys)) == (len(FAULTS) + len(WORKING)) * REPLICATES


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
@pytest.mark.parametrize("workload", list(FAULTS))
def test_fault_becomes_a_status(run: tuple[Path, list[dict[str, Any]]], workload: str) -> None:
    status, says = FAULTS[workload]
    recs = [r for r in run[1] if r["workload"] == workload]
    assert [r["replicate"] for r in recs] == list(range(REPLICATES))  # one record per replicate
    for rec in recs:
        assert rec["status"] == status, rec["message"]
        assert says in rec["message"]
        assert rec["fingerprint"] is None and rec["items_per_second"] is None


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_oom_records_memory_figures(run: tuple[Path, list[dict[str, Any]]]) -> None:
    ooms = [r for r in run[1] if r["status"] == "oom"]
    # Every workload whose fault is an out-of-memory, in every replicate: none missed, no other.
    oom_faults = sorted(w for w, (status, _) in FAULTS.items() if status == "oom")
    assert sorted(r["workload"] for r in ooms) == sorted(oom_faults * REPLICATES)
    for rec in ooms:
        memory = rec["memory"]
        assert memory["process_peak_rss_bytes"] > 10 * 2**20  # torch is loaded: tens of MB
        assert memory["available_bytes"] > 0
        assert "peak RSS" in rec["message"] and "GiB available" in rec["message"]


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_the_working_workloads_are_measured_and_intact(
    run: tuple[Path, list[dict[str, Any]]],
) -> None:
    for name in WORKING:
        recs = [r for r in run[1] if r["workload"] == name]
        assert [r["status"] for r in recs] == ["ok"] * REPLICATES
        assert len({r["fingerprint"] for r in recs}) == 1
    # The costs are timed side by side by the paired phase (issue 34): every working workload in
    # every replicate, the mode and its A/A copy.
    lines = list(iter_paired(run[0]))
    for name in WORKING:
        timed = [x for x in lines if x["workload"] == name]
        assert sorted((x["replicate"], x["copy"]) for x in timed) == [
            (r, c) for r in range(REPLICATES) for c in (0, 1)
        ]
        for x in timed:
            assert x["status"] == "ok" and x["same_bits"] is True, x.get("message")
            assert len(x["samples"]) >= 6 and min(x["samples"]) > 0
    for name in FAULTS:
        mine = [x for x in lines if x["workload"] == name]
        # Since issue 39 the paired worker of copy 0 makes the verdict: it meets the fault once,
        # and its line says what the verdict record says; the A/A copy sits it out.
        made = {r["status"] for r in run[1] if r["workload"] == name}
        assert {x["status"] for x in mine if x["copy"] == 1} <= {"not_timed"}, name
        assert {x["status"] for x in mine if x["copy"] == 0} <= made | {"not_timed"}, name
    # The records as every reader loads them carry the copy-0 timing.
    rows = load_results(run[0])
    working = rows[rows["workload"].isin(WORKING)]
    assert len(working) == len(WORKING) * REPLICATES
    assert (working["items_per_second"] > 0).all()


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_report_of_a_faulty_run(run: tuple[Path, list[dict[str, Any]]]) -> None:
    out = run[0]
    proc = detbench_cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert "faults/segfaults ran in no mode (crashed)" in md
    assert "3 (workload, mode) pairs ended with status oom (see Failures)." in md


CRASH_LINES = {"aborts": "os.abort()", "segfaults": "os.kill(os.getpid(), signal.SIGSEGV)"}


@pytest.mark.parametrize(("workload", "error"), [("aborts", "Aborted"),
                                                 ("segfaults", "Segmentation fault")])  # fmt: skip
@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_crash_names_the_line_that_crashed(run: tuple[Path, list[dict[str, Any]]],
                                             workload: str, error: str) -> None:  # fmt: skip
    source = (WORKLOADS / "faults.py").read_text().splitlines()
    line = 1 + [text.strip() for text in source].index(CRASH_LINES[workload])
    expected = (
        f'log: Fatal Python error: {error} | File "{WORKLOADS / "faults.py"}", line {line} in step'
    )
    recs = [r for r in run[1] if r["workload"] == workload]
    assert len(recs) == REPLICATES
    for rec in recs:
        assert rec["status"] == "crashed" and expected in rec["message"], rec["message"]


# --- on the GPU: a real CUDA out-of-memory and a real device-side assert -----------------------


def _cuda_run(out: Path, *only: str) -> list[dict[str, Any]]:
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "faults.py"), "--mode", "default",
        "--replicates", str(REPLICATES), "--budget", "0.05", "--timeout", "120",
        "--device", "cuda", "--profile", "quick", "--out", str(out), "--no-report",
        *(arg for name in only for arg in ("--only", f"faults/{name}")),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@requires_cuda
def test_a_real_cuda_oom_is_recorded_and_the_worker_goes_on(tmp_path: Path) -> None:
    records = _cuda_run(tmp_path / "oom", "works_first", "cuda_out_of_memory", "works_after_oom")
    assert len(records) == 3 * REPLICATES
    ooms = [r for r in records if r["workload"] == "cuda_out_of_memory"]
    assert len(ooms) == REPLICATES
    for rec in ooms:
        assert rec["status"] == "oom", rec["message"]
        assert "OutOfMemoryError: CUDA out of memory" in rec["message"]
        memory = rec["memory"]
        assert memory["cuda_total_bytes"] > 0 and memory["cuda_free_bytes"] > 0
        assert "peak_allocated_bytes" in memory and "GiB free of" in rec["message"]
    # The next workload, in the same worker (nothing ended it), is measured after the OOM.
    after = [r for r in records if r["workload"] == "works_after_oom"]
    assert [r["status"] for r in after] == ["ok"] * REPLICATES
    assert all(r["device"] == "cuda" and r["peak_memory_bytes"] is not None for r in after)


@requires_cuda
def test_a_device_side_assert_ends_the_worker_and_a_fresh_one_goes_on(tmp_path: Path) -> None:
    records = _cuda_run(tmp_path / "assert", "works_first", "device_assert", "works_last")
    assert len(records) == 3 * REPLICATES
    asserts = [r for r in records if r["workload"] == "device_assert"]
    assert len(asserts) == REPLICATES
    for rec in asserts:
        assert rec["status"] == "error" and "CUDA" in rec["message"], rec["message"]
    # Measured by a fresh worker: the one that ran the assert had an unusable CUDA context.
    last = [r for r in records if r["workload"] == "works_last"]
    assert [r["status"] for r in last] == ["ok"] * REPLICATES
