"""A paired group that does not fit the device's memory (issue 39): a workload that keeps 3 GiB
resident, in all 10 modes, so the 11 copies of a group (every mode and the A/A copy) need about
33 GiB. On a host with less than that available, the group is timed in subgroups that fit, each
holding the baseline's copy: the run completes with a cost for every mode and no worker is
killed for memory. Real memory on the CPU: the workload writes every page of its tensor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detbench.worker.memory import _available_bytes
from tests.conftest import WORKLOADS, detbench_cli

#: A whole run of 22 workers, each building 3 GiB (2-5 minutes on the 2-core VM), alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

GIB = 1 << 30


def test_a_group_too_big_for_memory_is_timed_in_subgroups_that_fit(tmp_path: Path) -> None:
    available = _available_bytes()
    if available >= 36 * GIB:
        pytest.skip(f"{available / GIB:.0f} GiB available: eleven 3 GiB copies would fit here")
    if available < 8 * GIB:
        pytest.skip(f"{available / GIB:.1f} GiB available: not even two copies and headroom")
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--device", "cpu", "--workload", str(WORKLOADS / "big_resident.py"),
        "--replicates", "2", "--rounds", "6", "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    lines = [json.loads(x) for x in (out / "paired.jsonl").read_text().splitlines()]
    assert len(recs) == 10 * 2 and all(r["status"] == "ok" for r in recs), [
        (r["mode"], r["status"], r["message"]) for r in recs if r["status"] != "ok"
    ]
    # Every mode and the A/A copy timed in both replicates: none killed, none left out.
    assert len(lines) == 11 * 2
    assert all(x["status"] == "ok" for x in lines), [
        (x["mode"], x["status"], x["message"]) for x in lines if x["status"] != "ok"
    ]
    for replicate in (0, 1):
        group = [x for x in lines if x["replicate"] == replicate]
        subgroups = {x["subgroup"] for x in group}
        # Eleven copies of 3 GiB did not fit: more than one subgroup, none of all eleven.
        assert len(subgroups) > 1 and all(x["workers"] < 11 for x in group)
        base = next(x for x in group if x["mode"] == "default" and x["copy"] == 0)
        for x in group:
            if x is base:
                continue
            # Each mode was timed beside the baseline's copy: its rounds are among the
            # baseline's, which took part in every subgroup.
            assert set(x["rounds"]) <= set(base["rounds"])
        assert set(base["rounds"]) == set().union(*(set(x["rounds"]) for x in group))
        assert all(x["footprint_bytes"] >= 2.9 * GIB for x in group)
    env = json.loads((out / "env.json").read_text())
    assert env["run_stats"]["paired"]["subgroups"] >= 4
