"""The one record (``detbench.store.schema``, ``detbench.store.record``): its constructors, the
check on every write and load, the migration of older versions, and every published run."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import detbench
from detbench.core.modes import get_mode
from detbench.report.write import REPORT_HTML, REPORT_MD, write_report
from detbench.store import record
from detbench.store.results import ResultsError, ResultWriter, iter_records
from detbench.store.schema import (
    ALWAYS,
    SCHEMA_4_FIELDS,
    SCHEMA_VERSION,
    RecordError,
    problem,
)

from .synthetic import env, fast_and_same, write_run

RESULTS = Path(__file__).resolve().parent.parent / "results"
PUBLISHED = sorted(p.parent for p in RESULTS.glob("*/results.jsonl"))


def test_the_constructors_make_valid_records_of_every_field() -> None:
    mode = get_mode("det-algos[warn_only=on]")
    made = record.measured(
        suite="s",
        workload="w",
        params={"n": 1},
        mode=mode,
        settings={"warn_only": True},
        replicate=2,
        seed=0,
        device="cpu",
        profile="quick",
        num_threads=4,
        batch_size=None,
        fingerprint_method="device",
    )
    assert set(ALWAYS) <= set(made) and problem(made) is None
    assert (made["status"], made["base_mode"], made["warn_only"]) == ("ok", "det-algos", True)
    assert made["deterministic_algorithms"] and made["schema_version"] == SCHEMA_VERSION

    known: dict[str, Any] = {
        "replicate": 1,
        "device": "cpu",
        "device_name": "cpu:0",
        "utc": "2026-11-26T00:00Z",
    }
    lost = record.lost("s/w", mode, "crashed", "worker killed by SIGSEGV", -11, **known)
    assert set(ALWAYS) <= set(lost) and problem(lost) is None
    assert (lost["suite"], lost["workload"], lost["exit_code"]) == ("s", "w", -11)
    # The mode's own setting is known; the others the worker never read back.
    assert (lost["warn_only"], lost["fill_uninitialized_memory"]) == (True, None)
    with pytest.raises(TypeError, match="seconds_per_step"):
        record.lost("s/w", mode, "crashed", "gone", None, replicate=0, seconds_per_step=1.0)

    assert record.merged(made, shard="1/2")["shard"] == "1/2"
    assert record.merged(made, machine="h100")["machine"] == "h100"
    with pytest.raises(TypeError):
        record.merged(made)
    with pytest.raises(RecordError, match="field seconds_per_step = 'fast': not a number"):
        record.merged({**made, "seconds_per_step": "fast"}, shard="1/2")


def test_a_writer_keeps_a_bad_record_aside_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = fast_and_same(0)[0]
    with ResultWriter(tmp_path) as w:
        assert w.append(good)
        assert not w.append({**good, "status": "fine"})
        assert not w.append({k: v for k, v in good.items() if k != "node"})
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 1
    aside = [json.loads(x) for x in (tmp_path / "set_aside.jsonl").read_text().splitlines()]
    assert [a["problem"] for a in aside] == [
        "field status = 'fine': not one of ok, unsupported, oom, error, timeout, crashed",
        "field node = missing: every version-4 record has it",
    ]
    assert aside[0]["status"] == "fine" and "node" not in aside[1]  # kept as they were written
    said = [r.getMessage() for r in caplog.records]
    assert any("s/fast [default] is not valid (field status = 'fine'" in m for m in said)


def test_a_bad_record_is_named_set_aside_and_counted_by_the_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = write_run(tmp_path / "run", [r for i in range(3) for r in fast_and_same(i)], env())
    path = run / "results.jsonl"
    lines = path.read_text().splitlines()
    bad = [json.loads(lines[i]) for i in (1, 4, 6)]
    bad[0]["seconds_per_step"] = "fast"
    del bad[1]["status"]
    bad[2]["status"] = "exploded"
    for i, rec in zip((1, 4, 6), bad, strict=True):
        lines[i] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")

    with caplog.at_level(logging.WARNING, logger="detbench.store"):
        df = detbench.load_results(run)
    assert len(df) == len(lines) - 3
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"detbench: {path}:2: record of s/fast [det-algos] set aside: "
        "field seconds_per_step = 'fast': not a number or null",
        f"detbench: {path}:5: record of s/fast [default] set aside: "
        "field status = missing: every version-4 record has it",
        f"detbench: {path}:7: record of s/same [default] set aside: "
        "field status = 'exploded': not one of ok, unsupported, oom, error, timeout, crashed",
    ]
    with pytest.raises(ResultsError, match=":2: record of s/fast \\[det-algos\\] set aside"):
        list(iter_records(run))  # a reader that gives no list for them refuses the file
    md = write_report(run)[0].read_text()
    assert "3 records were set aside because they are not valid" in md


def test_older_versions_migrate_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    rec = {k: v for k, v in fast_and_same(0)[0].items() if k not in SCHEMA_4_FIELDS}
    rec["schema_version"] = 3
    (tmp_path / "results.jsonl").write_text(json.dumps(rec) + "\n")
    (loaded,) = iter_records(tmp_path)
    assert loaded["schema_version"] == 3  # kept: a reader can tell
    assert {k: loaded.get(k, "absent") for k in SCHEMA_4_FIELDS} == dict.fromkeys(SCHEMA_4_FIELDS)
    (tmp_path / "results.jsonl").write_text(json.dumps({**rec, "schema_version": 9}) + "\n")
    with pytest.raises(ResultsError, match="unknown schema version 9"):
        list(iter_records(tmp_path))


def test_every_published_run_loads_whole() -> None:
    assert len(PUBLISHED) >= 17
    for run in PUBLISHED:
        lines = sum(1 for line in (run / "results.jsonl").open() if line.strip())
        aside: list[str] = []
        assert sum(1 for _ in iter_records(run, aside)) == lines and aside == [], run.name


@pytest.mark.slow
@pytest.mark.parametrize("run", PUBLISHED, ids=lambda p: p.name)
def test_every_published_report_is_written_again_byte_for_byte(run: Path, tmp_path: Path) -> None:
    """The run's records and facts, reported again: the same report.md and report.html as
    published, and the same plots as SVG. A change of the report's own words fails it for
    every run until the published reports are written again and committed (``detbench
    report`` on each, as commit f34bbc3 did); a change of the store must never fail it.

    The PNGs the page embeds are compared through their SVGs, not byte for byte: numpy's sums
    differ in their last bits with the CPU's SIMD (on an AVX-512 host, 2026-11-29, the
    trade-off PNG of 4 published runs differed in 15 pixels, their SVGs not at all; with
    ``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL"`` the page was byte for byte the same)."""
    again = tmp_path / run.name
    shutil.copytree(run, again, ignore=shutil.ignore_patterns("report.*", "plots"))
    md, page = write_report(again)
    assert md.read_bytes() == (run / REPORT_MD).read_bytes()
    assert _unpictured(page) == _unpictured(run / REPORT_HTML)
    for svg in sorted((run / "plots").glob("*.svg")):
        assert (again / "plots" / svg.name).read_bytes() == svg.read_bytes(), svg.name
    assert sorted(p.name for p in (again / "plots").glob("*")) == sorted(
        p.name for p in (run / "plots").glob("*")
    )


def _unpictured(page: Path) -> str:
    """``page`` with each embedded PNG's bytes left out (its place kept)."""
    return re.sub(
        r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,-", page.read_text()
    )
