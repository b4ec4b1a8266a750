"""The batch-invariance verdict: does the same request give the same bits in a different batch?

A workload that declares ``batch_sizes`` is built at each size, freshly seeded, runs one step, and
row 0 of every batch-first output (the same request at every size) is compared bitwise with the
smallest size's. Kernels choose their reduction order and split by the shape they see, so a row
can change with its batch in a process that is reproducible run to run. ``invariant`` is over
every batch-first output (logits that move while the completion does not is worth knowing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from detbench.worker.fingerprint import step_outputs

#: Builds the workload at a batch size and returns its step, wrapped as the mode runs it.
Build = Callable[[int], Callable[[], Sequence[Any]]]


class InvarianceError(Exception):
    """A workload whose outputs do not let row 0 be compared across its batch sizes."""


def row0(outputs: Sequence[Any], batch: int) -> list[torch.Tensor]:
    """Row 0 of every output tensor whose first dimension is ``batch``, on the host."""
    return [
        t[0].detach().to("cpu", copy=True)
        for t in outputs
        if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == batch
    ]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equal to the same NaN, -0.0 not equal to 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(
        a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)
    )


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if not (a.is_floating_point() or a.is_complex()) or a.numel() == 0:
        return 0.0 if torch.equal(a, b) else float("inf")
    d = (a.to(torch.float64) - b.to(torch.float64)).abs()
    d = torch.nan_to_num(d, nan=float("inf"))  # a NaN in one of them: as far apart as it gets
    return float(d.max())


@dataclass(frozen=True)
class Verdict:
    """Row 0 across the batch sizes: invariant, the first size to differ, the worst difference."""

    batch_sizes: tuple[int, ...]
    invariant: bool
    first_variant_size: int | None
    max_abs_diff: float
    #: Per size, whether its row 0 has the smallest size's bits.
    same: dict[int, bool]
    #: How many different row-0 results of the first batch-first output the sizes gave (a
    #: decoder's distinct completions); can be 1 while a later output, such as the logits, differs.
    distinct: int = 1

    def to_record(self) -> dict[str, Any]:
        return {
            "batch_invariant": self.invariant,
            "batch_first_variant_size": self.first_variant_size,
            "batch_max_abs_diff": self.max_abs_diff,
            "batch_same_as_smallest": {str(b): s for b, s in self.same.items()},
            "batch_distinct_results": self.distinct,
        }


def compare(rows: dict[int, list[torch.Tensor]]) -> Verdict:
    """The verdict from each size's row-0 tensors (sizes ascending; the first is the reference)."""
    sizes = tuple(sorted(rows))
    ref = rows[sizes[0]]
    if not ref:
        raise InvarianceError(
            f"no output has the batch as its first dimension at batch size {sizes[0]}: nothing "
            "to compare (return the per-request tensors, batch first)"
        )
    same: dict[int, bool] = {sizes[0]: True}
    worst = 0.0
    for b in sizes[1:]:
        got = rows[b]
        if len(got) != len(ref):
            raise InvarianceError(
                f"batch size {b} gives {len(got)} batch-first outputs, batch size {sizes[0]} "
                f"gives {len(ref)}: the outputs must be the same at every size"
            )
        same[b] = all(same_bits(x, y) for x, y in zip(ref, got, strict=True))
        if not same[b]:
            worst = max(worst, *(max_abs_diff(x, y) for x, y in zip(ref, got, strict=True)))
    first = next((b for b in sizes if not same[b]), None)
    distinct = len({_bits(rows[b][0]) for b in sizes})
    return Verdict(sizes, first is None, first, worst, same, distinct)


def _bits(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().view(-1).view(torch.uint8).numpy()) + str(t.dtype).encode()


def check(build: Build, sizes: Sequence[int], reseed: Callable[[], None]) -> Verdict:
    """Build at every size (after ``reseed``), run one step, keep row 0, and compare."""
    rows: dict[int, list[torch.Tensor]] = {}
    for b in sorted(sizes):
        reseed()
        step = build(b)
        rows[b] = row0(step_outputs(step()), b)
        del step
    return compare(rows)
