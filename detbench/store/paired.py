"""``paired.jsonl``: the paired phase's timings, one line per (workload, mode, replicate, copy).

(The lead's minimal version: the writer and the reader; the analysis helper's version replaces
it at merge.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from detbench.store.results import dumps

PAIRED_FILE = "paired.jsonl"
PAIRED_VERSION = 1


class PairedWriter:
    """Appends lines to ``paired.jsonl``, each in one write, as ``ResultWriter`` does."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / PAIRED_FILE
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append_all(self, lines: Sequence[Mapping[str, Any]]) -> None:
        """A group's lines in one write: all of them or none."""
        data = "".join(dumps({"paired_version": PAIRED_VERSION, **x}) + "\n" for x in lines)
        raw = data.encode()
        if os.write(self._fd, raw) != len(raw):
            raise OSError(f"short write to {self.path}")

    def close(self) -> None:
        os.close(self._fd)


def iter_paired(directory: str | Path) -> Iterator[dict[str, Any]]:
    path = Path(directory) / PAIRED_FILE
    if not path.is_file():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)
