"""On a GPU: the built-in conv suite under cuDNN's modes, end to end. Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import detbench
from detbench.analysis import verdicts

from .conftest import detbench_cli, requires_cuda


@requires_cuda
def test_conv_suite_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = detbench_cli(
        "run",
        "--device",
        "cuda",
        "--profile",
        "quick",
        "--suite",
        "conv",
        "--mode",
        "default",
        "--mode",
        "bench",
        "--mode",
        "cudnn-det+det-algos",
        "--replicates",
        "2",
        "--min-run-time",
        "0.05",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    df = detbench.load_results(out)
    assert (df["status"] == "ok").all(), df[["workload", "mode", "message"]]
    assert (df["device"] == "cuda").all()
    det = verdicts(df[df["mode"] == "cudnn-det+det-algos"])
    assert (det["verdict"] == "reproducible").all()
    env = __import__("json").loads((out / "env.json").read_text())
    assert env["worker"]["gpu_name"] and env["worker"]["cudnn_version"]
