"""The spatial workloads of the ``ops`` suite: interpolation, pooling, padding, grid sampling and
max-unpooling, forward and backward (the backward accumulates into the input's gradient).

Not a suite (its name starts with "_"): ``suites/ops.py`` calls ``define`` with its own
``_register`` and ``_doc``, so that each workload is registered from ``ops.py`` under its
``ops/`` name, in the catalog's order. See ``ops.py`` for how work per step is counted.

Bytes: forward reads x and writes y, backward reads dy and writes dx: 2 * (|x| + |y|) * 4 (the
argmax indices that max pooling saves are not counted).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import detbench

Step = Callable[[], list[torch.Tensor]]
Sizes = dict[str, dict[str, Any]]
Builder = Callable[..., Step]
#: ``ops._register``: (name, op, doc, sizes, items, nbytes, **flags) -> decorator of a builder.
Register = Callable[..., Callable[[Builder], Builder]]
#: ``ops._doc``: the catalog entries of (op, *condition parts) queries.
Doc = Callable[..., dict[str, Any]]
F4, I8 = 4, 8  # bytes per float32 and per int64 element


def _numel(shape: tuple[int, ...] | list[int]) -> int:
    return math.prod(shape)


def _grad(out: torch.Tensor, inputs: list[torch.Tensor], grad_out: torch.Tensor) -> list[Any]:
    return list(torch.autograd.grad(out, inputs, grad_out))


def _spatial(
    register: Register,
    name: str,
    op: str,
    doc: dict[str, Any],
    sizes: Sizes,
    fn: Callable[..., torch.Tensor],
    out_numel: Callable[..., int],
) -> None:
    @register(
        name,
        op,
        doc,
        sizes,
        lambda shape, **kw: _numel(shape),
        lambda shape, **kw: 2 * (_numel(shape) + out_numel(shape, **kw)) * F4,
    )
    def build(ctx: detbench.Context, shape: tuple[int, ...], **kw: Any) -> Step:
        x = torch.randn(*shape, device=ctx.device, requires_grad=True)
        with torch.no_grad():
            grad_out = torch.randn_like(fn(x, **kw))
        return lambda: _grad(fn(x, **kw), [x], grad_out)


def _scaled(shape: tuple[int, ...], scale: int = 2, **kw: Any) -> int:
    return _numel(shape[:2]) * _numel([s * scale for s in shape[2:]])


def _resized(shape: tuple[int, ...], output_size: tuple[int, ...], **kw: Any) -> int:
    return _numel(shape[:2]) * _numel(output_size)


def _padded(shape: tuple[int, ...], pad: int, **kw: Any) -> int:
    return _numel(shape[:2]) * _numel([s + 2 * pad for s in shape[2:]])


def _pooled(shape: tuple[int, ...], **kw: Any) -> int:  # kernel 3, stride 2, padding 1
    return _numel(shape[:2]) * _numel([(s - 1) // 2 + 1 for s in shape[2:]])


INTERPOLATE: dict[str, Sizes] = {
    "linear": {"quick": {"shape": (4, 16, 2048)}, "full": {"shape": (16, 256, 8192)}},
    "bilinear": {"quick": {"shape": (2, 8, 32, 32)}, "full": {"shape": (16, 64, 128, 128)}},
    "bicubic": {"quick": {"shape": (2, 8, 32, 32)}, "full": {"shape": (16, 64, 128, 128)}},
    "trilinear": {"quick": {"shape": (1, 4, 8, 16, 16)}, "full": {"shape": (2, 32, 32, 64, 64)}},
}
ADAPTIVE2D: Sizes = {
    "quick": {"shape": (4, 16, 32, 32), "output_size": (24, 24)},
    "full": {"shape": (32, 256, 56, 56), "output_size": (42, 42)},
}
ADAPTIVE3D: Sizes = {
    "quick": {"shape": (1, 8, 16, 16, 16), "output_size": (12, 12, 12)},
    "full": {"shape": (8, 64, 32, 64, 64), "output_size": (24, 48, 48)},
}
POOL3D: Sizes = {"quick": {"shape": (1, 8, 16, 32, 32)}, "full": {"shape": (4, 64, 32, 112, 112)}}
FRACTIONAL2D: Sizes = {"quick": {"shape": (4, 16, 64, 64)}, "full": {"shape": (32, 64, 224, 224)}}
FRACTIONAL3D: Sizes = {
    "quick": {"shape": (1, 4, 16, 32, 32)},
    "full": {"shape": (4, 32, 32, 112, 112)},
}
# Padding: 1-D reflection reaches an element from 3 places only when pad > length / 2.
PAD: dict[int, Sizes] = {
    1: {
        "quick": {"shape": (16, 64, 256), "pad": 160},
        "full": {"shape": (64, 256, 1024), "pad": 640},
    },
    2: {
        "quick": {"shape": (4, 16, 64, 64), "pad": 3},
        "full": {"shape": (16, 64, 224, 224), "pad": 3},
    },
    3: {
        "quick": {"shape": (1, 8, 16, 32, 32), "pad": 2},
        "full": {"shape": (4, 32, 32, 64, 64), "pad": 3},
    },
}
GRID_SAMPLE: Sizes = {
    "quick": {"shape": (2, 8, 32, 32), "grid": (64, 64)},
    "full": {"shape": (16, 64, 128, 128), "grid": (256, 256)},
}
MAX_UNPOOL: dict[int, Sizes] = {
    1: {"quick": {"shape": (8, 32, 2048)}, "full": {"shape": (32, 256, 8192)}},
    2: {"quick": {"shape": (4, 16, 32, 32)}, "full": {"shape": (32, 128, 112, 112)}},
    3: {"quick": {"shape": (1, 8, 8, 16, 16)}, "full": {"shape": (4, 64, 16, 56, 56)}},
}


def _grid_sample_bytes(shape: tuple[int, ...], grid: tuple[int, int]) -> float:
    # forward: read x and the grid, write y; backward: read dy, x and the grid, write dx and
    # dgrid. x: 3 times, the grid (2 floats per output pixel): 3 times, y and dy: once each.
    return (
        3 * _numel(shape) + 3 * 2 * shape[0] * _numel(grid) + 2 * _numel(shape[:2]) * _numel(grid)
    ) * F4


def _grid_sample(ctx: detbench.Context, shape: tuple[int, ...], grid: tuple[int, int]) -> Step:
    x = torch.randn(*shape, device=ctx.device, requires_grad=True)
    g = (torch.rand(shape[0], *grid, 2, device=ctx.device) * 2 - 1).requires_grad_()
    grad_out = torch.randn(*shape[:2], *grid, device=ctx.device)
    return lambda: _grad(F.grid_sample(x, g, align_corners=False), [x, g], grad_out)


def _max_unpool(register: Register, doc: Doc, dims: int, sizes: Sizes) -> None:
    unpool: Callable[..., torch.Tensor] = (F.max_unpool1d, F.max_unpool2d, F.max_unpool3d)[dims - 1]

    @register(
        f"max_unpool{dims}d",
        f"torch.nn.functional.max_unpool{dims}d (kernel 2, random indices within each plane)",
        doc((f"torch.nn.MaxUnpool{dims}d",)),
        sizes,
        lambda shape: _numel(shape),
        # read values (4) and indices (8), write an output 2^dims times larger.
        lambda shape: _numel(shape) * (F4 + I8 + F4 * 2**dims),
    )
    def build(ctx: detbench.Context, shape: tuple[int, ...]) -> Step:
        # Each value goes to a random place in its output plane: duplicates with different
        # values, so the result depends on which write lands last.
        values = torch.randn(*shape, device=ctx.device)
        plane = _numel(shape[2:]) * 2**dims
        indices = torch.randint(0, plane, shape, device=ctx.device)
        return lambda: [unpool(values, indices, 2)]


def define(register: Register, doc: Doc) -> None:
    """Register the spatial workloads with ``ops.py``'s ``register`` and ``doc``."""
    for mode, sizes in INTERPOLATE.items():
        _spatial(
            register,
            f"interpolate_{mode}_backward",
            f"torch.nn.functional.interpolate (mode={mode!r}, scale_factor=2), backward",
            doc(("torch.nn.functional.interpolate", f"``{mode}``")),
            sizes,
            lambda x, m=mode: F.interpolate(x, scale_factor=2, mode=m, align_corners=False),
            _scaled,
        )
    for name, module, sizes, fn in (
        ("adaptive_avg_pool2d", "AdaptiveAvgPool2d", ADAPTIVE2D, F.adaptive_avg_pool2d),
        ("adaptive_avg_pool3d", "AdaptiveAvgPool3d", ADAPTIVE3D, F.adaptive_avg_pool3d),
        ("adaptive_max_pool2d", "AdaptiveMaxPool2d", ADAPTIVE2D, F.adaptive_max_pool2d),
    ):
        _spatial(
            register,
            f"{name}_backward",
            f"torch.nn.functional.{name} (overlapping windows), backward",
            doc((f"torch.nn.{module}",)),
            sizes,
            fn,
            _resized,
        )
    for name, module, pool in (
        ("max_pool3d", "MaxPool3d", lambda x: F.max_pool3d(x, 3, 2, 1)),
        ("avg_pool3d", "AvgPool3d", lambda x: F.avg_pool3d(x, 3, 2, 1)),
    ):
        _spatial(
            register,
            f"{name}_backward",
            f"torch.nn.functional.{name} (kernel 3, stride 2, padding 1), backward",
            doc((f"torch.nn.{module}",)),
            POOL3D,
            pool,
            _pooled,
        )
    _spatial(
        register,
        "fractional_max_pool2d_backward",
        "torch.nn.functional.fractional_max_pool2d (kernel 3, output_ratio 0.5), backward",
        doc(("torch.nn.FractionalMaxPool2d",)),
        FRACTIONAL2D,
        lambda x: F.fractional_max_pool2d(x, 3, output_ratio=(0.5, 0.5)),
        lambda shape: _numel(shape) // 4,
    )
    _spatial(
        register,
        "fractional_max_pool3d_backward",
        "torch.nn.functional.fractional_max_pool3d (kernel 3, output_ratio 0.5), backward",
        doc(("torch.nn.FractionalMaxPool3d",)),
        FRACTIONAL3D,
        lambda x: F.fractional_max_pool3d(x, 3, output_ratio=(0.5, 0.5, 0.5)),
        lambda shape: _numel(shape) // 8,
    )
    for dims, sizes in PAD.items():
        for kind, pad_mode in (("Reflection", "reflect"), ("Replication", "replicate")):
            _spatial(
                register,
                f"{kind.lower()}_pad{dims}d_backward",
                f"torch.nn.{kind}Pad{dims}d, backward",
                doc((f"torch.nn.{kind}Pad{dims}d",)),
                sizes,
                lambda x, pad, m=pad_mode, d=dims: F.pad(x, (pad,) * (2 * d), mode=m),
                _padded,
            )
    register(
        "grid_sample_backward",
        "torch.nn.functional.grid_sample (bilinear), backward",
        doc(("torch.nn.functional.grid_sample",)),
        GRID_SAMPLE,
        lambda shape, grid: shape[0] * _numel(grid),
        _grid_sample_bytes,
    )(_grid_sample)
    for dims, sizes in MAX_UNPOOL.items():
        _max_unpool(register, doc, dims, sizes)
