"""Which of the ops that settings act on a step really calls, seen while it runs.

A declaration can be missing (a Hugging Face model calls ``scaled_dot_product_attention`` without
saying so). ``OpsSeen``, a ``TorchFunctionMode``, sees every torch function called from Python,
but not what a torch function calls itself: ``F.multi_head_attention_forward``'s SDPA call (no
weights asked for) is looked for in its arguments. It watches attention (``sdpa_backend``) and
convolutions, all that ``cudnn.benchmark`` autotunes (``run.paired.PairedPhase.holds``); one
called from TorchScript or C++ goes unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: torch's entry points of a convolution (``F.conv2d`` is ``torch.conv2d``), those this torch has.
CONVOLUTIONS = (
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "convolution",
    "_convolution",
    "cudnn_convolution",
    "cudnn_convolution_transpose",
    "miopen_convolution",
)

#: The ops watched: the name a record gives each, and the torch functions that are it.
WATCHED: dict[str, tuple[Callable[..., Any], ...]] = {
    "scaled_dot_product_attention": tuple(
        f
        for f in (
            getattr(torch.nn.functional, "scaled_dot_product_attention", None),
            getattr(torch, "_native_multi_head_attention", None),
        )
        if f is not None
    ),
    "convolution": tuple(getattr(torch, n) for n in CONVOLUTIONS if hasattr(torch, n)),
}
_MHA_FORWARD = getattr(torch.nn.functional, "multi_head_attention_forward", None)


class OpsSeen(TorchFunctionMode):
    """``with OpsSeen() as seen: step()``, then ``seen.called``: the watched ops that ran."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()
        self._names = {f: name for name, fs in WATCHED.items() for f in fs}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = self._names.get(func)
        if name is not None:
            self._seen.add(name)
        elif func is _MHA_FORWARD and kwargs.get("need_weights") is False:
            self._seen.add("scaled_dot_product_attention")
        return func(*args, **kwargs)

    @property
    def called(self) -> list[str]:
        return sorted(self._seen)


def attn_implementation(noted: str | None, called: list[str] | None) -> str | None:
    """The record's ``attn_implementation``: the factory's note, else "sdpa" if seen, else None."""
    if noted is not None:
        return noted
    if called is not None and "scaled_dot_product_attention" in called:
        return "sdpa"
    return None
