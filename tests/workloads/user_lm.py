"""A user's own workload of the kind issue 29 reports on: a small language model's training step
on the CPU (an embedding, a causal mixing of the context and an MLP, cross-entropy on the next
token), a few to tens of milliseconds a step. No suite figure estimates it, so the plan's probe
worker measures it (``detbench.run.planprobe``), and the dry run, the plan line and the progress
line agree with the real time (``tests/test_planprobe.py``)."""

from __future__ import annotations

from typing import Any

import torch

import detbench


@detbench.workload(suite="user_lm", items_per_step=16, loss_output=0)
def next_token_lm(ctx: detbench.Context) -> Any:
    vocab, width, seq = 512, 128, 32
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width),
        torch.nn.GELU(),
        torch.nn.Linear(4 * width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, vocab),
    ).to(ctx.device)
    embed = torch.nn.Embedding(vocab, width).to(ctx.device)
    params = [*model.parameters(), *embed.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    tokens = torch.randint(0, vocab, (16, seq + 1), device=ctx.device)
    # Each position sees the mean of the tokens before it (a causal mixing, as attention does).
    causal = torch.tril(torch.ones(seq, seq, device=ctx.device))
    causal = causal / causal.sum(1, keepdim=True)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        h = causal @ embed(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(model(h).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        return [loss.detach()]

    return step
