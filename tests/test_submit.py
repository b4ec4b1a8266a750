"""`detbench submit`: a run's shards as jobs through submitit, gathered and merged. For real:
submitit's local executor always (where submitit is installed), and a single-node Slurm from
Debian's packages where this host allows one (root, the packages: tests/slurm_cluster.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from detbench.store.results import load_results

from .conftest import detbench_cli
from .slurm_cluster import PARTITION, single_node_slurm, why_not
from .test_merge import SELECTION, identity

pytestmark = pytest.mark.skipif(importlib.util.find_spec("submitit") is None,
                                reason="needs submitit (pip install submitit)")  # fmt: skip


#: The selection of test_merge's runs, with the merged run's report.
SUBMITTED = [a for a in SELECTION if a != "--no-report"]


def _check_merged(out: Path, jobs: list[str]) -> None:
    """One merged run of the two shards, its records and env.json naming the jobs."""
    df = load_results(out)
    assert len(df) == 16 and set(df["shard"]) == {"1/2", "2/2"}
    assert set(df["job"]) == set(jobs)
    doc = json.loads((out / "env.json").read_text())
    assert [j["state"] for j in doc["jobs"]] == ["COMPLETED", "COMPLETED"]
    assert [j["job_ids"] for j in doc["jobs"]] == [[j] for j in jobs]
    assert [s["job"] for s in doc["shards"]] == jobs
    assert (out / "report.html").is_file()


def _job_ids(stderr: str) -> list[str]:
    m = re.search(r"shard 1/2 = (\S+), shard 2/2 = (\S+)", stderr)
    assert m, stderr
    return [m.group(1), m.group(2)]


@pytest.mark.slow  # two shards run through submitit: test-slow (CI runs it)
def test_submit_local_writes_one_merged_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli("submit", "--executor", "local", "--shards", "2",
                        *SUBMITTED, "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _job_ids(proc.stderr)
    assert f"merged the shards of one run: 16 records in {out}" in proc.stdout
    _check_merged(out, jobs)


def test_submit_refusals(tmp_path: Path) -> None:
    proc = detbench_cli("submit", "--executor", "local", *SELECTION, "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("detbench: error: give --shards N (N >= 2) to split the run, "
                                   "or --partition P1,P2 for one run per GPU type")  # fmt: skip
    proc = detbench_cli("submit", "--executor", "local", "--shards", "2", "--shard", "1/2",
                        *SELECTION, "--out", str(tmp_path / "x"))  # fmt: skip
    assert proc.returncode == 2
    assert "give no --shard with it" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_submit_slurm_single_node(tmp_path: Path) -> None:
    """A single-node Slurm (started here, stopped after): the sharded run goes through sbatch as
    a job array, is merged, and holds the records of the unsharded run, with the same bits."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    whole = tmp_path / "whole"
    proc = detbench_cli("run", *SELECTION, "--out", str(whole))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "run"
    with single_node_slurm(tmp_path / "slurm") as slurm_env:
        proc = detbench_cli("submit", "--executor", "slurm", "--shards", "2", "--partition",
                            PARTITION, "--time", "20", *SUBMITTED, "--out", str(out),
                            env=slurm_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _job_ids(proc.stderr)
    assert all(re.fullmatch(r"\d+_[01]", j) for j in jobs), jobs  # one array, two tasks
    _check_merged(out, jobs)
    assert identity(out) == identity(whole)
    key = ["workload", "mode", "replicate"]
    merged, ref = load_results(out).sort_values(key), load_results(whole).sort_values(key)
    assert merged["fingerprint"].tolist() == ref["fingerprint"].tolist()
