"""A worker's life with real processes: a worker waits for its device stage until released; a
worker whose device context is lost ends and a fresh one takes the rest; a worker that never
gets ready is killed, and two in a row stop the run."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest

from detbench.core.modes import get_mode
from detbench.run.config import VERDICTS_ONLY, RunConfig
from detbench.run.runner import prepare
from detbench.run.supervise import TIMEOUT, WorkerProcess

from .conftest import ROOT, WORKLOADS, detbench_cli


def _config(out: Path, *only: str, replicates: int = 2, device: str = "cpu") -> RunConfig:
    return RunConfig(
        out=out,
        workload_files=[WORKLOADS / "lifecycle.py"],
        modes=[get_mode("default"), get_mode("det-algos")],
        replicates=replicates,
        device=device,
        budget=0.05,
        only=list(only),
        # Verdicts alone, as ``detbench audit`` makes them: no A/A copy, no rounds.
        timing=VERDICTS_ONLY,
    )


def test_a_worker_waits_for_its_device_stage_until_released(tmp_path: Path) -> None:
    job = {
        "mode": {"name": "default", "benchmark": False, "cudnn_deterministic": False,
                 "deterministic_algorithms": False, "cudnn_enabled": True},
        "device": "cpu", "sources": [], "workloads": [], "launched_at": time.time(),
    }  # fmt: skip
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    w = WorkerProcess(sys.executable, job, env, tmp_path / "w.log")
    try:
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
    assert stats.paired is not None and stats.paired["workers"] == 8
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
