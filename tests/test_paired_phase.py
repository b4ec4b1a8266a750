"""The paired phase (issues 34 and 39): each replicate's modes timed side by side, in workers
alive together that take turns one block at a time, with an A/A copy of the baseline, each
worker making its mode's verdict of a workload before it times it; a run stopped before the end
keeps every verdict and the groups timed, and a resume times only the groups left. A real run
on the CPU of tests/workloads/resumable.py, whose steps
give the same bits in every process (so ``same_bits`` must hold)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from detbench.run.paired import round_order
from tests.conftest import WORKLOADS, detbench_cli

#: Whole runs with a paired phase (about 2 minutes on the 2-core VM): make test-slow and CI.
pytestmark = pytest.mark.slow

MODES = ("default", "det-algos")
RUN = (
    "run", "--device", "cpu", "--workload", str(WORKLOADS / "resumable.py"),
    "--mode", MODES[0], "--mode", MODES[1], "--replicates", "2", "--rounds", "6",
    "--budget", "0.02", "--no-report",
)  # fmt: skip


def paired_lines(out: Path) -> list[dict[str, Any]]:
    path = out / "paired.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def verdicts(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def paired_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("paired") / "run"
    proc = detbench_cli(*RUN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_round_order_is_a_permutation_drawn_anew_each_round() -> None:
    orders = [round_order(0, "s/w", 1, i, 5) for i in range(8)]
    assert all(sorted(o) == list(range(5)) for o in orders)
    assert len({tuple(o) for o in orders}) > 1
    assert round_order(0, "s/w", 1, 3, 5) == orders[3]  # the same run plans the same rounds
    assert (
        round_order(1, "s/w", 1, 3, 5) != orders[3] or round_order(1, "s/w", 1, 4, 5) != orders[4]
    )


def test_verdict_workers_time_nothing_the_paired_phase_times_every_mode(paired_run: Path) -> None:
    recs = verdicts(paired_run)
    assert len(recs) == 3 * 2 * 2
    ok = [r for r in recs if r["status"] == "ok"]
    assert ok and all(r["timing_design"] == "paired" and r["timing"] is None for r in ok)
    lines = paired_lines(paired_run)
    # 3 workloads x 2 replicates x (2 modes + the A/A copy of the baseline)
    assert len(lines) == 3 * 2 * 3
    assert {(x["mode"], x["copy"]) for x in lines} == {
        ("default", 0),
        ("det-algos", 0),
        ("default", 1),
    }
    by_key = {(r["workload"], r["mode"], r["replicate"]): r for r in recs}
    for x in lines:
        verdict = by_key[(x["workload"], x["mode"], x["replicate"])]
        if verdict["status"] != "ok":  # unsupported under det-algos: it sits out
            assert x["status"] == "not_timed", x
            continue
        assert x["status"] == "ok", x
        assert x["rounds"] == list(range(6)) and len(x["samples"]) == 6
        assert x["timing"]["median"] > 0 and x["timing"]["clock_mode"] == "paired"
        assert x["same_bits"] is True  # the timed process computed the verdict's first step


def test_blocks_interleave_in_time_in_an_order_shuffled_each_round(paired_run: Path) -> None:
    lines = [x for x in paired_lines(paired_run) if x["status"] == "ok"]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for x in lines:
        groups.setdefault((x["workload"], x["replicate"]), []).append(x)
    shuffled = False
    for group in groups.values():
        n = len(group)
        assert all(x["workers"] == n for x in group)
        for r in range(6):
            turns = sorted((x["positions"][r], x["block_start"][r]) for x in group)
            assert [p for p, _ in turns] == list(range(n))  # each worker once a round
            starts = [t for _, t in turns]
            assert starts == sorted(starts)  # in the round's order, one after another
            if r < 5:  # every block of a round before any block of the next
                assert max(starts) < min(x["block_start"][r + 1] for x in group)
        first = group[0]["positions"]
        shuffled |= any(p != first[0] for p in first)
    assert shuffled


def test_each_verdict_is_made_by_the_worker_that_times_it_before_its_rounds(
    paired_run: Path,
) -> None:
    """Issue 39: a (workload, mode, replicate) is built and warmed up once. The group's worker of
    each mode makes its verdict (its record's pid is the timing line's), then times the step it
    built: the verdict's record is written before that workload's first block."""
    recs = {(r["workload"], r["mode"], r["replicate"]): r for r in verdicts(paired_run)}
    timed = [x for x in paired_lines(paired_run) if x["status"] == "ok" and x["copy"] == 0]
    assert timed
    for x in timed:
        rec = recs[(x["workload"], x["mode"], x["replicate"])]
        assert rec["worker_pid"] == x["worker_pid"]
        assert datetime.fromisoformat(rec["utc"]).timestamp() <= min(x["block_start"])
    # The A/A copy makes no verdict: its process is none of the verdicts'.
    pids = {r["worker_pid"] for r in recs.values()}
    copies = [x for x in paired_lines(paired_run) if x["copy"] == 1 and x["status"] == "ok"]
    assert copies and all(x["worker_pid"] not in pids for x in copies)


def test_a_resume_times_only_the_groups_left(paired_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(paired_run, out)
    lines = (out / "paired.jsonl").read_text().splitlines(keepends=True)
    kept = lines[:-3]  # the last group (3 lines, written together) as if the run had stopped
    (out / "paired.jsonl").write_text("".join(kept))
    before = (out / "results.jsonl").read_bytes()
    proc = detbench_cli("run", "--resume", str(out), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "the costs of 1 (workload, replicate) groups to time" in proc.stderr
    assert (out / "results.jsonl").read_bytes() == before  # no verdict measured again
    after = (out / "paired.jsonl").read_text().splitlines(keepends=True)
    assert after[: len(kept)] == kept and len(after) == len(lines)
    again = [json.loads(x) for x in after[len(kept) :]]
    gone = [json.loads(x) for x in lines[-3:]]
    assert {(x["workload"], x["replicate"], x["mode"], x["copy"]) for x in again} == {
        (x["workload"], x["replicate"], x["mode"], x["copy"]) for x in gone
    }
