"""A user's own workload is measured by a probe worker, so that the dry run, the plan line and the
progress line give one estimate and the run lands near it (issue 29, item 5). A decoder LM of
tens of milliseconds a step was once planned at 18 s by the plan line, 74 s by the dry run, and
took 124 s."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from detbench.core.modes import get_mode
from detbench.run import estimate as E
from detbench.run import figures as C
from detbench.run import slot_seconds as P
from detbench.run.schedule import Plan, Slot, make_plan

ROOT = Path(__file__).resolve().parent.parent
LM = ROOT / "tests" / "workloads" / "user_lm.py"


def test_a_probed_workload_is_charged_its_measured_record() -> None:
    """Its record's phases as the probe measured them, less the FLOP count after the first
    replicate (a run counts FLOPs once)."""
    plan = make_plan(["u/lm"], [get_mode("default"), get_mode("det-algos")], 3, seed=0)
    probed = {"u/lm": P.Probed(seconds=3.0, count=0.5)}
    est = E.estimate(plan, "cpu", "quick", 0.1, 2.0, True, probed=probed)
    assert est.probed_records == est.figure_records == 6
    assert est.record_seconds == pytest.approx(2 * 3.0 + 4 * 2.5)
    # The slots' own figures (the paired phase's weights) add up to the estimate.
    assert sum(x + sum(r.values()) for x, r in est.slot_seconds.values()) == pytest.approx(
        est.seconds
    )


def test_the_model_prices_what_no_probe_measured() -> None:
    keys = ("u/lm",)
    plan = Plan((Slot(0, 0, get_mode("default"), keys),), (("default",),), 0)
    est = E.estimate(plan, "cpu", "quick", 0.1, 2.0, True)
    per = P.per_record_seconds("cpu", "quick", 0.1)
    assert per == pytest.approx(
        C.RECORD_OVERHEAD_SECONDS[("cpu", "quick")] + P.timing_seconds("cpu", 0.1)
    )
    # A verdict record: the model's record less its timing pass, a third of it at least.
    verdict = max(per / 3, per - P.timing_seconds("cpu", 0.1))
    assert est.probed_records == 0 and est.record_seconds == pytest.approx(verdict)


def _detbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "detbench", *args], capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600, check=False,
    )  # fmt: skip


def _seconds(clock: str) -> int:
    m, s = clock.split(":")
    return int(m) * 60 + int(s)


@pytest.mark.slow
@pytest.mark.serial  # three timings compared: alone, after the parallel slow tests
def test_dry_run_plan_line_progress_and_real_time_agree(tmp_path: Path) -> None:
    """A user's LM of a few to tens of ms a step, 2 modes x 3 replicates on the CPU: the dry run,
    the plan line and the progress line's first figure agree (one estimate), and its timings
    shared nothing with its own workers (check (i)). How close the estimate lands to the real
    time is a timing, printed here and not asserted (speed targets are figures, not timed unit
    tests that fail on a busy or idle host): in CI on 2026-11-26 the real time was 24 s against
    22 s planned beside another worker's tests (+9%), and 11 s against 16 s alone (-31%, over
    issue 29's 25%: the probe overestimates a small run on an idle host; open)."""
    out = tmp_path / "run"
    args = ["run", "--workload", str(LM), "--mode", "default", "--mode", "det-algos",
            "--replicates", "3", "--device", "cpu", "--out", str(out), "--no-report"]  # fmt: skip
    dry = _detbench(*args, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["probed_records"] == 6 and plan["probe"]["failed"] == {}
    # The probe worker's time is the run's too: a real run probes as the dry run did (issue 35).
    assert plan["probe_seconds"] == plan["probe"]["seconds"] > 0
    assert plan["estimated_seconds"] > plan["probe_seconds"] + plan["record_seconds"]
    real = _detbench(*args)
    assert real.returncode == 0, real.stderr
    planned = _seconds(re.search(r"; estimated (\d+:\d\d)", real.stderr).group(1))  # type: ignore[union-attr]
    first = re.search(r"elapsed (\d+:\d\d) left ~(\d+:\d\d)", real.stderr)
    assert first is not None
    assert abs(_seconds(first.group(1)) + _seconds(first.group(2)) - planned) <= 2
    took = re.search(r"\((\d+) s against (\d+) s planned", real.stdout)
    assert took is not None
    wall, planned_exact = int(took.group(1)), int(took.group(2))
    assert abs(planned_exact - planned) <= 1
    assert "the probe worker " in real.stdout  # in the call's wall, as in its plan
    probe = json.loads((out / "env.json").read_text())["run_stats"]["probe"]
    assert 0 < probe < wall
    print(
        f"dry run {plan['estimated_seconds']} s, plan line {planned} s, real {wall} s "
        f"({100 * (wall / planned - 1):+.0f}% against the plan)"
    )
    assert abs(plan["estimated_seconds"] / planned - 1) <= 0.25
    check = subprocess.run([sys.executable, str(ROOT / "tools" / "timing_check.py"), str(out)],
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert "PASS (i)" in check.stdout, check.stdout
