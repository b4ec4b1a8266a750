from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.store.results import COLLECT_ENV_CACHE

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = Path(__file__).resolve().parent / "workloads"

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# The host's torch.utils.collect_env facts, collected by the first run of this session and read
# by the later ones (every run here, in process or through the CLI, inherits this variable):
# they cannot change between runs seconds apart, and each collection costs 2.5 s of CPU.
# tests/test_results.py unsets it to test the collection itself.
_CACHE = Path(tempfile.gettempdir()) / f"detbench-tests-collect-env-{os.getpid()}.json"
os.environ.setdefault(COLLECT_ENV_CACHE, str(_CACHE))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not hasattr(session.config, "workerinput"):  # under xdist: the controller, once
        _CACHE.unlink(missing_ok=True)


# -- every run a test starts names its device (issue 21) ------------------------------------------
# The CLI's default device is cuda whenever a GPU is present, so a test that leaves it out asserts
# CPU facts on a CPU host and measures something else on a GPU host. Every command of detbench that
# starts a run must be given --device (or --devices, or --resume: the run's own device), whether
# through detbench_cli, a subprocess of its own, or detbench's main() in this process. A test that
# means to exercise the default device says so with @pytest.mark.default_device.

#: The commands that start a run, and the options that name its device.
RUN_COMMANDS = frozenset({"run", "attribute", "audit", "locate", "gpu-check", "submit"})
DEVICE_OPTIONS = ("--device", "--devices", "--resume")
_default_device_allowed = False  # True while a test marked default_device runs


def unnamed_device(args: Sequence[str]) -> str | None:
    """Why ``detbench ARGS`` breaks the rule, or None: a run command with no device option."""
    command = next((a for a in args if not a.startswith("-")), None)
    if command not in RUN_COMMANDS:
        return None
    if any(a == o or a.startswith(o + "=") for a in args for o in DEVICE_OPTIONS):
        return None
    return (
        f"`detbench {' '.join(args)}` names no device: the default is cuda on a GPU host, so "
        "pass --device cpu (or --device cuda in a test that needs a GPU), or mark a test that "
        "means to test the default device with @pytest.mark.default_device"
    )


def check_names_device(args: Sequence[str]) -> None:
    why = None if _default_device_allowed else unnamed_device([str(a) for a in args])
    if why:
        pytest.fail(why, pytrace=False)


def _detbench_args(cmd: Any) -> list[str] | None:
    """The arguments of ``cmd`` when it is ``PYTHON -m detbench ...``, else None."""
    if isinstance(cmd, (str, bytes, os.PathLike)) or len(cmd) < 3:
        return None
    if [str(c) for c in cmd[1:3]] != ["-m", "detbench"]:
        return None
    return [str(c) for c in cmd[3:]]


@pytest.fixture(autouse=True, scope="session")
def _runs_name_their_device() -> Iterator[None]:
    """Enforce the rule above for the whole session: on every ``python -m detbench`` this
    process starts (detbench's own children run other modules) and on detbench's parser."""
    popen_init = subprocess.Popen.__init__
    parse_args = argparse.ArgumentParser.parse_args

    def checked_popen_init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        detbench_args = _detbench_args(args)
        if detbench_args is not None:
            check_names_device(detbench_args)
        popen_init(self, args, *rest, **kwargs)

    def checked_parse_args(self: argparse.ArgumentParser, args: Any = None,
                           namespace: Any = None) -> Any:  # fmt: skip
        if self.prog == "detbench" and args is not None:
            check_names_device(list(args))
        return parse_args(self, args, namespace)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess.Popen, "__init__", checked_popen_init)
        mp.setattr(argparse.ArgumentParser, "parse_args", checked_parse_args)
        yield


@pytest.fixture(autouse=True)
def _default_device_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    global _default_device_allowed
    _default_device_allowed = request.node.get_closest_marker("default_device") is not None
    try:
        yield
    finally:
        _default_device_allowed = False


