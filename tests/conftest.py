from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

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
    _CACHE.unlink(missing_ok=True)


def detbench_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m detbench ARGS`` as a user would, in a fresh process."""
    env = dict(os.environ)
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
        "--mode", "det-algos", "--replicates", "2", "--budget", "0.02", "--out", str(out),
        "--no-report",
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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cuda-only",
        action="store_true",
        help="collect only the tests that need a CUDA GPU (make test-cuda, on a GPU host)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
