"""Bad input: one clear line, exit status 2, and no file written or changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import ROOT, WORKLOADS, detbench_cli, unnamed_device


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "fastest"], "unknown mode 'fastest'"),
        (["--mode", "default", "--mode", "default"], "a --mode is given twice"),
        (["--replicates", "1"], "one replicate cannot show run-to-run behaviour"),
        (["--replicates", "0"], "at least 2 are needed"),
        (["--suite", "nope"], "unknown suite 'nope'; built-in suites: "),
        (["--workload", "missing.py"], "workload file not found: missing.py"),
        (["--timeout", "0"], "--timeout must be a positive number"),
        (["--only", "conv/nope"], "unknown workload 'conv/nope'; the workloads of this run: "),
        (
            ["--workload", str(WORKLOADS / "crashing.py"), "--only", "crashing/nope"],
            "unknown workload 'crashing/nope'; the workloads of this run: crashing/before, "
            "crashing/aborts, crashing/after",
        ),
        (["--workload", str(WORKLOADS / "no_workloads.py")], "defines no workload (no function "),
        (
            ["--resume", "x", "--seed", "1"],
            "--resume continues a run with its own options; give no --device with it",
        ),
    ],
)
def test_bad_run_options(tmp_path: Path, args: list[str], message: str) -> None:
    before = snapshot(tmp_path)
    proc = detbench_cli(
        "run", "--device", "cpu", "--out", str(tmp_path / "out"), *args, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert proc.stderr.startswith("detbench: error: ") and message in proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu(tmp_path: Path) -> None:
    proc = detbench_cli("run", "--device", "cuda", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "detbench: error: --device cuda: no CUDA GPU is available to torch on this machine"
    )
    assert not (tmp_path / "out").exists()


def test_a_workload_file_that_fails_to_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import detbench\nraise RuntimeError('boom at import')\n")
    proc = detbench_cli(
        "run", "--workload", str(bad), "--device", "cpu", "--out", str(tmp_path / "out")
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"detbench: error: importing {bad} failed: RuntimeError: boom at import"
    )
    assert not (tmp_path / "out").exists()


def test_refuses_a_directory_with_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text('{"schema_version": 1}\n')
    (out / "env.json").write_text("{}\n")
    before = snapshot(tmp_path)
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "crashing.py"), "--device", "cpu", "--out", str(out)
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"detbench: error: {out} holds the results of a detbench run (1 record): give a new "
        "--out (nothing was changed)\n"
    )
    assert snapshot(tmp_path) == before


#: Every command that writes into a folder it is given, as a user would call it on theirs.
WRITERS = {
    "run": ["run", "--only", "ops/cumsum", "--device", "cpu", "--out"],
    "attribute": ["attribute", "--only", "ops/cumsum", "--device", "cpu", "--out"],
    "gpu-check": ["gpu-check", "--device", "cpu", "--out"],
    "audit": ["audit", str(WORKLOADS / "audit_me.py"), "--device", "cpu", "--out"],
    "submit": ["submit", "--executor", "local", "--shards", "2", "--device", "cpu", "--out"],
}


@pytest.mark.parametrize("command", [*WRITERS, "merge"])
def test_a_users_own_folder_is_refused_and_left_as_it_was(tmp_path: Path, command: str) -> None:
    """--out (merge: OUT) on a folder with a user's report.md and plots/, but no run: one line,
    exit status 2, every file byte for byte as it was (issue 28)."""
    mine = tmp_path / "mine"
    (mine / "plots").mkdir(parents=True)
    (mine / "report.md").write_text("# my own notes\n")
    (mine / "plots" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n not detbench's")
    before = snapshot(tmp_path)
    if command == "merge":
        runs = sorted(ROOT.joinpath("results").glob("*-cuda-full-*"))[:2]
        proc = detbench_cli("merge", str(mine), *map(str, runs))
        flag = "OUT"
    else:
        proc = detbench_cli(*WRITERS[command], str(mine))
        flag = "--out"
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"detbench: error: {mine} is not empty (it holds plots/ and report.md): give {flag} a "
        "new or empty folder (nothing was changed)"
    )
    assert snapshot(tmp_path) == before


def test_list_json_names_suite_and_workload() -> None:
    proc = detbench_cli("list", "--json", "--profile", "quick")
    assert proc.returncode == 0, proc.stderr
    items = json.loads(proc.stdout)
    by_key = {(i["suite"], i["workload"]): i for i in items}
    assert {"conv", "training"} <= {i["suite"] for i in items}
    stem = by_key[("conv", "conv2d_resnet50_stem")]
    assert stem["params"]["batch"] == 2  # the quick size
    assert stem["params"]["input"] == "64x64"
    assert ("training", "transformer_encoder") in by_key


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_crashing_worker_loses_only_the_workload_in_flight(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = detbench_cli(
        "run",
        "--workload",
        str(WORKLOADS / "crashing.py"),
        "--mode",
        "default",
        "--replicates",
        "2",
        "--min-run-time",
        "0.01",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    by = {(r["workload"], r["replicate"]): r for r in records}
    assert len(records) == 6
    for rep in (0, 1):
        assert by[("before", rep)]["status"] == "ok"
        assert by[("after", rep)]["status"] == "ok"  # measured by a fresh worker
        crash = by[("aborts", rep)]
        assert crash["status"] == "crashed"
        assert crash["exit_code"] == -6
        assert "killed by signal SIGABRT while running this workload" in crash["message"]


# -- the rule of tests/conftest.py: every run a test starts names its device (issue 21) -----------


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--suite", "bmm"],
        ["attribute", "--suite", "batchnorm"],
        ["audit", "x.py"],
        ["locate", "x.py:w", "--json"],
        ["gpu-check"],
    ],
)
def test_a_run_that_names_no_device_fails_the_test(args: list[str]) -> None:
    from detbench.cli.main import main

    assert unnamed_device(args) is not None
    for named in (["--device", "cpu"], ["--device=cuda"], ["--devices", "cpu,cpu"]):
        assert unnamed_device([*args, *named]) is None
    with pytest.raises(pytest.fail.Exception, match="names no device"):
        detbench_cli(*args)  # refused before any process starts
    with pytest.raises(pytest.fail.Exception, match="names no device"):
        main(args)  # detbench's parser, in this process
    with pytest.raises(pytest.fail.Exception, match="names no device"):
        subprocess.run([sys.executable, "-m", "detbench", *args], check=False)
    assert unnamed_device(["run", "--resume", "DIR"]) is None  # the run's own device
    assert unnamed_device(["report", "DIR"]) is None and unnamed_device(["list"]) is None


@pytest.mark.default_device
def test_the_default_device_is_cuda_with_a_gpu_else_cpu(tmp_path: Path) -> None:
    """The one test that leaves the device out on purpose: what a user gets by default."""
    out = tmp_path / "run"
    proc = detbench_cli("run", "--suite", "bmm", "--mode", "default", "--replicates", "2",
                        "--out", str(out), "--dry-run", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert plan["profile"] == ("full" if torch.cuda.is_available() else "quick")
    assert not out.exists()
