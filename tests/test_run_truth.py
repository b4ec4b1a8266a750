"""Issue 35, on real runs: a run Ctrl-C'd before its first record can be resumed, or started
again in its folder; a step that raises in the probe worker stops the run at once, naming the
file and line of the user's code. (That a run with no ok record never says "Complete", and the
resumed call's counts: tests/test_models_suite.py and tests/test_resume.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .conftest import ROOT, detbench_cli

#: A workload whose worker waits at import while HOLD exists: a start-up that never ends until
#: the test lets it (as a slow import or CUDA initialisation would).
HELD = """
import sys, time
from pathlib import Path
import torch
import detbench

HOLD = Path(__file__).with_suffix(".hold")
_main = sys.modules["__main__"]
if getattr(getattr(_main, "__spec__", None), "name", None) == "detbench.worker.child":
    while HOLD.exists():
        time.sleep(0.05)


@detbench.workload(suite="held", items_per_step=4)
def add(ctx):
    x = torch.ones(4, 4, device=ctx.device)
    return lambda: [x + 1]
"""

RAISES = """
import torch
import detbench


@detbench.workload(suite="mine", items_per_step=4)
def bad_step(ctx):
    x = torch.ones(4, 4, device=ctx.device)

    def step():
        return [x @ torch.ones(3, 3)]  # line 10: the user's bug

    return step
"""


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal's Ctrl-C reaches the run


def _interrupt_in_startup(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    """Start ``detbench ARGS`` and send it SIGINT while its first worker starts up (the run has
    written env.json; the worker is held at import, so no record can exist)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "detbench", *args], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_sigint_default,
    )  # fmt: skip
    env_file = out / "env.json"
    before = env_file.stat().st_mtime_ns if env_file.exists() else None
    deadline = time.monotonic() + 300
    # The run writes its env.json as it begins, then spawns its first worker.
    while not env_file.exists() or env_file.stat().st_mtime_ns == before:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow  # three calls of a real run (two of them interrupted): about 30 s
def test_a_run_stopped_before_its_first_record_resumes_or_starts_again(tmp_path: Path) -> None:
    source = tmp_path / "held.py"
    source.write_text(HELD)
    hold = source.with_suffix(".hold")
    hold.touch()
    out = tmp_path / "run"
    args = [
        "run", "--workload", str(source), "--mode", "default", "--replicates", "2",
        "--device", "cpu", "--out", str(out), "--no-report",
    ]  # fmt: skip
    first = _interrupt_in_startup(args, out)
    assert first.returncode == 130, first.stderr
    assert first.stderr.rstrip().splitlines()[-1] == (
        f"detbench: interrupted; 0 records kept in {out}; resume with: detbench run --resume "
        f"{out} (nothing was measured: the same command again starts afresh)"
    )
    assert json.loads((out / "env.json").read_text())["host"] is None  # never collected
    # The same command again is taken, not refused: the folder held nothing measured.
    again = _interrupt_in_startup(args, out)
    assert again.returncode == 130, again.stderr
    assert f"detbench: {out} holds a run stopped before its first record: this run starts " in (
        again.stderr
    )
    # And the resume is taken too: nothing measured under another torch to refuse.
    hold.unlink()
    resumed = detbench_cli("run", "--resume", str(out), "--no-report")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {out}: 0 records kept, 2 to measure" in resumed.stderr
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["replicate"], r["status"]) for r in records] == [
        ("add", 0, "ok"),
        ("add", 1, "ok"),
    ]
    env = json.loads((out / "env.json").read_text())
    assert env["host"]["torch"] and env["finished_utc"]


@pytest.mark.slow  # one probe worker's start-up and record: about 10 s on a quiet 2-core CPU
def test_a_step_that_raises_in_the_probe_stops_the_run_naming_the_users_line(
    tmp_path: Path,
) -> None:
    source = tmp_path / "raises.py"
    source.write_text(textwrap.dedent(RAISES).lstrip("\n"))
    assert "the user's bug" in source.read_text().splitlines()[9]  # line 10
    out = tmp_path / "run"
    # 3 modes x 2 replicates: 6 records of a workload of the user's own, so the probe costs it.
    proc = detbench_cli(
        "run", "--workload", str(source), "--mode", "default", "--mode", "det-algos",
        "--mode", "cudnn-det", "--replicates", "2", "--device", "cpu",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "detbench: error: your workload mine/bad_step failed in the probe worker (mode default): "
        "fingerprint: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x4 and 3x3), "
        f"raised at {source}:10 (in step); the run stopped before its first worker and wrote "
        "nothing: fix it and run again"
    ]
    assert not out.exists()  # no worker of the run started: nothing was written
