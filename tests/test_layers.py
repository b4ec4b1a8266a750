"""The house in layers: no cycle, no upward import, no global state on import, suites shipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

IMPORT_ALL = """
import importlib, pkgutil, sys
import torch
flags = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
         torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision())
import detbench
for m in pkgutil.walk_packages(detbench.__path__, "detbench."):
    if m.name.endswith("__main__"):
        continue
    importlib.import_module(m.name)
after = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
         torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision())
assert flags == after, (flags, after)
assert "matplotlib.pyplot" not in sys.modules, "a module imported pyplot"
import matplotlib
print(len(sys.modules), matplotlib.rcParams._get_backend_or_none())
"""


def test_importing_every_module_changes_no_global_state() -> None:
    """Every module imports (so none is left half-moved), torch's flags are as they were, and
    pyplot was never imported: the caller's matplotlib backend is not chosen for them."""
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "None", "matplotlib's backend was chosen on import"


def test_no_cycle_and_no_upward_import() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "import_graph.py")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.strip().endswith(", 0 problems"), proc.stdout


def test_the_import_graph_finds_a_planted_upward_import(tmp_path: Path) -> None:
    """The checker can fail: a copy of the package with core importing the report layer."""
    import shutil

    copy = tmp_path / "detbench"
    shutil.copytree(ROOT / "detbench", copy)
    errors = copy / "core" / "errors.py"
    errors.write_text(
        errors.read_text() + "\n\ndef _f():\n    from detbench.report import render\n"
    )
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(ROOT / "tools" / "import_graph.py", tools)
    proc = subprocess.run(
        [sys.executable, str(tools / "import_graph.py")], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "upward: detbench.core.errors -> detbench.report.render" in proc.stdout
