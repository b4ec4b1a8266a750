"""The ops catalog: what the installed torch documents about ``use_deterministic_algorithms``.

Its docstring has two bullet lists, the ops that "will act deterministically" with ``mode=True``
and those that "will throw a RuntimeError"; both change between releases, so they are parsed from
the installed torch, never copied here. An entry keeps the op as written (``torch.nn.Conv1d``) and
the rest of its text as its condition; it may span several lines, with a sub-list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

Kind = Literal["deterministic", "raises"]

# The sentence that opens each list, whitespace-insensitive (the docstring wraps lines).
_HEADINGS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    ("deterministic", re.compile(r"will\s+act\s+deterministically\s+when")),
    ("raises", re.compile(r"will\s+throw\s+an?\s+\S*RuntimeError\S*\s+when")),
)
_BULLET = re.compile(r"^(\s*)[*+-]\s+(.*)$")
# ":class:`torch.nn.Conv1d` rest", ":func:`~torch.x` rest", "``torch.x`` rest" or "torch.x rest".
_OP = re.compile(
    r"^(?::\w+:`~?(?P<role>[^`]+)`|``(?P<lit>[^`]+)``|(?P<bare>[\w.]+))\s*(?P<rest>.*)$"
)


@dataclass(frozen=True)
class CatalogEntry:
    """One bullet of the docstring: ``op`` as written, the rest as ``condition``, its list."""

    op: str
    condition: str
    kind: Kind
    raw: str = field(default="", compare=False)  # the whole entry, markup kept, one line

    @property
    def devices(self) -> frozenset[str]:
        """The device types the condition names ("cpu", "cuda"); empty when it names none."""
        return frozenset(d for d in ("cpu", "cuda") if re.search(rf"\b{d}\b", self.condition, re.I))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse(doc: str) -> list[CatalogEntry]:
    """Every entry of both lists in ``doc``, in the order written."""
    lines = doc.expandtabs().splitlines()
    entries: list[CatalogEntry] = []
    kind: Kind | None = None
    paragraph: list[str] = []  # the prose lines since the last blank line
    bullet_indent = -1  # the column of the current list's top-level bullets; -1 outside a list
    current: list[str] | None = None  # the lines of the entry being read

    def flush() -> None:
        nonlocal current
        if current is not None and kind is not None:
            text = " ".join(" ".join(current).split())
            m = _OP.match(text)
            if m:
                op = m.group("role") or m.group("lit") or m.group("bare")
                entries.append(CatalogEntry(op, m.group("rest"), kind, text))
        current = None

    for line in lines:
        if not line.strip():
            paragraph = []
            continue
        bullet = _BULLET.match(line)
        if bullet_indent >= 0:
            if bullet and _indent(line) == bullet_indent:
                flush()
                current = [bullet.group(2)]
                continue
            if _indent(line) > bullet_indent and current is not None:
                current.append(line.strip())  # a continuation line or a sub-list item
                continue
            flush()  # prose at the list's own indentation or less ends the list
            bullet_indent, kind = -1, None
        if bullet and kind is not None:
            bullet_indent = _indent(line)
            current = [bullet.group(2)]
            continue
        paragraph.append(line.strip())
        joined = " ".join(paragraph)  # a list's heading is a paragraph ending in a colon
        kind = next((k for k, h in _HEADINGS if h.search(joined) and joined.endswith(":")), None)
    flush()
    return entries


@cache
def documented_ops() -> tuple[CatalogEntry, ...]:
    """The entries of the installed torch's ``use_deterministic_algorithms`` docstring."""
    import torch

    return tuple(parse(torch.use_deterministic_algorithms.__doc__ or ""))


def find_all(op: str, *contains: str, kind: Kind | None = None) -> list[CatalogEntry]:
    """The documented entries for ``op`` whose condition contains all of ``contains``."""
    return [
        e
        for e in documented_ops()
        if e.op == op and all(c in e.condition for c in contains) and kind in (None, e.kind)
    ]


#: ATen names whose catalog entry goes by another name.
_ALIASES = {"index": "getitem", "gridsampler2d": "gridsample", "gridsampler3d": "gridsample"}
_SUFFIXES = ("backward", "withindices", "impl", "forward", "out")


def _norm(name: str) -> str:
    name = name.rsplit(".", 1)[-1].lower()
    name = "".join(c for c in name if c.isalnum())
    # No suffix ends another, so stripping whichever matches until none does is unambiguous.
    while s := next((s for s in _SUFFIXES if name.endswith(s) and len(name) > len(s)), ""):
        name = name[: -len(s)]
    return _ALIASES.get(name, name)


def documenting(names: list[str], device: str, phase: str) -> CatalogEntry | None:
    """The entry that documents one of ``names`` (ATen ops, autograd nodes, module classes) as
    nondeterministic on ``device`` in ``phase``, or None. Names are compared without case,
    underscores, overload and suffixes (``aten._adaptive_avg_pool2d_backward`` is
    ``AdaptiveAvgPool2d``)."""
    hits = documenting_all(names, device, phase)
    return hits[0] if hits else None


def documenting_all(names: list[str], device: str, phase: str) -> list[CatalogEntry]:
    """Every entry ``documenting`` chooses from, an entry naming ``device`` first."""
    wanted = {_norm(n) for n in names if n}
    hits = []
    for e in documented_ops():
        op = _norm(e.op)
        if op not in wanted and not (op.startswith("conv") and "convolution" in wanted):
            continue
        if e.devices and device not in e.devices:
            continue
        if "differentiate" in e.condition and phase != "backward":
            continue
        hits.append(e)
    hits.sort(key=lambda e: device not in e.devices)  # an entry naming the device first
    return hits
