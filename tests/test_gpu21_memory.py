"""The first workload of a worker carries no library workspace in its peak (issue 21 item 8)."""

from __future__ import annotations

import subprocess
import sys

import torch

from .conftest import ROOT, requires_cuda

CHECK = """
import torch
from detbench.worker.memory import PeakWatch, warm_libraries
device = torch.device("cuda")
torch.empty(1, device=device)
warm_libraries(device)
peaks = []
for _ in range(2):
    a = torch.randn(512, 512, device=device)
    watch = PeakWatch(device)
    watch.start()
    torch.mm(a, a)
    peaks.append(watch.stop()[0])
    del a
print(peaks[0], peaks[1])
"""


def test_warm_libraries_does_nothing_on_a_cpu() -> None:
    from detbench.worker.memory import warm_libraries

    assert warm_libraries(torch.device("cpu")) == {}


@requires_cuda
def test_the_first_matmul_peak_equals_the_second_on_cuda() -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = map(int, proc.stdout.split()[-2:])
    assert first == second, (first, second)
