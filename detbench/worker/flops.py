"""Counting the floating-point operations of one step with torch's own formulas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def count_flops(step: Callable[[], Any]) -> int | None:
    """Floating-point operations of one step, forward and backward, by the formulas of
    ``torch.utils.flop_counter`` (elementwise ops count 0); None when it counts nothing. A plain
    dispatch mode, since ``FlopCounterMode``'s module hooks break ``torch.autograd.grad`` on
    leaves.

    Corrections: torch's ``convolution_backward`` formula ignores ``groups``, so each gradient
    is counted as the forward's multiply-adds; an op with a sparse argument is not counted
    (dense formulas); the CPU's flash attention, which torch's registry lacks, is counted with
    the GPU's formulas (``_cpu_attention``)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import conv_flop_count, flop_registry

    conv_backward = torch.ops.aten.convolution_backward
    own = {**flop_registry, **_cpu_attention()}

    class Counter(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet is conv_backward:
                grad_out, x, weight, *_, transposed, _, _, mask = args
                forward = conv_flop_count(x.shape, weight.shape, grad_out.shape, transposed)
                self.total += forward * (int(mask[0]) + int(mask[1]))
            elif packet in own and not any(
                isinstance(a, torch.Tensor) and a.layout != torch.strided for a in args
            ):
                self.total += int(own[packet](*args, **kwargs, out_val=out))
            return out

    with Counter() as counter:
        step()
    return counter.total or None


def _cpu_attention() -> dict[Any, Callable[..., int]]:
    """The CPU flash attention's forward and backward, counted as torch counts the GPU's."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)

    def fwd(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_flop_count(q.shape, k.shape, v.shape))

    def bwd(grad: Any, q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_backward_flop_count(grad.shape, q.shape, k.shape, v.shape))

    out: dict[Any, Callable[..., int]] = {}
    if forward is not None:
        out[forward] = fwd
    if backward is not None:
        out[backward] = bwd
    return out
