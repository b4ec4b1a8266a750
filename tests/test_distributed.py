"""The distributed suite under torchrun, on this CPU with gloo and 2 ranks (real launches, real
ranks, real faults): records carry world_size, backend, every rank's fingerprint and the
ranks_agree verdict; a rank that crashes, runs out of memory or hangs gives its record a status,
the worker goes on, and no process of a launch is left alive afterwards."""

from __future__ import annotations

import io
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import detbench
from detbench import analysis
from detbench.core import settings as st
from detbench.core.modes import get_mode
from detbench.core.workload import load_file
from detbench.distributed.launch import launch_limit, run_distributed
from detbench.distributed.rank import nccl_refusal
from detbench.report import distributed as distributed_report
from detbench.run.config import RunConfig
from detbench.run.runner import prepare
from detbench.store.paired import iter_paired
from detbench.worker import fingerprint as fp
from detbench.worker.passes import run_workload

from .conftest import WORKLOADS, detbench_cli, requires_cuda

FAULTS = WORKLOADS / "distributed_faults.py"


def _alive_with(marker: str) -> list[str]:
    """Command lines of live processes (zombies aside) that carry ``marker``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state not in ("Z", "X"):
            out.append(cmd)
    return out


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


# -- the suite: one workload, 2 replicates of one mode, through the CLI ------------------------


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("distributed") / f"run-{uuid.uuid4().hex}"
    proc = detbench_cli(
        "run", "--suite", "distributed", "--only", "distributed/ddp_convnet", "--mode", "default",
        "--replicates", "2", "--device", "cpu", "--budget", "0.02", "--out", str(out),
        "--no-report", "--fingerprint", "both",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _alive_with(out.name)
    return out


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_each_member_is_one_launch_of_two_gloo_ranks(suite_run: Path) -> None:
    """Each member of a replicate's group (the mode, and the A/A copy) is one torchrun launch of
    two gloo ranks, kept for its distributed workloads: the mode's makes the verdict, then both
    take their turns side by side."""
    recs = _records(suite_run)
    assert [r["replicate"] for r in recs] == [0, 1]
    for r in recs:
        assert r["status"] == "ok", r["message"]
        assert r["world_size"] == 2 and isinstance(r["world_size"], int)
        assert r["backend"] == "gloo" and r["bucket_cap_mb"] == 25
        assert r["nccl_algo"] is None and r["nccl_proto"] is None
        assert r["ranks_agree"] is True and r["ranks_first_disagree_step"] is None
        assert r["rank_status"] == {"0": "ok", "1": "ok"}
        # The fingerprint covers both ranks: step i combines the ranks' digests of step i.
        assert len(r["rank_fingerprints"]) == 2 and len(r["step_fingerprints"]) == 4
        assert r["fingerprint"] == fp.combine(r["step_fingerprints"])
        # The ranks run the worker's passes: the sha256 cross-check and the ops called come too.
        assert len(r["step_fingerprints_sha256"]) == 4 and r["ops_called"] == ["convolution"]
        assert r["fingerprint_sha256"] == fp.combine(r["step_fingerprints_sha256"])
        # Each rank draws its own batch: their outputs (loss, BatchNorm buffers) differ.
        assert r["rank_fingerprints"][0] != r["rank_fingerprints"][1]
        # items: both ranks' batches. The verdict's ranks time nothing: they stay for the
        # rounds, so the record says the launch had not ended when it was made.
        assert r["items_per_step"] == 2 * 4
        assert r["timing_design"] == "paired" and r.get("timing") is None
        assert r["launch"]["torchrun_exit"] is None
        launch_dir = Path(r["launch"]["directory"])
        assert {"rank0.jsonl", "rank1.jsonl", "rank0.log", "launcher.log"} <= {
            p.name for p in launch_dir.iterdir()
        }
    # the first replicate's flop count serves the second
    assert recs[0]["flops_per_step"] > 0 and recs[1]["flops_per_step"] == recs[0]["flops_per_step"]
    # The rounds: every member's ranks timed on their shared (slowest-rank) clock, one launch
    # each (the mode's and the A/A copy's), and each record's cost joined from them.
    lines = list(iter_paired(suite_run))
    members = sorted((o["replicate"], o["copy"], o["status"]) for o in lines)
    assert members == [(0, 0, "ok"), (0, 1, "ok"), (1, 0, "ok"), (1, 1, "ok")]
    assert {o["timing"]["clock"] for o in lines} == {"perf_counter, latest of 2 ranks"}
    # Each member's first step over both ranks is the verdict's first step, bit for bit.
    assert all(o["same_bits"] is True for o in lines)
    launches = list((suite_run / "logs" / "distributed").iterdir())
    assert len(launches) == 4
    df = detbench.load_results(suite_run)
    assert (df["items_per_second"] == 8 / df["seconds_per_step"]).all()


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_the_run_to_run_verdict_comes_from_replicates(suite_run: Path) -> None:
    df = detbench.load_results(suite_run)
    v = analysis.verdicts(df)
    row = v[v["workload"] == "ddp_convnet"].iloc[0]
    same = len(set(df["fingerprint"])) == 1
    assert row["verdict"] == ("reproducible" if same else "nondeterministic")


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_the_report_section_shows_world_size_backend_and_agreement(suite_run: Path) -> None:
    df = detbench.load_results(suite_run)
    t = distributed_report.table(df)
    assert list(t["world_size"]) == [2] and list(t["backend"]) == ["gloo"]
    assert list(t["ranks_agree"]) == [True]
    blocks = distributed_report.blocks(df)
    text = "\n".join(repr(b) for b in blocks)
    assert "Distributed" in text and "gloo" in text
    assert distributed_report.blocks(df[df["suite"] != "distributed"]) == []


# -- faults --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A crash and an out-of-memory in rank 1, then an ordinary workload, in one real worker."""
    out = tmp_path_factory.mktemp("dfaults") / f"run-{uuid.uuid4().hex}"
    only = ["dfaults/crash_at_step", "dfaults/oom_on_rank1", "dfaults/after"]
    config = RunConfig(out=out, workload_files=[FAULTS], modes=[get_mode("default")],
                       replicates=1, budget=0.01, only=only, device="cpu")  # fmt: skip
    prepare(config, stream=io.StringIO()).run()
    return out, _records(out)


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_rank_killed_mid_step_is_crashed_and_nothing_is_left(
    fault_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    out, recs = fault_run
    by = {r["workload"]: r for r in recs}
    crash = by["crash_at_step"]
    assert crash["status"] == "crashed", crash["message"]
    assert "rank 1 killed by signal SIGKILL" in crash["message"]
    assert "fingerprint step 2" in crash["message"]  # the tail of rank 1's log
    assert crash["fingerprint"] is None and crash["items_per_second"] is None
    assert crash["world_size"] == 2 and crash["backend"] == "gloo"
    # A member keeps its ranks for its distributed workloads, but the crash ended them: the
    # out-of-memory workload had a fresh launch of its own.
    assert crash["launch"]["workloads"] == ["dfaults/crash_at_step"]
    oom = by["oom_on_rank1"]
    assert oom["launch"]["workloads"] == ["dfaults/oom_on_rank1"]
    assert oom["launch"]["directory"] != crash["launch"]["directory"]
    assert not _alive_with(out.name)


@pytest.mark.slow  # a whole run end to end (the killed rank's, above): make test-slow and CI run it
def test_a_rank_out_of_memory_is_oom_and_the_worker_goes_on(
    fault_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    by = {r["workload"]: r for r in fault_run[1]}
    oom = by["oom_on_rank1"]
    assert oom["status"] == "oom", oom["message"]
    assert oom["message"].startswith("rank 1: build: ")
    assert by["after"]["status"] == "ok" and by["after"]["world_size"] is None


def test_a_hung_rank_is_a_timeout_after_the_launch_limit(tmp_path: Path) -> None:
    out = tmp_path / f"run-{uuid.uuid4().hex}"
    (w,) = [w for w in load_file(FAULTS) if w.name == "hang_at_step"]
    job = {
        "device": "cpu", "seed": 0, "profile": "quick", "replicate": 0, "fingerprint": "sha256",
        "fingerprint_steps": 4, "warmup_steps": 1, "budget": 0.01, "target_rel": 0.03,
        "min_samples": 6, "sources": [str(FAULTS)], "reference_dir": str(out / ".reference"),
        "timeout": 6.25,
    }  # fmt: skip
    assert launch_limit(job) == 5.0
    rec, device_lost = run_workload(w, job, get_mode("default"), launch=run_distributed)
    assert not device_lost
    assert rec["status"] == "timeout", rec["message"]
    assert "exceeded its limit of 5 s" in rec["message"]
    assert rec["launch"]["torchrun_exit"] is None and rec["launch"]["seconds"] < 5.0 + 10
    assert not _alive_with(out.name)


def test_launch_limits_leave_the_runner_time_to_record() -> None:
    assert launch_limit({"timeout": 900.0}) == 870.0
    assert launch_limit({"timeout": None}) is None
    assert launch_limit({}) == 870.0  # the runner's default timeout


def test_an_nccl_refusal_of_a_set_algorithm_is_unsupported_only_when_one_was_set() -> None:
    text = "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, invalid usage"
    nvls = {"nccl": {"NCCL_ALGO": "NVLS", "NCCL_PROTO": None}}
    assert nccl_refusal(nvls, text) == "NCCL_ALGO=NVLS"
    assert nccl_refusal({"nccl": {"NCCL_ALGO": None, "NCCL_PROTO": None}}, text) is None
    assert nccl_refusal({"nccl": {"NCCL_ALGO": "Ring"}}, "KeyError: 'fc3'") is None


def test_world_size_and_ddp_settings_are_rows_of_the_table() -> None:
    data = {s.name: s.to_json() for s in st.SETTINGS}  # what 'detbench settings --json' lists
    assert data["world_size"]["default"] == "2" and "8" in data["world_size"]["levels"]
    assert data["bucket_cap_mb"]["default"] == "25"
    assert data["nccl_algo"]["levels"][:3] == ["unset", "Ring", "Tree"]
    assert data["nccl_proto"]["devices"] == ["cuda"]
    for name in ("world_size", "bucket_cap_mb", "nccl_algo", "nccl_proto"):
        assert data[name]["scope"] == "distributed" and data[name]["available"]
    mode = get_mode("default").with_settings(st.parse_assignments(["world_size=4"]))
    assert mode.name == "default[world_size=4]"


# -- CUDA: one rank with NCCL on one GPU ----------------------------------------------------------


@requires_cuda
def test_one_nccl_rank_on_one_gpu(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--suite", "distributed", "--only", "distributed/allreduce_gradient",
        "--only", "distributed/ddp_convnet", "--mode", "default", "--replicates", "2",
        "--device", "cuda", "--profile", "quick", "--set", "world_size=1",
        "--set", "nccl_algo=Ring", "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = _records(out)
    assert len(recs) == 4
    for r in recs:
        assert r["status"] == "ok", r["message"]
        assert r["backend"] == "nccl" and r["world_size"] == 1 and r["nccl_algo"] == "Ring"
        assert r["ranks_agree"] is True
    df = pd.DataFrame(recs)
    assert set(df["device"]) == {"cuda"}
    assert not _alive_with(str(out))


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_a_mode_timed_as_another_makes_its_verdict_and_times_nothing(tmp_path: Path) -> None:
    """On a CPU, cudnn-det is the same computation as default: its member makes its verdict in a
    launch of its own and sits the rounds out, and that launch times nothing (make bench once
    timed 72 such records in their launches, in a run whose costs are all paired)."""
    out = tmp_path / f"run-{uuid.uuid4().hex}"
    only = ["--suite", "distributed", "--only", "distributed/allreduce_gradient"]
    modes = ["--mode", "default", "--mode", "cudnn-det", "--replicates", "2"]
    proc = detbench_cli("run", *only, *modes, "--device", "cpu", "--out", str(out), "--no-report")
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = detbench.load_results(out)
    assert set(df["timing_design"]) == {"paired"}
    twin = df[df["mode"] == "cudnn-det"]
    assert len(twin) == 2 and (twin["status"] == "ok").all()
    assert twin["seconds_per_step"].isna().all() and set(twin["timed_as"]) == {"default"}
    assert df[df["mode"] == "default"]["seconds_per_step"].notna().all()
    assert not _alive_with(out.name)
