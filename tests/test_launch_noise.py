"""tools/launch_noise.py: the launch-noise experiment (issue 49, item 1) runs on the CPU with real
paired workers and prints a row with finite spreads for every configuration."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "launch_noise.py"
WORKLOAD = "batchnorm/batchnorm1d_train_simclr_head"
#: The configurations of a group of 2 workers at threads 1 and 75 ms blocks (the tool's
#: ``configs``), as the table names them.
CONFIGS = {
    "base": "-",
    "1 of 2 timed": "(a)",
    "1 alive": "(a)",
    "threads 1": "(b)",
    "pinned": "(c)",
    "blocks 75 ms": "(d)",
    "no untimed step": "(e)",
    "pinned, threads 1": "(b)+(c)",
    "base, again": "-",
}


def test_every_configuration_has_finite_spreads(tmp_path: Path) -> None:
    out = tmp_path / "noise.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tiny = ["--workload", WORKLOAD, "--workers", "2", "--rounds", "3", "--deadline", "600"]
    files = ["--json", str(out), "--out", str(tmp_path / "w")]
    got = subprocess.run(
        [sys.executable, str(TOOL), "--device", "cpu", *tiny, *files],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    text = got.stdout
    assert "device cpu" in text and "torch " in text and " cores" in text
    assert "wall time" in text
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert {r["configuration"]: r["factor"] for r in rows} == CONFIGS
    assert len(rows) == len(CONFIGS)
    for r in rows:
        # Every configuration ran its 3 rounds (no cap stops one before 3: MIN_BLOCKS).
        assert r["workload"] == WORKLOAD and not r["note"], r
        assert r["blocks"] == 3 and r["steps_per_block"] >= 1
        assert r["processes"] == (1 if r["factor"] == "(a)" else 2), r
        for key in ("cv_median", "cv_largest", "max_over_median", "min_over_median"):
            assert r[key] is not None and math.isfinite(r[key]) and r[key] >= 0, (key, r)
        assert r["min_over_median"] <= 1.0 <= r["max_over_median"]
        for key in ("foreign_cpu", "steal"):
            assert r[key] is None or 0 <= r[key] <= 1, (key, r)
        if r["processes"] > 1:
            assert r["aa_log_ratio_sd"] is not None and math.isfinite(r["aa_log_ratio_sd"])
        # The printed table has the same row.
        assert f"| {WORKLOAD.split('/')[1]} | {r['factor']} | {r['configuration']} |" in text
    facts = data["facts"]
    assert facts["cores"] >= 1 and facts["torch"] and facts["wall_seconds"] > 0
