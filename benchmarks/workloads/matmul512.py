"""One 512x512 float32 matrix product per step: the workload issue 39 checked paired samples
with (about 1.3 ms a step on the 2-core development VM by ``torch.utils.benchmark``).

    python -m detbench run --workload benchmarks/workloads/matmul512.py --device cpu \
        --mode default --mode det-algos --replicates 3 --reference-check 0.1 --out DIR
    python tools/steady_check.py DIR
"""

import torch

import detbench


@detbench.workload(suite="steady", items_per_step=1)
def matmul512(ctx):  # ctx.device: torch.device
    a = torch.randn(512, 512, device=ctx.device)
    b = torch.randn(512, 512, device=ctx.device)

    def step():
        return [a @ b]

    return step
