"""`detbench index`: the index of published runs, from each run's env.json and NOTE.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import detbench_cli
from .synthetic import env, record, write_run


def test_index_lists_every_run(tmp_path: Path) -> None:
    recs = [record("w", "default", r, "x", [0.01]) for r in range(2)]
    gpu = write_run(tmp_path / "20261201-gpu", recs, env(gpu="GPU model A", torch="2.11.0"))
    (gpu / "report.html").write_text("<html></html>")
    (gpu / "report.md").write_text("# r")
    (gpu / "NOTE.md").write_text("First GPU run,\nfull sizes.\n\nSecond paragraph, not shown.\n")
    cpu_env = env(gpu=None, torch="2.13.0+cpu", profile="quick")
    write_run(tmp_path / "20261122-cpu", recs + recs[:1], cpu_env)
    (tmp_path / "not-a-run").mkdir()
    proc = detbench_cli("index", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "README.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| [")]
    assert rows == [
        "| [20261122-cpu](20261122-cpu/) | **CPU only**: Test CPU | quick | 2.13.0+cpu | "
        "2026-11-23 | 3 | none yet |  |",
        "| [20261201-gpu](20261201-gpu/) | GPU model A | full | 2.11.0 | 2026-11-23 | 2 | "
        "[report.html](20261201-gpu/report.html), [report.md](20261201-gpu/report.md) | "
        "First GPU run, full sizes. |",
    ]
    assert "No GPU run has been published yet." not in lines


def test_index_of_cpu_runs_says_no_gpu(tmp_path: Path) -> None:
    write_run(tmp_path / "run", [record("w", "default", 0, "x", [0.01])], env(gpu=None))
    assert detbench_cli("index", str(tmp_path)).returncode == 0
    assert "No GPU run has been published yet." in (tmp_path / "README.md").read_text()


def test_index_of_a_missing_directory(tmp_path: Path) -> None:
    proc = detbench_cli("index", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"detbench: error: no such results directory: {tmp_path / 'nope'}"


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_index_replaces_its_own_readme_and_never_a_users(tmp_path: Path) -> None:
    write_run(tmp_path / "run", [record("w", "default", 0, "x", [0.01])], env(gpu=None))
    assert detbench_cli("index", str(tmp_path)).returncode == 0
    assert detbench_cli("index", str(tmp_path)).returncode == 0  # its own index, made again
    mine = tmp_path / "README.md"
    mine.write_text("# My results\n\nWhat these runs were for.\n")
    proc = detbench_cli("index", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"detbench: error: {mine} is not an index detbench wrote: move it, or give another DIR "
        "(nothing was changed)"
    )
    assert mine.read_text() == "# My results\n\nWhat these runs were for.\n"
