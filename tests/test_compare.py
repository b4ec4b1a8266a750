"""`detbench compare`: two result sets with known timings, verdicts and environments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from detbench.analysis import quality
from detbench.report.compare import compare, to_markdown, to_text

from .conftest import detbench_cli
from .synthetic import env, gpu, record, write_run


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = [], []
    for r in range(3):
        # w/default: B exactly twice as fast.
        a.append(record("w", "default", r, "x", [0.010] * 5))
        b.append(record("w", "default", r, "x", [0.005] * 5))
        # w/det-algos: the same speed; reproducible in A, not in B.
        a.append(record("w", "det-algos", r, "y", [0.020] * 5))
        b.append(record("w", "det-algos", r, f"y{r}", [0.020] * 5))
        # only in one run each.
        a.append(record("gone", "default", r, "g", [0.001] * 5))
        b.append(record("new", "default", r, "n", [0.001] * 5))
    return (
        write_run(tmp_path / "a", a, env(gpu="GPU model A", torch="2.10.0")),
        write_run(tmp_path / "b", b, env(gpu="GPU model B", torch="2.11.0")),
    )


def test_compare_exact(runs: tuple[Path, Path]) -> None:
    c = compare(*runs)
    rows = {(r["workload"], r["mode"]): r for r in c.table.to_dict("records")}
    assert set(rows) == {("w", "default"), ("w", "det-algos")}
    d = rows[("w", "default")]
    # Constant samples: every bootstrap resample gives the same ratio.
    assert (d["change"], d["ci_low"], d["ci_high"], d["significant"]) == (2.0, 2.0, 2.0, True)
    assert not d["verdict_changed"]
    det = rows[("w", "det-algos")]
    assert (det["change"], det["significant"]) == (1.0, False)
    assert (det["verdict_a"], det["verdict_b"], det["verdict_changed"]) == (
        "reproducible",
        "nondeterministic",
        True,
    )
    # Each run's cost against its own default: 0.5 in A, 0.25 in B.
    assert (det["rel_default_a"], det["rel_default_b"]) == (0.5, 0.25)
    assert c.only_a == ["s/gone/default"] and c.only_b == ["s/new/default"]
    assert c.warnings == [
        "the runs differ in GPU: GPU model A (A) vs GPU model B (B)",
        "the runs differ in torch: 2.10.0 (A) vs 2.11.0 (B)",
    ]


def test_compare_text_and_markdown(runs: tuple[Path, Path]) -> None:
    c = compare(*runs)
    text = to_text(c)
    assert "WARNING: the runs differ in GPU: GPU model A (A) vs GPU model B (B)" in text
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("s/w") and " default " in line)
    assert row.split() == [
        "s/w", "default", "1000", "2000", "2.000", "[2.000,", "2.000]", "yes", "1.00", "1.00",
        "reproducible",
    ]  # fmt: skip
    assert (
        "2 (workload, mode) pairs in both runs: 1 significantly faster in B, 0 significantly "
        "slower, 1 without a significant change; 1 changed verdict."
    ) in lines
    assert "verdict changed: s/w under det-algos: reproducible (A) -> nondeterministic (B)" in lines
    md = to_markdown(c)
    assert "| s/w | det-algos | 500 | 500 | 1.000 | \\[1.000, 1.000\\] | no | 0.50 | 0.25 |" in md
    assert "CHANGED: reproducible -&gt; nondeterministic" in md
    assert "- **the runs differ in torch: 2.10.0 (A) vs 2.11.0 (B)**" in md


def test_same_environment_no_warning(tmp_path: Path) -> None:
    recs = [record("w", "default", r, "x", [0.01] * 3) for r in range(2)]
    a = write_run(tmp_path / "a", recs, env())
    b = write_run(tmp_path / "b", recs, env())
    assert compare(a, b).warnings == []


def test_different_parameters_are_not_compared(tmp_path: Path) -> None:
    # Each run's records name its size profile, as a worker writes them.
    quick = [record("w", "default", r, "x", [0.01], profile="quick") for r in range(2)]
    a = write_run(tmp_path / "a", quick, env(profile="quick"))
    recs_b = [record("w", "default", r, "x", [0.01]) for r in range(2)]
    for rec in recs_b:
        rec["params"] = {"n": 2}
    b = write_run(tmp_path / "b", recs_b, env(profile="full"))
    c = compare(a, b)
    row = c.table.iloc[0]
    assert not row["comparable"] and row["change"] is None
    assert any("different size profiles: quick (A) vs full (B)" in w for w in c.warnings)
    assert (
        "1 workload is not the same in A and B and is not compared on throughput: s/w (workload "
        "parameters: n 1 (A) vs 2 (B); size profile quick (A) vs full (B))"
    ) in c.warnings


@pytest.mark.slow  # compare of two whole runs through the CLI: 11 s here
def test_cli_compare_writes_markdown_and_never_overwrites(runs: tuple[Path, Path],
                                                          tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "cmp.md"
    proc = detbench_cli("compare", str(runs[0]), str(runs[1]), "--markdown", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: the runs differ in GPU" in proc.stdout
    assert out.read_text().startswith("# detbench comparison")
    out.write_text("mine")
    proc = detbench_cli("compare", str(runs[0]), str(runs[1]), "--markdown", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"detbench: error: {out} exists: give a new file for --markdown (nothing was overwritten)"
    ]
    assert out.read_text() == "mine"


def test_cli_compare_missing_directory(runs: tuple[Path, Path], tmp_path: Path) -> None:
    proc = detbench_cli("compare", str(runs[0]), str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"detbench: error: no such results directory: {tmp_path / 'nope'}"


def gpu_env(sm_count: int, uuid: str, max_clock: float, power_limit: float,
            reasons: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """A run on 'GPU model A' with a recorded SM count, UUID and GPU state."""
    state = {
        "source": "nvml", "reason": None,
        "before": [gpu(uuid=uuid, max_sm_clock=max_clock, power_limit=power_limit)],
        "after": [gpu(uuid=uuid, max_sm_clock=max_clock, power_limit=power_limit,
                      reasons=reasons)],
    }  # fmt: skip
    return env(worker={"sm_count": sm_count, "gpu_uuid": uuid}, gpu_state=state)


def test_different_gpus_of_one_model(tmp_path: Path) -> None:
    """Same model, driver and torch, but another card: fewer SMs (a cut-down part), a lower
    clock ceiling and power limit. Each is a warning; the model is not."""
    recs = [record("w", "default", r, "x", [0.01] * 3) for r in range(2)]
    a = write_run(tmp_path / "a", recs, gpu_env(132, "GPU-aaaa", 1980, 700.0))
    b = write_run(tmp_path / "b", recs, gpu_env(114, "GPU-bbbb", 1755, 350.0))
    assert compare(a, b).warnings == [
        "the runs differ in SM count (cuBLAS promises the same bits only on the same count): "
        "132 (A) vs 114 (B)",
        "the runs differ in maximum SM clock: 1980 MHz (A) vs 1755 MHz (B)",
        "the runs differ in power limit: 700.0 W (A) vs 350.0 W (B)",
        "the runs are on two different GPUs of the same model: GPU-aaaa (A) vs GPU-bbbb (B)",
    ]


def test_same_gpu_and_an_old_run_without_gpu_facts(tmp_path: Path) -> None:
    """A fact recorded in one run only (an older run) is unknown, not a difference."""
    recs = [record("w", "default", r, "x", [0.01] * 3) for r in range(2)]
    a = write_run(tmp_path / "a", recs, gpu_env(132, "GPU-aaaa", 1980, 700.0))
    b = write_run(tmp_path / "b", recs, gpu_env(132, "GPU-aaaa", 1980, 700.0))
    old = write_run(tmp_path / "old", recs, env())
    assert compare(a, b).warnings == []
    assert compare(a, old).warnings == []


def test_a_run_whose_gpu_throttled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare passes each run's GPU state to ``detbench.store.gpustate.throttled`` (a stand-in here
    that says which run's state it saw; the module's own rules are tested with it)."""

    def throttled(state: dict[str, Any], uuid: str | None = None) -> list[str]:
        reasons = state["after"][0]["throttle_reasons"]
        return [f"{uuid} ended with {', '.join(reasons)}"] if reasons else []

    monkeypatch.setattr(quality, "throttled", throttled)
    recs = [record("w", "default", r, "x", [0.01] * 3) for r in range(2)]
    a = write_run(tmp_path / "a", recs, gpu_env(132, "GPU-aaaa", 1980, 700.0))
    b = write_run(tmp_path / "b", recs,
                  gpu_env(132, "GPU-aaaa", 1980, 700.0, reasons=("hw_slowdown",)))  # fmt: skip
    assert compare(a, b).warnings == ["in run B, GPU-aaaa ended with hw_slowdown"]
