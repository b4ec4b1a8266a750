"""Issue 21, item 5: distributed workloads on a one-GPU host. The world size defaults to
min(2, visible GPUs) on CUDA (2 on CPU), the NCCL settings are recorded inert at world size 1
(NCCL's one-rank path runs no algorithm), and the NCCL variables are read back in the rank after
``init_process_group`` (on the H100 with torch 2.11, ``NCCL_ALGO`` stayed unset at one rank under
deterministic algorithms: results/20261124-h100-experiments/nccl.json)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.core import settings as st
from detbench.core import torchstate as ts
from detbench.core.modes import get_mode
from detbench.distributed import launch, rank

from .conftest import detbench_cli, requires_cuda


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("device", "gpus", "world"), [
    ("cpu", 0, "2"), ("cpu", 4, "2"), ("cuda", 0, "1"), ("cuda", 1, "1"), ("cuda", 2, "2"),
    ("cuda", 8, "2"),
])  # fmt: skip
def test_world_size_default_is_min_2_visible_gpus_on_cuda(
    device: str, gpus: int, world: str
) -> None:
    assert st.world_size_default(device, gpus) == world
    assert st.default_level("world_size", device, gpus) == world
    assert st.default_level("bucket_cap_mb", device, gpus) == "25"


def test_a_launch_on_a_one_gpu_host_has_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "visible_gpus", lambda: 1)
    assert launch._levels(get_mode("det-algos"), "cuda")["world_size"] == "1"
    assert launch._levels(get_mode("det-algos"), "cpu")["world_size"] == "2"
    given = get_mode("det-algos[world_size=2]")
    assert launch._levels(given, "cuda")["world_size"] == "2"  # --set wins (and is unsupported)


def test_nccl_settings_are_inert_at_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("nccl_algo", "nccl_proto"):
        reason = st.inert_reason(name, "cuda", {"world_size": "1"}, True)
        assert reason is not None and "one-rank path runs no algorithm" in reason
        assert st.inert_reason(name, "cuda", {"world_size": "2"}, True) is None
    monkeypatch.setattr(st, "visible_gpus", lambda: 1)  # no world_size given: the default, 1
    inert = st.inert_settings(ts.NCCL_ENV, "cuda", {}, False)
    assert inert is not None and set(inert) == {"nccl_algo", "nccl_proto"}
    monkeypatch.setattr(st, "visible_gpus", lambda: 2)
    assert st.inert_settings(ts.NCCL_ENV, "cuda", {}, False) is None


def test_the_record_says_what_nccl_read_after_init(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "^NVLS")
    monkeypatch.delenv("NCCL_PROTO", raising=False)
    seen = rank.nccl_read_back()
    assert seen == {"NCCL_ALGO": "^NVLS", "NCCL_PROTO": None}
    rec: dict[str, Any] = {"backend": "nccl", "nccl_algo": None, "nccl_proto": None}
    ts.nccl_read_back(rec, seen)
    assert rec["nccl_algo"] == "^NVLS" and rec["nccl_proto"] is None and rec["nccl_env"] == seen
    unset = {"NCCL_ALGO": None, "NCCL_PROTO": None}  # what the H100 showed: nothing set
    rec = {"backend": "nccl", "nccl_algo": "Ring", "nccl_proto": None}
    ts.nccl_read_back(rec, unset)
    assert rec["nccl_algo"] is None
    gloo: dict[str, Any] = {"backend": "gloo", "nccl_algo": None, "nccl_proto": None}
    ts.nccl_read_back(gloo, seen)  # gloo reads no NCCL variable: the columns stay as set
    assert gloo["nccl_algo"] is None and gloo["nccl_env"] == seen


@pytest.mark.slow  # a torchrun launch of 2 ranks per mode: test-slow (CI runs it)
def test_a_cpu_launch_records_the_read_back_and_the_inert_settings(tmp_path: Path) -> None:
    out = tmp_path / f"run-{uuid.uuid4().hex}"
    proc = detbench_cli(
        "run", "--suite", "distributed", "--only", "distributed/allreduce_gradient",
        "--mode", "default", "--replicates", "2", "--device", "cpu", "--budget", "0.02",
        "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in _records(out):
        assert r["status"] == "ok", r["message"]
        assert r["world_size"] == 2 and r["backend"] == "gloo"
        assert r["nccl_env"] == {"NCCL_ALGO": None, "NCCL_PROTO": None}
        assert r["settings_inert"] == {
            "nccl_algo": "nccl_algo acts only on cuda",
            "nccl_proto": "nccl_proto acts only on cuda",
        }


@requires_cuda
def test_on_cuda_the_default_world_size_fits_the_gpus(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--suite", "distributed", "--only", "distributed/allreduce_gradient",
        "--mode", "det-algos", "--replicates", "2", "--device", "cuda", "--profile", "quick",
        "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    world = min(2, torch.cuda.device_count())
    for r in _records(out):
        assert r["status"] == "ok", r["message"]
        assert r["world_size"] == world and r["backend"] == "nccl"
        assert set(r["nccl_env"]) == {"NCCL_ALGO", "NCCL_PROTO"}
        assert r["nccl_algo"] == r["nccl_env"]["NCCL_ALGO"]  # what was there, not assumed
        if world == 1:
            assert set(r["settings_inert"]) == {"nccl_algo", "nccl_proto"}
        else:
            assert r["settings_inert"] is None
