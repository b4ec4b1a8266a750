"""A workload that keeps about 3 GiB resident while it runs (``DETBENCH_TEST_RESIDENT_GIB``
sets another size): eleven copies of it (every mode of a paired group and the A/A copy) do not
fit a 24 GiB host, so the paired phase must time it in subgroups that do (issue 39). The memory
is real: a tensor of that size, written through (a zero page the kernel never backs would not
count), and a small step that reads a slice of it."""

import os

import torch

import detbench

#: float32 elements in the resident tensor.
ELEMENTS = int(float(os.environ.get("DETBENCH_TEST_RESIDENT_GIB", "3")) * (1 << 30)) // 4


@detbench.workload(suite="big", items_per_step=1)
def resident_big(ctx):
    held = torch.ones(ELEMENTS, device=ctx.device)  # every page written: resident
    x = torch.randn(256, 256, device=ctx.device)

    def step():
        return [x @ x + held[:256].sum()]

    return step
