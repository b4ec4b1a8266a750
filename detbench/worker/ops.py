"""Which of the ops that settings act on a step really calls, seen while it runs.

A workload may declare ``attention=True``, but a declaration can be missing (a user's Hugging
Face model calls ``scaled_dot_product_attention`` without saying so) and a study that trusts it
skips the ``sdpa_backend`` switch for a model whose bits that switch changes. ``OpsSeen`` is a
``TorchFunctionMode``: every torch function called from Python while it is active passes through
it, so it sees ``F.scaled_dot_product_attention`` wherever it is called from in Python (a model's
module, a library's attention function), whichever backend then runs it (the math backend
included), and ``torch._native_multi_head_attention`` (``nn.
MultiheadAttention``'s fused path, which calls SDPA inside C++). Torch takes a mode off while it
handles a call, so what a torch function calls inside itself is not seen:
``F.multi_head_attention_forward`` (``nn.MultiheadAttention`` in training) calls SDPA when asked
for no weights (``need_weights=False``), which is looked for in its arguments. It records names
only and changes nothing the step computes.

It watches two ops. Attention, for the reason above. A convolution, because it is all that
``cudnn.benchmark`` autotunes: a step seen calling none has nothing for the autotuner to time,
and a paired run on a GPU makes its autotuned modes' verdicts beside the others
(``run.paired.PairedPhase.holds``). A convolution called where a function mode cannot see it (a
TorchScript module, a call from C++) goes unseen; such a step is then treated as one without.

The fingerprint pass runs its first step under it (``record["ops_called"]``; not under
``execution=compile``, where the first step is the compilation), and ``detbench attribute`` runs
one step of each workload under it before it chooses the study's variants
(``detbench.run.probe``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: torch's entry points of a convolution (``F.conv2d`` is ``torch.conv2d``), those this torch
#: has: what ``cudnn.benchmark`` autotunes on a GPU (cuDNN's, MIOpen's on ROCm).
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
    """``with OpsSeen() as seen: step()`` then ``seen.called``: the watched ops that ran, by the
    names of ``WATCHED``, sorted."""

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
    """The record's ``attn_implementation``: what the factory noted (``ctx.note``), else
    ``"sdpa"`` where the step was seen calling ``scaled_dot_product_attention``, else None (no
    attention, or attention written out in matmuls and softmax: the two look alike)."""
    if noted is not None:
        return noted
    if called is not None and "scaled_dot_product_attention" in called:
        return "sdpa"
    return None