def detbench_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m detbench ARGS`` as a user would, in a fresh process (``env``: variables
    set for it beside this process's own). A run command must name its device (see above)."""
    check_names_device(args)
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "detbench", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or ROOT,
        timeout=600,
    )


@pytest.fixture(scope="session")
def invariance_probe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of tests/workloads/invariance_probe.py (default and det-algos, 2 replicates): the
    batch-invariance verdict's tests and its report section's tests read the same records."""
    out = tmp_path_factory.mktemp("invariance") / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "invariance_probe.py"), "--mode", "default",
        "--mode", "det-algos", "--replicates", "2", "--budget", "0.02", "--device", "cpu",
        "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


#: A serial run of tests/workloads/resumable.py (exact workloads: the same bits in every process),
#: default and det-algos, 2 replicates: what test_resume compares a resumed run with, and what
#: test_devices compares a run on two devices with.
RESUMABLE_RUN = [
    "run", "--workload", str(WORKLOADS / "resumable.py"), "--mode", "default", "--mode",
    "det-algos", "--replicates", "2", "--min-run-time", "0.3", "--device", "cpu", "--no-report",
]  # fmt: skip


@pytest.fixture(scope="session")
def resumable_serial_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RESUMABLE_RUN, uninterrupted, once per session (its readers only read it)."""
    out = tmp_path_factory.mktemp("resumable") / "run"
    proc = detbench_cli(*RESUMABLE_RUN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


#: A small run of the paired design (its default, issue 34) on the CPU: two ops workloads (one
#: nondeterministic without deterministic algorithms), default, det-algos and full determinism
#: (cudnn-det+det-algos: on a CPU the same computation as det-algos, so it makes its verdicts
#: and sits the rounds out), 3 replicates, with its report; what the report's and the console's
#: own agreement is checked on (issue 39).
PAIRED_OPS_RUN = [
    "run",
    *("--suite", "ops", "--only", "ops/index_put_accumulate", "--only", "ops/cumsum"),
    *("--mode", "default", "--mode", "det-algos", "--mode", "cudnn-det+det-algos"),
    *("--replicates", "3", "--device", "cpu"),
]


@pytest.fixture(scope="session")
def paired_ops_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PAIRED_OPS_RUN, once per session; the console's output is kept beside it, in
    ``console.txt`` (its readers only read the run)."""
    out = tmp_path_factory.mktemp("paired-ops") / "run"
    proc = detbench_cli(*PAIRED_OPS_RUN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (out.parent / "console.txt").write_text(proc.stdout)
    return out


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cuda-only",
        action="store_true",
        help="collect only the tests that need a CUDA GPU (make test-cuda, on a GPU host)",
    )


#: The session's shared runs: under pytest-xdist (`make test` runs 2 workers with --dist
#: loadgroup) a session fixture runs once per worker, so the modules that read one of these run
#: on one worker, as one group named after it.
SHARED_RUNS = ("resumable_serial_run", "invariance_probe_run", "paired_ops_run")


def xdist_groups(items: list[pytest.Item]) -> dict[str, str]:
    """The group of each test (by node id) under --dist loadgroup: its module, so that the
    module's own fixtures run once, unless a test of the module reads a shared run: then the
    run's name, so that the run is made once. "serial" for the tests marked serial (they run one
    after another; `make test` runs them after the others, alone)."""
    module_group: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        shared = [n for n in SHARED_RUNS if n in getattr(item, "fixturenames", ())]
        if shared or module not in module_group:
            module_group[module] = shared[0] if shared else module
    return {
        item.nodeid: "serial" if item.get_closest_marker("serial")
        else module_group[item.nodeid.split("::")[0]]
        for item in items
    }  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        groups = xdist_groups(items)
        for item in items:
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    if not config.getoption("--cuda-only"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        needs_gpu = any(
            m.kwargs.get("reason") == "needs a CUDA GPU" for m in item.iter_markers("skipif")
        )
        (keep if needs_gpu else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
