"""Two op streams of the same workload compared op by op, on their bits only: each op's name and the
digests of its inputs and outputs. Where an op was called from (file, line, module, ...) may differ
between processes while the bits agree (torch-geometric writes each layer's code to a temporary file
whose name differs in each process), so it is never compared.

A **culprit** is an op whose inputs were bitwise equal in both runs and whose outputs were not;
ops after it only carry the difference. Each is listed once per line, whatever its steps, and
looked up in :mod:`detbench.core.catalog`. Streams that call other ops (control flow on values)
are compared up to where they part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from detbench.core import catalog
from detbench.locate.record import code_line


@dataclass
class Culprit:
    op: str
    file: str
    line: int
    module: str | None
    phase: str
    max_abs_diff: float | None = None
    module_type: str | None = None
    function: str = ""
    code: str = ""
    node: str | None = None  # the autograd node, for a backward op
    forward_op: str | None = None  # the forward op that made that node
    steps: list[int] = field(default_factory=list)
    op_index: int = 0  # its first place in the stream
    differing_elements: int | None = None
    elements: int | None = None
    diff_is_lower_bound: bool = False
    diff_note: str | None = None
    reads_uninitialized_from: str | None = None
    documented: bool = False
    documented_as: str | None = None
    documented_kind: str | None = None  # "deterministic" (made so) or "raises"
    fixed_by_deterministic_mode: bool | None = None
    deterministic_mode_note: str | None = None

    @property
    def where(self) -> tuple[str, str, int, str, str | None]:
        return (self.op, self.file, self.line, self.phase, self.module)

    @property
    def place(self) -> tuple[str, str, int, str, str, str | None]:
        """``where`` as another process names it: the line's code in place of the file's name."""
        return (self.op, self.function, self.line, self.code, self.phase, self.module)


@dataclass
class StreamComparison:
    culprits: list[int]
    first_difference: int | None
    parted_at: int | None
    carried: int


def _inputs_equal(x: dict[str, Any], y: dict[str, Any]) -> bool:
    a, b = x.get("in", []), y.get("in", [])
    if len(a) != len(b):
        return False
    uninit = set(x.get("reads_uninitialized", {})) | set(y.get("reads_uninitialized", {}))
    return all(p == q or str(j) in uninit for j, (p, q) in enumerate(zip(a, b, strict=True)))


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> StreamComparison:
    """Culprits (op indices) of two streams of the same workload. The first difference is the
    first op whose outputs or inputs differ (a tensor changed where the recorder cannot see)."""
    culprits: list[int] = []
    first = parted = None
    carried = 0
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x["op"] != y["op"]:
            parted = i
            break
        if x.get("view") or x.get("uninitialized"):
            continue
        same_inputs = _inputs_equal(x, y)
        if first is None and not (same_inputs and x.get("out") == y.get("out")):
            first = i
        if x.get("out") == y.get("out"):
            continue
        if same_inputs:
            culprits.append(i)
        else:
            carried += 1
    if parted is None and len(a) != len(b):
        parted = min(len(a), len(b))
    return StreamComparison(culprits, first, parted, carried)


def same_bits(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Whether two op streams hold the same bits (the same ops, with equal digests)."""
    cmp = compare(a, b)
    return cmp.first_difference is None and cmp.parted_at is None


def _earliest(a: int | None, b: int | None) -> int | None:
    return min((x for x in (a, b) if x is not None), default=None)


def culprits_of(
    streams: list[dict[str, Any]], device: str
) -> tuple[list[Culprit], StreamComparison]:
    """The culprits over every pair (first process, another), one per place in the code."""
    first = streams[0]["ops"]
    merged: dict[int, None] = {}
    total = StreamComparison([], None, None, 0)
    for other in streams[1:]:
        cmp = compare(first, other["ops"])
        merged.update(dict.fromkeys(cmp.culprits))
        total.first_difference = _earliest(total.first_difference, cmp.first_difference)
        total.parted_at = _earliest(total.parted_at, cmp.parted_at)
        total.carried = max(total.carried, cmp.carried)
    total.culprits = sorted(merged)
    out: dict[tuple[Any, ...], Culprit] = {}
    for i in total.culprits:
        op = first[i]
        origin = first[op["origin"]] if op.get("origin") is not None else None
        c = Culprit(
            op=op["op"],
            file=op["file"],
            line=int(op["line"]),
            module=op["module"],
            phase=op["phase"],
            module_type=op.get("module_type"),
            function=op.get("func", ""),
            code=code_line(op["file"], int(op["line"])),
            node=op.get("node"),
            forward_op=origin["op"] if origin and op.get("by_engine") else None,
            op_index=i,
        )
        uninit = op.get("reads_uninitialized")
        if uninit:
            src = first[int(next(iter(uninit.values())))]
            c.reads_uninitialized_from = f"{src['op']} at {src['file']}:{src['line']}"
        key = c.where
        if key in out:
            if op["step"] not in out[key].steps:
                out[key].steps.append(op["step"])
            continue
        c.steps = [op["step"]]
        # An op the autograd engine ran for a forward op is known by that op and its node too.
        names = [c.op, c.module_type or ""]
        if op.get("by_engine"):
            names += [c.forward_op or "", c.node or ""]
        entry = catalog.documenting(names, device, c.phase)
        if entry is not None:
            c.documented, c.documented_as = True, f"{entry.op} {entry.condition}".strip()
            c.documented_kind = entry.kind
        out[key] = c
    return list(out.values()), total
