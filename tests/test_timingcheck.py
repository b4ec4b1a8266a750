"""The checks (i)-(iii) of a run's paired timings, on the published paired run of the H200
(``tools/timing_check.py``); a run of the earlier design, which has no paired timing, is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from detbench.analysis.timingcheck import (
    blocks,
    check_timing,
    drift,
    first_of_each_worker,
    overlaps,
)
from detbench.store.paired import iter_paired

ROOT = Path(__file__).resolve().parent.parent
FUSED = ROOT / "results" / "20261128-011342-cuda-full-h200-partial"
EARLIER = ROOT / "results" / "20261126-060355-cuda-full-h100-partial"


def _tool(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "timing_check.py"), str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_paired_run_is_checked_on_its_paired_lines_and_an_overlap_fails_it() -> None:
    """The H200's run of the fused design keeps its timings in paired.jsonl: check (i) reads its
    4,125 blocks (none began inside another worker's), and fails once one worker's block is
    moved into the middle of another's; with no timing at all, (i) fails rather than pass on
    0 of 0."""
    lines = list(iter_paired(FUSED))
    turns, drifted, samples = check_timing(lines)
    assert turns.passed and "0 of 4125 blocks of 495 paired lines" in turns.text
    assert "8 of 22 workers' first records did (median 0.51%" in drifted.text
    assert len(first_of_each_worker(lines)) == 22
    assert all(drift(r) is not None for r in first_of_each_worker(lines))
    assert "20 of 149 did (13%)" in samples.text
    a, b = [x for x in lines if x["status"] == "ok" and x.get("samples")][:2]
    (start, end), *_ = blocks(a)
    moved = dict(b, block_start=[(start + end) / 2, *b["block_start"][1:]])
    assert overlaps([a, moved])[0] == 1 and overlaps([a, b])[0] == 0
    assert not check_timing([])[0].passed
    out = _tool(FUSED)
    assert out.returncode == 1
    assert "their costs timed in 495 paired lines" in out.stdout.splitlines()[0]
    checks = [line.split()[:2] for line in out.stdout.splitlines()[1:]]
    assert checks == [["PASS", "(i)"], ["FAIL", "(ii)"], ["FAIL", "(iii)"]]


def test_the_tool_refuses_a_run_of_the_earlier_design_and_a_directory_without_records(
    tmp_path: Path,
) -> None:
    for directory in (EARLIER, tmp_path):
        out = _tool(directory)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stdout == ""
    assert "timed each in its own worker" in _tool(EARLIER).stderr
