"""Nothing measured is lost: SIGKILL of the runner mid-run, then --resume, gives the results of an
uninterrupted run; SIGINT stops cleanly and says how to resume; resume refuses a changed
environment."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import RESUMABLE_RUN as RUN
from .conftest import ROOT, detbench_cli

TOTAL = 3 * 2 * 2  # workloads x modes x replicates
#: What must be equal between two runs of the same deterministic workloads: everything but the
#: timings and the moments things happened.
COMPARED = (
    "suite", "workload", "mode", "replicate", "status", "fingerprint", "step_fingerprints",
    "max_abs_diff", "losses", "params", "items_per_step", "flops_per_step", "seed", "device",
    "profile", "cublas_workspace_config", "benchmark", "cudnn_deterministic",
    "deterministic_algorithms", "cudnn_enabled", "schema_version",
)  # fmt: skip


def _default_sigint() -> None:
    """In the run's process: Ctrl-C as a terminal gives it, whatever this test runner ignores (a
    shell's background job ignores SIGINT, and a child inherits that, so Python would never see
    the SIGINT the test sends)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(out: Path, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "detbench", *RUN, "--out", str(out), *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def lines(out: Path) -> list[str]:
    path = out / "results.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def wait_for_records(out: Path, n: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300
    while len(lines(out)) < n:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def comparable(out: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    recs = [json.loads(line) for line in lines(out)]
    keyed = {(r["workload"], r["mode"], r["replicate"]): r for r in recs}
    assert len(keyed) == len(recs), "a record was written twice"
    return {k: {c: r.get(c) for c in COMPARED} for k, r in keyed.items()}


@pytest.fixture(scope="module")
def uninterrupted(resumable_serial_run: Path) -> Path:
    return resumable_serial_run


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_sigkill_then_resume_equals_an_uninterrupted_run(uninterrupted: Path,
                                                         tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "run"
    proc = start(out)
    wait_for_records(out, 4, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = lines(out)
    assert 4 <= len(kept) < TOTAL
    for line in kept:
        json.loads(line)  # every line whole
    env = json.loads((out / "env.json").read_text())
    assert "finished_utc" not in env

    resumed = detbench_cli("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {out}: {len(kept)} records kept, {TOTAL - len(kept)} to measure" in (
        resumed.stderr
    )
    assert lines(out)[: len(kept)] == kept  # nothing already written was touched
    assert comparable(out) == comparable(uninterrupted)
    env = json.loads((out / "env.json").read_text())
    assert env["finished_utc"] and len(env["resumed_utc"]) == 1


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_sigint_stops_cleanly_and_says_how_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = start(out)
    wait_for_records(out, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    kept = lines(out)
    assert 2 <= len(kept) < TOTAL
    assert stderr.rstrip().splitlines()[-1] == (
        f"detbench: interrupted; {len(kept)} records kept in {out}; "
        f"resume with: detbench run --resume {out}"
    )
    env = json.loads((out / "env.json").read_text())
    assert "finished_utc" not in env and env["interrupted_utc"]
    # The same command again: refused, naming --resume, nothing changed (issue 28).
    before = snapshot(out)
    again = detbench_cli(*RUN, "--out", str(out))
    assert again.returncode == 2
    assert again.stderr == (
        f"detbench: error: {out} holds an interrupted detbench run ({len(kept)} records): give a "
        f"new --out, or continue that run with: detbench run --resume {out}\n"
    )
    assert snapshot(out) == before
    # The resume is planned from the run's own records of each workload, not from a table
    # measured elsewhere (issue 35): every record left of a workload kept is priced so.
    dry = detbench_cli("run", "--resume", str(out), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    have = [json.loads(x) for x in kept]
    seen = {r["workload"] for r in have}
    done = {(r["workload"], r["mode"], r["replicate"]) for r in have}
    left = [
        (w, m, r)
        for w in ("mlp_step", "tiny_training", "put_without_accumulate")
        for m in ("default", "det-algos")
        for r in (0, 1)
        if (w, m, r) not in done
    ]
    assert plan["records"] == len(left)
    assert plan["own_records"] == sum(1 for w, _, _ in left if w in seen) > 0
    assert snapshot(out) == before
    resumed = detbench_cli("run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert len(comparable(out)) == TOTAL
    # The resumed call's console counts its own records and the file's, never one as the other;
    # env.json keeps each call's time and the estimate of the records it made (issue 34).
    new = TOTAL - len(kept)
    made = (  # and the paired groups this call timed, however many the interruption left
        rf"\n{new} new records and the costs of \d+ \(workload, replicate\) groups, {TOTAL} "
        rf"records in all in {re.escape(str(out / 'results.jsonl'))} \(this call: "
    )
    assert re.search(made, resumed.stdout), resumed.stdout
    assert f"\n{TOTAL} records in" not in resumed.stdout
    calls = json.loads((out / "env.json").read_text())["run_calls"]
    assert [c["records"] for c in calls] == [len(kept), new]
    assert all(c["wall"] > 0 and c["planned"] > 0 for c in calls)
    assert "in 2 calls against" in resumed.stdout  # the run's state sums both


def test_a_finished_run_is_refused_as_a_new_runs_folder(uninterrupted: Path) -> None:
    before = snapshot(uninterrupted)
    proc = detbench_cli(*RUN, "--out", str(uninterrupted))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"detbench: error: {uninterrupted} holds a finished detbench run ({TOTAL} records): give "
        "a new --out (nothing was changed)\n"
    )
    assert snapshot(uninterrupted) == before


def test_resume_of_a_finished_run_measures_nothing(uninterrupted: Path) -> None:
    before = (uninterrupted / "results.jsonl").read_bytes()
    proc = detbench_cli("run", "--resume", str(uninterrupted))
    assert proc.returncode == 0, proc.stderr
    assert f"nothing to resume: every record of {uninterrupted} is there" in proc.stderr
    assert (uninterrupted / "results.jsonl").read_bytes() == before


def test_resume_refuses_a_different_environment(uninterrupted: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    recs = lines(uninterrupted)[:3]
    (out / "results.jsonl").write_text("\n".join(recs) + "\n")
    env = json.loads((uninterrupted / "env.json").read_text())
    env.pop("finished_utc")
    env["host"]["torch"] = "1.0.0"
    (out / "env.json").write_text(json.dumps(env))
    before = snapshot(out)
    proc = detbench_cli("run", "--resume", str(out))
    assert proc.returncode == 2
    here = proc.stderr.split("1.0.0 (the run) vs ")[1].split(" (here)")[0]
    assert proc.stderr.strip() == (
        f"detbench: error: refusing to resume {out}: torch differs: 1.0.0 (the run) vs "
        f"{here} (here); start a new run instead"
    )
    assert snapshot(out) == before


@pytest.mark.parametrize(
    ("setup", "extra", "message"),
    [
        ("none", [], "no such results directory: {d}"),
        ("empty", [], "{d} holds no env.json: not a detbench run, nothing to resume"),
        (
            "malformed",
            [],
            "{d}/results.jsonl:2: malformed record: Expecting property name enclosed in "
            "double quotes",
        ),
        (
            "ok",
            ["--mode", "default"],
            "--resume continues a run with its own options; give no --mode with it",
        ),
        (
            "ok",
            ["--seed", "0"],
            "--resume continues a run with its own options; give no --seed with it",
        ),
    ],
)
def test_resume_bad_input(uninterrupted: Path, tmp_path: Path, setup: str, extra: list[str],
                          message: str) -> None:  # fmt: skip
    d = tmp_path / "run"
    if setup != "none":
        d.mkdir()
    if setup in ("malformed", "ok"):
        (d / "env.json").write_bytes((uninterrupted / "env.json").read_bytes())
        first = lines(uninterrupted)[0]
        (d / "results.jsonl").write_text(first + "\n" + ("{oops\n" if setup == "malformed" else ""))
    before = snapshot(d) if d.exists() else {}
    proc = detbench_cli("run", "--resume", str(d), *extra)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "detbench: error: " + message.format(d=d)
    assert (snapshot(d) if d.exists() else {}) == before
