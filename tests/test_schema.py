"""The typed record schema changes nothing on disk: a Status is written as its value."""

from __future__ import annotations

import json
from pathlib import Path

from detbench.store.results import ResultWriter, iter_records
from detbench.store.schema import STATUSES, Record, Status

from .synthetic import record


def test_a_status_is_its_value_on_disk_and_in_comparisons(tmp_path: Path) -> None:
    rec = record("w", "default", 0, None, [], status=Status.UNSUPPORTED)
    assert rec["status"] is Status.UNSUPPORTED
    with ResultWriter(tmp_path) as w:
        w.append(rec)
    line = (tmp_path / "results.jsonl").read_text()
    assert json.loads(line)["status"] == "unsupported"
    assert '"status":"unsupported"' in line
    back: Record
    (back,) = list(iter_records(tmp_path))
    assert back["status"] == Status.UNSUPPORTED and back["status"] != Status.OK
    assert STATUSES == ("ok", "unsupported", "oom", "error", "timeout", "crashed")
    assert str(Status.OK) == "ok" and f"{Status.CRASHED}" == "crashed"
