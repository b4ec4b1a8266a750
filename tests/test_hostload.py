"""``host_load`` with real processes: the CPU time other processes took during a pass, split into
the run's own (the runner's descendants) and foreign ones; and the GPU part where there is none."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch

from detbench.worker import procs
from detbench.worker.hostload import Probe

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 20: pass"


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    """A child of this test process that keeps one core busy."""
    p = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


@pytest.mark.serial  # CPU shares: not beside other tests' processes
def test_the_runs_own_cpu_use_is_told_from_a_foreign_one(
    spinner: subprocess.Popen[bytes],
) -> None:
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        time.sleep(0.3)  # both started
        assert procs.is_own(spinner.pid, os.getpid())
        assert not procs.is_own(spinner.pid, idle.pid)
        assert set(procs.descendants(os.getpid()) or []) >= {spinner.pid, idle.pid}
        # A run whose runner is this process: the spinner is one of the run's own processes.
        probe = Probe("cpu", run_pid=os.getpid())
        probe.start()
        time.sleep(1.0)
        own = probe.stop()
        # A run whose runner is the sleeping process: the spinner is foreign to it.
        probe = Probe("cpu", run_pid=idle.pid)
        probe.start()
        time.sleep(1.0)
        foreign = probe.stop()
    finally:
        idle.kill()
        idle.wait()
    # The spinner keeps one core busy: half of this 2-core host's CPU time when it gets it all;
    # the machine is shared, so a lower bound.
    assert own["other_cpu_own"] > 0.1, own
    assert own["other_cpu_own"] + own["other_cpu_foreign"] == own["other_cpu"]
    assert foreign["other_cpu_own"] < 0.02 and foreign["other_cpu_foreign"] > 0.1, foreign
    assert own["end_unix"] - own["start_unix"] >= 1.0
    assert "gpu_other_processes" not in own  # a CPU probe reads no GPU


def test_without_a_known_runner_the_split_is_unknown() -> None:
    probe = Probe("cpu")
    probe.start()
    time.sleep(0.2)  # a few of the kernel's ticks
    out = probe.stop()
    assert out["other_cpu"] is not None
    assert out["other_cpu_own"] is None and out["other_cpu_foreign"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host without a GPU is what it reads")
def test_a_cuda_probe_without_nvml_says_why() -> None:
    # This machine has neither a GPU nor nvidia-ml-py: the GPU part is a note, never an error.
    probe = Probe("cuda", run_pid=os.getpid())
    probe.start()
    out = probe.stop()
    assert out["gpu_note"].startswith("NVML unavailable (")
    assert "gpu_other_processes" not in out and "gpu_own_processes" not in out
