"""A partial run says only true things (issue 34, items 3 and 4): its time against the plan's
estimate of the same records, summed over every call; one replicate only is no verdict, never
"no mode made any workload reproducible"; a run stopped after its verdict phase has every
verdict and says its costs were not measured, one stopped later says which it has.

The arithmetic is checked exactly; no test here asserts how long anything took.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import detbench
from detbench.analysis.matrix import verdicts
from detbench.analysis.recommend import recommendations
from detbench.analysis.runstate import run_state
from detbench.analysis.suite_answer import answers
from detbench.report.answer import irreproducible, open_lines
from detbench.report.write import load_run
from detbench.run.calls import calls_of, made_seconds
from detbench.run.estimate import estimate
from detbench.run.schedule import make_plan
from detbench.store.paired import PairedWriter
from detbench.store.paired import line as paired_line
from detbench.store.results import load_results

from .synthetic import env, record, write_run

DEFAULT, DET = detbench.get_mode("default"), detbench.get_mode("det-algos")


# --- "It took X against Y planned": the same records, every call ---------------------------------


def _state(calls: list[dict[str, Any]] | None, tmp: Path, **extra: Any) -> str:
    """The timing sentence of a small run whose env.json has ``calls`` (None: an older
    detbench's, without them) and the ``extra`` top-level keys."""
    recs = [record("w", m, r, "x", [0.01] * 3) for r in range(2) for m in ("default", "det-algos")]
    doc = {k: v for k, v in env().items() if k != "run_stats"}
    doc.update(extra)
    if calls is not None:
        doc["run_calls"] = calls
    write_run(tmp, recs, doc)
    return run_state(load_results(tmp), doc).timing()


def _call(wall: float, records: int, planned: float | None) -> dict[str, Any]:
    return {"started_utc": "t", "wall": wall, "records": records, "planned": planned}


def test_the_time_sums_every_call_against_the_estimate_of_the_records_they_made(
    tmp_path: Path,
) -> None:
    """The published H100 run's shape: a first call stopped, a resume stopped. Its report once
    compared the last call's 3:47 with the 12:20 the resume planned for 834 records (-69%)."""
    calls = [_call(300.0, 156, 120.0), _call(227.0, 99, 110.0)]
    text = _state(calls, tmp_path, resumed_utc=["2026-11-23T00:05:00Z"])
    assert (
        text
        == "It took 8:47 in 2 calls against 3:50 planned for the 255 records they made (+129%)."
    )


def test_an_older_env_json_keeps_its_one_run_stats(tmp_path: Path) -> None:
    whole = _state(None, tmp_path / "a", run_stats={"wall": 90.0, "planned": 60.0, "records": 4})
    assert whole == "It took 1:30 against 1:00 planned (+50%)."
    resumed = _state(
        None,
        tmp_path / "b",
        run_stats={"wall": 227.0, "planned": 740.0, "records": 99},
        resumed_utc=["2026-11-23T00:05:00Z"],
    )
    assert resumed == (
        "Its last call took 3:47 for 99 records; the time of the call before it was not recorded."
    )


def test_a_killed_call_is_named_not_counted(tmp_path: Path) -> None:
    text = _state([_call(60.0, 3, 30.0)], tmp_path, resumed_utc=["2026-11-23T00:05:00Z"])
    assert text == (
        "Its 1 recorded call took 1:00 against 0:30 planned for the 3 records it made (+100%). "
        "1 call killed before its end left no time and is not counted."
    )


def test_the_estimate_of_the_records_made_is_the_estimates_own_figures() -> None:
    plan = make_plan(["u/a", "u/b"], [DEFAULT, DET], 2, seed=0)
    est = estimate(plan, "cpu", "quick", 0.1, 2.0, True)
    every = {(s.replicate, s.mode.name, k) for s in plan.slots for k in s.keys}
    assert made_seconds(est, plan, every) == pytest.approx(est.seconds)
    first = plan.slots[0]
    one = {(first.replicate, first.mode.name, first.keys[0])}
    extra, records = est.slot_seconds[(first.replicate, first.mode.name)]
    assert made_seconds(est, plan, one) == pytest.approx(extra + records[first.keys[0]])
    assert made_seconds(est.seconds, plan, one) is None  # a bare total says nothing of a part
    assert made_seconds(est.seconds, plan, every) == est.seconds


def test_calls_of_reads_an_old_single_run_stats_as_its_last_call() -> None:
    old = {"started_utc": "a", "resumed_utc": ["b"], "run_stats": {"wall": 5.0, "planned": 9.0}}
    assert [c["wall"] for c in calls_of(old)] == [None, 5.0]
    assert calls_of(old)[-1]["planned"] is None  # 9.0 priced the whole resumed plan


# --- one replicate only, and a run stopped between its phases ------------------------------------


@pytest.fixture(scope="module")
def first_replicate_only(
    resumable_serial_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The session's real CPU run of tests/workloads/resumable.py (three workloads, 2 modes x 2
    replicates: ``conftest.RESUMABLE_RUN``) as it stands when stopped after its first replicate:
    its first 6 records (replicates are the plan's outer loop, so they are the first
    replicate's, and the stopped run holds exactly them), and an env.json that says it was
    interrupted. A copy: the session's run is only read."""
    out = tmp_path_factory.mktemp("first-replicate") / "run"
    shutil.copytree(resumable_serial_run, out)
    lines = (out / "results.jsonl").read_text().splitlines()[:6]
    assert {json.loads(x)["replicate"] for x in lines} == {0}
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    doc = json.loads((out / "env.json").read_text())
    doc["interrupted_utc"] = doc.pop("finished_utc")
    (out / "env.json").write_text(json.dumps(doc))
    return out


def test_one_replicate_only_is_no_verdict(first_replicate_only: Path) -> None:
    df = load_results(first_replicate_only)
    v = verdicts(df)
    assert set(v["verdict"]) <= {"single", "unsupported"}
    (a,) = answers(df, v=v)
    assert a.mode is None
    assert a.text == (
        "no verdict yet: every workload has one replicate only (a run-to-run verdict needs two)"
    )
    assert irreproducible(df, v, {}) == []
    (line,) = open_lines(v)
    assert line.startswith("No run-to-run verdict yet for resumable/")
    rec = recommendations(df)
    assert rec.loc[rec["workload"] == "*", "reason"].iloc[0].startswith("no verdict yet")
    state = run_state(df, load_run(first_replicate_only, df).env)
    assert state.completeness().startswith("Partial run: 6 of 12 planned records (50%)")


def _paired_run(tmp: Path, timed: list[tuple[str, int]]) -> str:
    """Two workloads x 2 modes x 2 replicates whose records defer their timing to the paired
    phase, and paired.jsonl lines for the (workload, replicate) groups in ``timed``."""
    recs = [
        record(w, m, r, "x", [], timing_design="paired")
        for r in range(2)
        for m in ("default", "det-algos")
        for w in ("a", "b")
    ]
    doc = env()
    doc["options"].update(
        workloads=["s/a", "s/b"], modes=["default", "det-algos"], replicates=2, seed=0
    )
    write_run(tmp, recs, doc)
    with PairedWriter(tmp) as writer:
        for w, r in timed:
            writer.append_all(
                [
                    paired_line(
                        suite="s",
                        workload=w,
                        mode=mode,
                        replicate=r,
                        copy=copy,
                        samples=[0.01] * 6,
                        rounds=list(range(6)),
                        positions=[i % 3 for i in range(6)],
                        block_start=[1.0e9 + i for i in range(6)],
                        workers=3,
                        number_per_block=1,
                        timing=None,
                    )
                    for mode, copy in (("default", 0), ("det-algos", 0), ("default", 1))
                ]
            )
    run = load_run(tmp)  # the records and env.json as the console reads them
    return run_state(run.df, run.env).line()


def test_a_run_stopped_after_its_verdicts_has_them_all_and_no_cost(tmp_path: Path) -> None:
    line = _paired_run(tmp_path, [])
    assert line.startswith("Partial run: all 8 planned records, not all their costs.")
    assert (
        "Every verdict is here, but no cost was measured: the run stopped after its verdict "
        "phase, before its paired timing." in line
    )


def test_a_run_stopped_in_its_paired_phase_says_which_costs_it_has(tmp_path: Path) -> None:
    line = _paired_run(tmp_path, [("a", 0), ("b", 0), ("a", 1)])
    assert (
        "Every verdict is here; costs measured so far: 3 of 4 (workload, replicate) groups "
        "(all 2 workloads of replicate 1, 1 of 2 workloads of replicate 2)." in line
    )
    assert _paired_run(tmp_path / "all", [("a", 0), ("b", 0), ("a", 1), ("b", 1)]).startswith(
        "Complete: all 8 planned records."
    )
