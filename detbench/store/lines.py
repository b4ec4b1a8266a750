"""What every JSON-lines file of a run shares: deterministic JSON, the one-write append that
leaves a whole line or none, and the error a reader raises. ``results.jsonl`` (``results``) and
``paired.jsonl`` (``paired``) both write and read through these, so there is one atomic append."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from detbench.core.errors import DetbenchError


class ResultsError(DetbenchError):
    """A results directory or file that cannot be read (one clear line for the user)."""


def dumps(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no NaN/Infinity (not valid JSON)."""
    return json.dumps(obj, sort_keys=True, allow_nan=False, separators=(",", ":"))


def open_append(path: Path) -> int:
    """``path`` opened for ``O_APPEND`` (created where missing): each write lands at the end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def append_lines(fd: int, path: Path, objs: Sequence[Any]) -> None:
    """``objs``, a JSON line each, in a single ``os.write``: a process killed at any moment
    leaves all of them or none (a paired group's lines go together), never half a line."""
    line = "".join(dumps(obj) + "\n" for obj in objs).encode()
    written = os.write(fd, line)
    if written != len(line):  # only on a full disk; never leave half a line unflagged
        raise OSError(f"short write to {path}: {written} of {len(line)} bytes")


def read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of ``path``; a truncated or malformed line
    is damage (the one-write append never leaves one): a ``ResultsError`` naming it."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if not line.endswith("\n"):
                raise ResultsError(f"{path}:{lineno}: truncated record (no end of line)")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ResultsError(f"{path}:{lineno}: malformed record: {exc.msg}") from None
            if not isinstance(obj, dict):
                raise ResultsError(f"{path}:{lineno}: a record must be a JSON object")
            yield lineno, obj
