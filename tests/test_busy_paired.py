"""A paired run timed beside busy processes says so at the top of its report (issue 39, as runs
did before the paired design of issue 34). A real run of the paired design on the CPU with three
processes spinning beside it on this 2-core host: its paired timings do not record the host's
load (the paired workers of 2026-11 do not measure it), so its report and console say that the
load is not known instead of nothing; its lines given the load a real ``Probe`` read beside the
same spinning processes (``host_load``, the field the paired workers are to write) make the
report say the host was busy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import detbench
from detbench.analysis import busy
from detbench.report.write import write_report
from detbench.store.paired import PAIRED_FILE, load_paired
from detbench.worker.hostload import Probe

from .conftest import detbench_cli

#: A whole run under load (about a minute here), alone on the machine: make test-slow and CI.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

RUN = [
    "run",
    *("--suite", "ops", "--only", "ops/cumsum", "--mode", "default", "--mode", "det-algos"),
    *("--replicates", "2", "--device", "cpu"),
]
SPIN = "while True: pass"


def _answer(md: str) -> list[str]:
    lines = md.splitlines()
    start = lines.index("## The answer")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("#"))
    return [x for x in lines[start:end] if x.strip()]


@pytest.fixture(scope="module")
def busy_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, str, dict[str, Any]]]:
    """RUN with three spinning processes beside it, and the ``host_load`` a ``Probe`` read over
    one second beside the same processes, for a runner (an idle process) that they are not the
    children of: (the run, its console, that load). The spinners are ended by their ids."""
    out = tmp_path_factory.mktemp("busy") / "run"
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(3)]
    runner = None
    try:
        proc = detbench_cli(*RUN, "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        probe = Probe("cpu", run_pid=runner.pid)
        probe.start()
        time.sleep(1.0)
        load = probe.stop()
    finally:
        for p in [*spinners, *([runner] if runner else [])]:
            p.kill()
            p.wait()
    yield out, proc.stdout, load


def test_a_paired_run_beside_busy_processes_does_not_read_as_quiet(
    busy_run: tuple[Path, str, dict[str, Any]],
) -> None:
    """Its paired lines carry the host's load as each worker read it over its rounds (issue 39):
    the spinning processes are foreign, so the top of the report says the host was busy."""
    out, printed, _ = busy_run
    assert "busy" in printed, printed  # the console says so too
    lines = load_paired(out)
    ok = lines[lines["status"] == "ok"]
    assert len(ok) and ok["host_load"].notna().all()
    assert max(x["other_cpu_foreign"] for x in ok["host_load"]) >= busy.OTHER_CPU
    first = _answer((out / "report.md").read_text())
    assert "Conditions: the host was busy while it timed" in first[1], first[1]


def test_paired_lines_with_the_hosts_load_make_its_report_say_busy(
    busy_run: tuple[Path, str, dict[str, Any]], tmp_path: Path
) -> None:
    """The same run, each ok line given the load read beside the spinning processes: the top
    of its report says the host was busy, and so does the first warning."""
    out, _, load = busy_run
    assert load["other_cpu_foreign"] >= busy.OTHER_CPU, load  # three spinners on two cores
    run = tmp_path / "run"
    shutil.copytree(out, run)
    path = run / PAIRED_FILE
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        if line["status"] == "ok":
            line[busy.PAIRED_FIELD] = load
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ok = sum(x["status"] == "ok" for x in lines)
    h = busy.host_load(detbench.load_results(run), lines)
    assert h is not None and (h.timed, h.paired, h.busy, h.unrecorded) == (ok, ok, ok, 0)
    md = write_report(run)[0].read_text()
    first = _answer(md)
    assert "Conditions: the host was busy while it timed" in first[1]
    assert first[2].startswith(f"**The host was busy while this run timed: all {ok} timings ran")
    warned = md.split("## Warnings")[1].splitlines()
    assert next(x for x in warned if x.startswith("- ")).startswith("- The host was busy")


def test_the_groups_own_workers_do_not_make_a_paired_timing_busy(
    busy_run: tuple[Path, str, dict[str, Any]],
) -> None:
    """The same real reading, as if the spinning processes had been the other workers of the
    paired group (the run's own, busy by design while this one waits its turn): not busy."""
    _, _, load = busy_run
    own = {**load, "other_cpu_own": load["other_cpu"], "other_cpu_foreign": 0.0, "steal": 0.0}
    h = busy.host_load(detbench.load_results(busy_run[0]), [{"status": "ok", "host_load": own}])
    assert h is not None and (h.paired, h.busy) == (1, 0) and not h.is_busy
