"""A worker's life with real processes: the next worker starts early and is stopped while another
takes timing samples; a worker whose device context is lost ends and a fresh one takes the rest;
a worker that never gets ready is killed, and two in a row stop the run."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest

from detbench.core.modes import get_mode
from detbench.run.config import RunConfig
from detbench.run.runner import prepare
from detbench.run.supervise import TIMEOUT, WorkerProcess

from .conftest import ROOT, WORKLOADS, detbench_cli, requires_cuda


def _config(out: Path, *only: str, replicates: int = 2, device: str = "cpu") -> RunConfig:
    return RunConfig(
        out=out,
        workload_files=[WORKLOADS / "lifecycle.py"],
        modes=[get_mode("default"), get_mode("det-algos")],
        replicates=replicates,
        device=device,
        budget=0.05,
        only=list(only),
        # The verdict workers' own timing passes and their neighbours: the separate design's.
        timing="separate",
    )


@pytest.mark.slow  # four workers of a real run: test-slow (CI runs it)
def test_next_worker_starts_early_and_is_stopped_while_samples_are_taken(tmp_path: Path) -> None:
    runner = prepare(_config(tmp_path / "run", "lifecycle/steady"), io.StringIO())
    stats = runner.run()
    assert stats.records == 4 and stats.workers == 4
    assert all(r["status"] == "ok" for r in runner.records)
    # Every timing pass ran with no other worker of the run running; the first three workers
    # each had the next one beside them, stopped for their timing pass.
    assert all(r["timed_alone"] is True for r in runner.records)
    assert stats.neighbour_pauses == 3
    assert stats.startup_cpu > 0
    # No process of the run used a core while a record was timed (the next worker stopped, the
    # runner waiting), and each worker's device stage came after the last timing before it.
    for r in runner.records:
        load = r["host_load"]
        assert load["other_cpu_own"] is not None and load["other_cpu_own"] <= 0.02, load
        assert load["other_cpu_own"] + load["other_cpu_foreign"] == load["other_cpu"]
    ends = {s["pid"]: [r["host_load"]["end_unix"] for r in runner.records
                       if r["worker_pid"] == s["pid"]] for s in stats.worker_stages}  # fmt: skip
    for before, after in zip(stats.worker_stages, stats.worker_stages[1:], strict=False):
        assert after["device_stage"][0] >= max(ends[before["pid"]])
    assert stats.device_stage > 0
    # What each timing pass's warm-up did, and the clock fields: unsupported here, with why.
    for r in runner.records:
        warm, clocks = r["timing"]["warmup"], r["timing"]["gpu_clocks"]
        assert warm["steps"] >= warm["min_steps"] == r["timing"]["warmup_steps"] == 2
        assert warm["seconds"] > 0
        assert isinstance(warm["settled"], bool) and warm["ceiling_seconds"] == 0.05
        assert clocks == {
            "status": "unsupported",
            "reason": "the device is not a CUDA GPU: NVML reads NVIDIA GPUs only",
        }


@pytest.mark.slow  # two workers with a 5 s build each: test-slow (CI runs it)
def test_the_next_worker_starts_its_device_stage_after_the_last_timing_before_it(
    tmp_path: Path,
) -> None:
    # Two workers (one per mode): a workload whose build takes 5 s, then a timed one. The second
    # worker finishes its imports during the first one's long build, and still its device stage
    # (CUDA's initialisation, on a GPU) begins only after the first worker's last timing sample.
    keys = ("lifecycle/slow_build", "lifecycle/steady")
    runner = prepare(_config(tmp_path / "run", *keys, replicates=1), io.StringIO())
    stats = runner.run()
    assert stats.records == 4 and stats.workers == 2
    assert all(r["status"] == "ok" for r in runner.records)
    first, second = stats.worker_stages
    assert [first["mode"], second["mode"]] == runner.plan.order_json()["replicates"][0]
    timed = [r for r in runner.records if r["worker_pid"] == first["pid"]]
    assert [r["workload"] for r in timed] == ["slow_build", "steady"]
    assert second["device_stage"][0] >= max(r["host_load"]["end_unix"] for r in timed)
    # It had loaded everything and waited for the go-ahead: the imports overlapped the build.
    assert second["device_wait_seconds"] > 0


def test_a_paused_worker_is_stopped_until_resumed(tmp_path: Path) -> None:
    job = {
        "mode": {"name": "default", "benchmark": False, "cudnn_deterministic": False,
                 "deterministic_algorithms": False, "cudnn_enabled": True},
        "device": "cpu", "sources": [], "workloads": [], "launched_at": time.time(),
    }  # fmt: skip
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    w = WorkerProcess(sys.executable, job, env, tmp_path / "w.log")
    try:
        assert w.pause() is True and w.stopped() is True
        w.resume()
        assert w.stopped(wait=0.0) is False
        msg = w.next(120)  # its first stage: imports, the mode, the workload files
        assert msg is not None and msg["type"] == "loaded"
        # Held before its device stage until released: nothing more comes.
        assert w.next(1.0) is TIMEOUT
        w.release()
        msg = w.next(120)
        assert msg is not None and msg["type"] == "ready"
        assert msg["startup_cpu_seconds"] > 0
        assert msg["device_wait_seconds"] >= 1.0
        start, end = msg["device_stage"]
        assert end >= start >= time.time() - 120
    finally:
        w.kill()
        w.finish()


@pytest.mark.slow  # two workers, one lost mid-run: test-slow (CI runs it)
def test_worker_with_a_lost_device_ends_and_a_fresh_worker_takes_the_rest(tmp_path: Path) -> None:
    keys = ("lifecycle/steady", "lifecycle/loses_device", "lifecycle/after_loss")
    runner = prepare(_config(tmp_path / "run", *keys, replicates=2), io.StringIO())
    stats = runner.run()
    by = {(r["workload"], r["mode"], r["replicate"]): r for r in runner.records}
    assert len(by) == 12
    for mode in ("default", "det-algos"):
        for rep in (0, 1):
            lost = by[("loses_device", mode, rep)]
            assert lost["status"] == "error"
            assert "illegal memory access" in lost["message"]
            assert by[("after_loss", mode, rep)]["status"] == "ok"
            assert by[("steady", mode, rep)]["status"] == "ok"
    # Each (mode, replicate) needed a second worker for after_loss: 4 + 4.
    assert stats.workers == 8
    logs = "".join(p.read_text() for p in (tmp_path / "run" / "logs").iterdir())
    assert "the CUDA context is unusable after lifecycle/loses_device" in logs


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_worker_that_never_starts_is_killed_and_two_stop_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "hangs_at_start.py"), "--mode", "default",
        "--replicates", "3", "--device", "cpu", "--startup-timeout", "4", "--out", str(out),
        "--no-report",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "2 workers in a row did not start" in last
    assert f"resume with: detbench run --resume {out}" in last
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["replicate"], r["status"]) for r in records] == [(0, "timeout"), (1, "timeout")]
    assert "did not start within 4 s" in records[0]["message"]


@requires_cuda
def test_next_worker_overlaps_on_cuda(tmp_path: Path) -> None:
    runner = prepare(_config(tmp_path / "run", "lifecycle/steady", device="cuda"), io.StringIO())
    stats = runner.run()
    assert all(r["status"] == "ok" and r["timed_alone"] for r in runner.records)
    assert stats.neighbour_pauses == 3
