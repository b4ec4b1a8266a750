"""Files that loggers write, read by field: TensorBoard event files, JSON and CSV logs.

Compared as lines or bytes, each of these differs between any two runs (an event's wall time,
``train_runtime`` beside the losses, a ``time`` column). Read by field, a result is compared
bitwise and a clock is set aside by name (``printed.timing_kind``): TensorBoard's values per
(tag, step), its text summaries masked as printed lines; a JSON leaf by key path, a number under
a result key (``evidence.is_result_key``) a ``result``, any other a masked ``value``; a CSV cell
by row and column, as a JSON key. A reader returns None where the file does not parse as its
name says: it is then read as text.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from detbench.worker.evidence import is_result_key
from detbench.worker.items import Item, sha, shown
from detbench.worker.printed import Asides, mask_line, timing_kind

if TYPE_CHECKING:
    from pathlib import Path

#: TensorBoard's event files, by name.
TFEVENTS = re.compile(r"^events\.out\.tfevents\.")


def is_tfevents(path: Path) -> bool:
    return bool(TFEVENTS.match(path.name))


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _field(
    name: str, rel: str, key: str, value: Any, asides: Asides, at: dict[str, Any]
) -> Item | None:
    """A JSON leaf or CSV cell under ``key``: a result, a value, or None for a clock reading."""
    kind = timing_kind(key)
    if kind is not None:
        asides.add(name, kind, at.get("line_no", 1))
        return None
    where = {"file": rel, "key": key, **at}
    if (_number(value) or _numeric_text(value)) and is_result_key(key):
        text = repr(value) if _number(value) else str(value).strip()
        return Item("result", f"{name}:{key}", sha(text), {**where, "label": key}, text)
    text, kinds = mask_line(value if isinstance(value, str) else json.dumps(value))
    for k in dict.fromkeys(kinds):
        asides.add(name, k, at.get("line_no", 1), kinds.count(k))
    return Item(
        "value", f"{name}:{key}", sha(type(value).__name__, ":", text), where, shown(text, 80)
    )


def _numeric_text(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        float(v)
    except ValueError:
        return False
    return True


def _walk(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{prefix}[{i}]")
    else:
        yield prefix or "(root)", obj


def json_items(text: str, name: str, rel: str, asides: Asides, lines: bool) -> list[Item] | None:
    """A JSON (``lines``: JSON-lines) file's leaves as items, or None where it does not parse."""
    docs: list[tuple[int, Any]] = []
    try:
        if lines:
            docs = [(n, json.loads(t)) for n, t in enumerate(text.splitlines(), 1) if t.strip()]
        else:
            docs = [(1, json.loads(text))]
    except ValueError:
        return None
    items: list[Item] = []
    for line_no, doc in docs:
        for key, value in _walk(doc):
            full = f"{line_no}:{key}" if lines else key
            item = _field(name, rel, full, value, asides, {"line_no": line_no})
            if item is not None:
                items.append(item)
    return items


def csv_items(text: str, name: str, rel: str, asides: Asides) -> list[Item] | None:
    """A CSV log's cells by row and column, or None where the first row is not a header."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or any(_numeric_text(c) for c in rows[0]) or not any(c.strip() for c in rows[0]):
        return None
    header = rows[0]
    items: list[Item] = []
    for r, row in enumerate(rows[1:], 2):
        for col, cell in zip(header, row, strict=False):
            if cell == "":  # a column this row does not log (Lightning's CSVLogger leaves gaps)
                continue
            item = _field(name, rel, f"{r}:{col}", cell, asides, {"line_no": r})
            if item is not None:
                items.append(item)
    return items


def tfevents_items(path: Path, name: str, rel: str, asides: Asides) -> list[Item]:
    """A TensorBoard event file's logged values by tag and step."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    except ImportError as e:
        raise ValueError(
            "tensorboard is not installed here, which reads its event files "
            "(pip install tensorboard)"
        ) from e
    items: list[Item] = []
    walls = 0
    for event in EventFileLoader(str(path)).Load():
        walls += 1
        which = event.WhichOneof("what")
        if which != "summary":
            if which in ("graph_def", "meta_graph_def", "tagged_run_metadata"):
                blob = getattr(event, which)
                data = blob.SerializeToString() if hasattr(blob, "SerializeToString") else blob
                at = {"file": rel, "tag": which, "step": event.step}
                items.append(Item("value", f"{name}:{which}@{event.step}", sha(data), at, which))
            continue
        for value in event.summary.value:
            item = _summary_item(value, event.step, name, rel, asides)
            if item is not None:
                items.append(item)
    if walls:
        asides.add(name, "wall", 1, walls)
    return items


def _summary_item(value: Any, step: int, name: str, rel: str, asides: Asides) -> Item | None:
    tag = value.tag
    at = {"file": rel, "tag": tag, "step": step}
    key = f"{name}:{tag}@{step}"
    plugin = value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""
    if plugin == "text":
        strings = [s.decode(errors="replace") for s in value.tensor.string_val]
        text, kinds = mask_line(" | ".join(strings))
        for k in dict.fromkeys(kinds):
            asides.add(name, k, 1, kinds.count(k))
        return Item("value", key, sha(text), at, shown(text, 80))
    kind = timing_kind(tag)
    if kind is not None:
        asides.add(name, kind, 1)
        return None
    which = value.WhichOneof("value")
    if which == "simple_value":
        x = value.simple_value  # a float32 on the wire: its repr as a double is exact
        return Item("scalar", key, sha(f"f32:{x!r}"), at, f"{x!r}")
    if which is None:  # a summary with metadata alone (hparams' session records)
        return None
    data = getattr(value, which).SerializeToString(deterministic=True)
    return Item("scalar", key, sha(which, ":", data), at, f"{which}, sha256 {sha(data)[:12]}")
