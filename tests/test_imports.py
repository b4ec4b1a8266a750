"""What importing detbench loads (issue 30 items 5 and 6): the package's names load when first
used, a worker process loads nothing of the parent side, imports of detbench's own modules sit at
the tops of modules but where a comment gives a reason, and the suites use the public API."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import detbench

from .conftest import ROOT, WORKLOADS, detbench_cli

SUBPACKAGES = (
    "core",
    "store",
    "worker",
    "distributed",
    "run",
    "analysis",
    "locate",
    "report",
    "cli",
)


def fresh(code: str) -> str:
    """``python -c CODE`` in a fresh process, from the checkout; its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_a_core_module_loads_no_run_and_no_report() -> None:
    out = fresh(
        "import detbench.core.modes, sys; print(sorted(m for m in sys.modules "
        "if m.startswith(('detbench.run','detbench.report'))))"
    )
    assert out == "[]"


def test_import_detbench_loads_the_package_alone() -> None:
    out = fresh(
        "import detbench, sys; print(sorted(m for m in sys.modules if m.startswith('detbench')))"
    )
    assert out == "['detbench']"


def test_a_public_name_loads_its_module_and_no_other_layer() -> None:
    """``detbench.workload`` is the decorator (not the module of the same name), and using it
    loads core alone."""
    out = fresh(
        "import detbench, sys; print(detbench.workload.__module__, detbench.workload.__name__, "
        "sorted({m.split('.')[1] for m in sys.modules if m.startswith('detbench.')}))"
    )
    assert out == "detbench.core.workload workload ['core']"


def _type_checking_names() -> set[str]:
    tree = ast.parse((ROOT / "detbench" / "__init__.py").read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    return {
        a.asname or a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names
    }


def test_the_public_names_resolve_and_agree_with_what_mypy_sees() -> None:
    public = {**detbench._PUBLIC, **detbench._MODULES}
    assert sorted(detbench.__all__) == sorted(public)
    assert _type_checking_names() == set(public), "the TYPE_CHECKING imports name other things"
    for name, module in public.items():
        value = getattr(detbench, name)
        owner = value if isinstance(value, ModuleType) else sys.modules[module]
        assert owner.__name__ == module, name
    assert set(detbench.__all__) <= set(dir(detbench))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        detbench.no_such_name  # noqa: B018


#: The child processes' main modules: a run's worker, a torchrun rank, locate's recording
#: process, the op probe.
CHILD_MAINS = ("run/child.py", "distributed/rank.py", "locate/worker.py", "run/probe.py")

CHILD_IMPORTS = """
import ast, importlib, sys
from pathlib import Path
from detbench.core.workload import builtin_suite_files, load_file
sys.path.insert(0, "tests/workloads")
from worker_imports import parent_modules
for path in {paths}:
    tree = ast.parse(Path("detbench", path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("detbench"):
            importlib.import_module(node.module)
for f in builtin_suite_files().values():
    load_file(str(f))
print(parent_modules())
"""


def test_the_child_mains_and_the_suites_load_nothing_of_the_parent_side() -> None:
    """Each child process's main module, every detbench module it imports (inside its functions
    too) and every built-in suite, in one fresh process: no module of the parent side loads."""
    assert fresh(CHILD_IMPORTS.format(paths=CHILD_MAINS)) == "[]"


@pytest.mark.slow
def test_a_worker_loads_nothing_of_the_parent_side(tmp_path: Path) -> None:
    """A real run: the workload fails, naming them, where its worker process loaded a module
    of the parent side (run orchestration, analysis, report, locate's stages, the CLI)."""
    out = tmp_path / "run"
    proc = detbench_cli(
        "run",
        "--workload",
        str(WORKLOADS / "worker_imports.py"),
        "--mode",
        "default",
        "--replicates",
        "2",
        "--budget",
        "0.02",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--no-report",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for r in records:
        assert (r["status"], r["message"]) == ("ok", None)


def test_the_workloads_check_sees_a_parent_module() -> None:
    """The check above can fail: in a process that imported the runner, it names the runner."""
    out = fresh(
        "import sys, runpy, detbench.run.api; sys.path.insert(0, 'tests/workloads');"
        "import worker_imports as w; print(w.parent_modules())"
    )
    assert "'detbench.run.runner'" in out and "'detbench.run.api'" in out


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "local_imports", ROOT / "tools" / "local_imports.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_imports_inside_functions_are_few_and_each_gives_its_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tool = _tool()
    assert tool.main() == 0, capsys.readouterr().out[-3000:]
    total = int(capsys.readouterr().out.splitlines()[-1].split()[0])
    assert 0 < total <= tool.MAX == 25


def test_the_import_checker_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Planted: one import without a reason, then more than MAX with one."""
    tool = _tool()
    package = tmp_path / "detbench"
    package.mkdir()
    (package / "a.py").write_text("def f():\n    from detbench.core import modes\n")
    assert tool.main(package) == 1
    assert "a.py:2: from detbench.core import modes: no comment gives its reason" in (
        capsys.readouterr().out
    )
    body = "".join(f"def f{i}():\n    import detbench.core  # a reason\n" for i in range(26))
    (package / "a.py").write_text(body)
    assert tool.main(package) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("26 imports")


def test_the_suites_import_detbench_alone() -> None:
    """Every import of detbench in suites/ is ``import detbench``, and no suite reaches into a
    subpackage through it (``detbench.core.x``): the public API, as a user's workload has it.
    (import-linter's contracts in ``make lint`` hold the same, and the child side apart from
    the parent side.)"""
    bad = []
    for path in sorted((ROOT / "suites").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("detbench"):
                bad.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("detbench.")]
                bad += [f"{path.name}:{node.lineno}: import {n}" for n in names]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "detbench"
                and node.attr in SUBPACKAGES
            ):
                bad.append(f"{path.name}:{node.lineno}: detbench.{node.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr not in detbench.__all__
                and (isinstance(node.value, ast.Name) and node.value.id == "detbench")
            ):
                bad.append(f"{path.name}:{node.lineno}: detbench.{node.attr} is not public")
    assert bad == []
