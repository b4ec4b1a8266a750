"""One comparable thing a run left (``Item``), as ``worker.outputs`` and ``worker.formats`` make
them: a name that matches it across runs, and the sha256 of its canonical content."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Item:
    """One comparable thing a run left: ``name`` matches it across runs, ``digest`` decides.

    ``where`` says where it is: ``{"stream", "line_no", "text", "masked", "step"}`` (and
    ``"epoch"`` where the line names one) for a printed line, ``"file"`` instead of ``"stream"``
    for a line of a text file, and ``"label"`` beside them for a result the line labels;
    ``{"file", "tensor", "dtype", "shape"}`` for a tensor; ``{"file", "key"}`` for another leaf
    or a field of a JSON or CSV file; ``{"file", "tag", "step"}`` for a logged scalar;
    ``{"file", "bytes"}`` for a whole file; ``{"name", "index", "step", "dtype", "shape"}`` for a
    fingerprint. ``shown`` is a short rendering for reports. ``kind`` sets its tier
    (``worker.evidence``).
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
