"""The house in layers: no cycle, no upward import, no global state on import, suites shipped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, which pytest itself needs there
    import tomli as tomllib

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


#: The map of the package: docs/contributing.md's module tables, one row per module, under the
#: heading of its layer ("#### `run`"), the module named in the row's first cell by its dotted
#: name ("| `detbench.run.api` | what it owns |").
CONTRIBUTING = ROOT / "docs" / "contributing.md"
LAYER_HEADING = re.compile(r"^#{1,6}\s+`(\w+)`\s*$")
MODULE_ROW = re.compile(r"^\|\s*`(detbench(?:\.\w+)+)`\s*\|(.*)\|\s*$")


def modules_in_tree() -> set[str]:
    """Every module of detbench/ by its dotted name, the packages' __init__ and __main__ aside."""
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "detbench").rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    }


def module_rows(text: str) -> list[tuple[str, str | None, str]]:
    """(module, the layer heading it sits under or None, what it owns) for each module row."""
    rows = []
    layer = None
    for line in text.splitlines():
        heading = LAYER_HEADING.match(line)
        if heading:
            layer = heading.group(1)
        elif line.startswith("#"):
            layer = None
        row = MODULE_ROW.match(line)
        if row:
            rows.append((row.group(1), layer, row.group(2).strip()))
    return rows


def test_the_map_rows_are_read_as_written() -> None:
    """The parser reads a row under its layer's heading, and leaves prose and other tables be."""
    text = (
        "#### `run`\n\n| module | owns |\n| --- | --- |\n"
        "| `detbench.run.api` | the public run API |\n"
        "|`detbench.run.merge`|  shards into one run |\n"
        "The worker (`detbench.run.child`) is not a row.\n"
        "## Tools\n\n| `detbench.cli.main` | under no layer |\n"
    )
    assert module_rows(text) == [
        ("detbench.run.api", "run", "the public run API"),
        ("detbench.run.merge", "run", "shards into one run"),
        ("detbench.cli.main", None, "under no layer"),
    ]


def test_every_module_has_a_row_in_the_map_and_every_row_a_module() -> None:
    """docs/contributing.md names every module of detbench/ once, under its own layer, with
    what it owns; a module added without a row, or a row left after its module went, fails."""
    tree = modules_in_tree()
    rows = module_rows(CONTRIBUTING.read_text())
    named = [module for module, _, _ in rows]
    assert len(tree) > 100, "the walk of detbench/ found too few modules"
    assert sorted(tree - set(named)) == [], "modules with no row in docs/contributing.md"
    assert sorted(set(named) - tree) == [], "rows in docs/contributing.md of no module"
    assert sorted({m for m in named if named.count(m) > 1}) == [], "modules with two rows"
    misplaced = [(m, layer) for m, layer, _ in rows if m.split(".")[1] != layer]
    assert misplaced == [], "rows under another layer's heading"
    assert [m for m, _, owns in rows if not owns] == [], "rows that say nothing of what it owns"


def child_contract() -> dict[str, list[str]]:
    """pyproject.toml's import-linter contract that keeps the child side off the parent side."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "forbidden" and "detbench.worker" in c["source_modules"]
    ]
    return contract


def listed(module: str, entries: list[str]) -> bool:
    """Whether ``module`` is one of ``entries`` or inside a package among them."""
    return any(module == e or module.startswith(e + ".") for e in entries)


def test_the_child_contract_places_every_module_of_run_and_locate() -> None:
    """Every module of detbench.run and detbench.locate is on the child side (the contract's
    source_modules) or the parent side (its forbidden_modules), never both, and every module the
    contract names exists: a new module of either cannot be missed by the contract."""
    contract = child_contract()
    child, parent = contract["source_modules"], contract["forbidden_modules"]
    tree = modules_in_tree()
    modules = sorted(m for m in tree if m.startswith(("detbench.run.", "detbench.locate.")))
    assert len(modules) > 20
    assert [m for m in modules if not listed(m, child) and not listed(m, parent)] == [], (
        "modules on neither side of the child contract in pyproject.toml"
    )
    assert [m for m in modules if listed(m, child) and listed(m, parent)] == []
    packages = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "detbench").rglob("__init__.py")
    }
    unknown = [
        e
        for e in child + parent
        if e.startswith("detbench") and e not in tree and e not in packages
    ]
    assert unknown == [], "the child contract names modules that do not exist"
