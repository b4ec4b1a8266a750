"""The batch-first inputs and steps of the ``invariance`` suite: the first ``b`` rows of one
seeded tensor (row 0 the same request at every batch size), a computation done for each request
alone, and a pinned attention backend. Not a suite (its name starts with "_"):
``suites/invariance.py`` imports it by path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import detbench

#: The largest batch size of every declared ``batch_sizes`` (the suite's ``SIZES`` and
#: ``DECODER_SIZES``): inputs are rows of one tensor of this many.
LARGEST = 64
Step = Callable[[], list[torch.Tensor]]


def batch(ctx: Any) -> int:
    return ctx.batch_size if ctx.batch_size is not None else LARGEST


def rows(ctx: Any, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The first ``b`` rows of one seeded ``(LARGEST, *shape)`` tensor: row 0 is the same request
    at every batch size."""
    x = torch.randn(LARGEST, *shape, device=ctx.device, dtype=torch.float32)
    return x[: batch(ctx)].to(dtype).contiguous()


def ids(ctx: Any, vocab: int, *shape: int) -> torch.Tensor:
    x = torch.randint(0, vocab, (LARGEST, *shape), device=ctx.device)
    return x[: batch(ctx)].contiguous()


def per_row(fn: Callable[..., torch.Tensor], *batched: torch.Tensor) -> torch.Tensor:
    """``fn`` on each request alone (its rows ``i:i+1`` of every batched input), concatenated:
    the batch of 1's computation for every row, whatever the batch, so invariant by
    construction."""
    n = batched[0].shape[0]
    return torch.cat([fn(*(t[i : i + 1] for t in batched)) for i in range(n)])


def expose(step: Step, *inputs: torch.Tensor) -> Step:
    """Keep the step's batch-first inputs on it (``step.inputs``) for tests."""
    setattr(step, "inputs", list(inputs))  # noqa: B010 (a function attribute; mypy-clean)
    return step


def pinned(backend: str) -> Callable[[], Any]:
    """``lambda: sdpa_kernel(SDPBackend.X)``; ``SettingUnsupported`` where this torch lacks it."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:
        raise detbench.SettingUnsupported(
            f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel ({exc})"
        ) from exc
    name = detbench.SDPA_BACKENDS[backend]
    member = getattr(SDPBackend, name, None)
    if member is None:
        raise detbench.SettingUnsupported(
            f"torch {torch.__version__} has no SDPBackend.{name} (sdpa_kernel)"
        )
    return lambda: sdpa_kernel(member)
