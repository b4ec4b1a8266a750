"""One comparable thing a run left (``Item``), as ``worker.outputs`` and ``worker.formats`` make
them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Item:
    """One comparable thing a run left: ``name`` matches it across runs, ``digest`` decides.

    ``where``: ``{"stream" or "file", "line_no", "text", "masked", "step", ["epoch"]}`` for a
    line (and ``"label"`` for a result it labels); ``{"file", "tensor", "dtype", "shape"}``;
    ``{"file", "key"}`` for another leaf or field; ``{"file", "tag", "step"}``; ``{"file",
    "bytes"}`` for a whole file; ``{"name", "index", "step", "dtype", "shape"}`` for a
    fingerprint. ``kind`` sets its tier (``worker.evidence``).
    """

    kind: str  # "line", "result", "fingerprint", "tensor", "scalar", "value" or "file"
    name: str
    digest: str
    where: dict[str, Any]
    shown: str | None = None


def sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
    return h.hexdigest()


def shown(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
