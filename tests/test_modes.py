from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from detbench.core.errors import DetbenchError
from detbench.core.modes import CUBLAS_ENV, DEFAULT_MODE, MODES, Mode, get_mode

from .conftest import detbench_cli


def test_the_matrix_has_ten_distinct_modes() -> None:
    assert len(MODES) == 10
    assert len({m.name for m in MODES}) == 10
    flags = {
        (m.benchmark, m.cudnn_deterministic, m.deterministic_algorithms, m.cudnn_enabled)
        for m in MODES
    }
    assert len(flags) == 10
    with_cudnn = [m for m in MODES if m.cudnn_enabled]
    assert len(with_cudnn) == 8
    without = [m for m in MODES if not m.cudnn_enabled]
    assert {m.deterministic_algorithms for m in without} == {False, True}
    assert not any(m.benchmark or m.cudnn_deterministic for m in without)
    assert get_mode("default") == DEFAULT_MODE
    assert (
        not (
            DEFAULT_MODE.benchmark
            or DEFAULT_MODE.cudnn_deterministic
            or DEFAULT_MODE.deterministic_algorithms
        )
        and DEFAULT_MODE.cudnn_enabled
    )


def test_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(DetbenchError, match="unknown mode 'fast'; known modes: default"):
        get_mode("fast")


def test_cublas_workspace_is_added_only_for_deterministic_algorithms() -> None:
    det = get_mode("det-algos")
    assert det.environment({})[CUBLAS_ENV] == ":4096:8"
    assert det.environment({CUBLAS_ENV: ":16:8"})[CUBLAS_ENV] == ":16:8"  # the user's wins
    assert CUBLAS_ENV not in DEFAULT_MODE.environment({})
    # A value inherited from the user's shell never reaches a mode without det-algos.
    assert CUBLAS_ENV not in DEFAULT_MODE.environment({CUBLAS_ENV: ":16:8"})
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "2"}
    # Nothing else changes behind the user's back.
    assert {k: v for k, v in det.environment(base).items() if k != CUBLAS_ENV} == base
    assert "CUDA_LAUNCH_BLOCKING" not in det.environment(base)


#: The modes whose snippet make test runs (each a fresh interpreter that imports torch: 4-9 s here);
#: the other six under make test-slow.
QUICK_SNIPPETS = ("default", "det-algos", "no-cudnn", "bench+cudnn-det+det-algos")


@pytest.mark.parametrize(
    "mode",
    [pytest.param(m, marks=() if m.name in QUICK_SNIPPETS else pytest.mark.slow) for m in MODES],
    ids=lambda m: m.name,
)
def test_snippet_reproduces_the_mode_in_a_fresh_process(mode: Mode) -> None:
    check = (
        "\nprint(torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,"
        " torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.enabled,"
        f" os.environ.get('{CUBLAS_ENV}'))"
    )
    env = {k: v for k, v in os.environ.items() if k != CUBLAS_ENV}
    out = subprocess.run(
        [sys.executable, "-c", "import os\n" + mode.snippet() + check],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    expected = [
        mode.benchmark,
        mode.cudnn_deterministic,
        mode.deterministic_algorithms,
        mode.cudnn_enabled,
    ]
    assert out[:4] == [str(b) for b in expected]
    assert out[4] == (":4096:8" if mode.deterministic_algorithms else "None")


def test_modes_cli_table_and_json() -> None:
    table = detbench_cli("modes")
    assert table.returncode == 0
    names = [ln.split()[0] for ln in table.stdout.splitlines()[1:11]]
    assert names == [m.name for m in MODES]
    data = json.loads(detbench_cli("modes", "--json").stdout)
    assert [d["name"] for d in data] == [m.name for m in MODES]
    for d, m in zip(data, MODES, strict=True):
        for key in (
            "benchmark",
            "cudnn_deterministic",
            "deterministic_algorithms",
            "cudnn_enabled",
        ):
            assert d[key] is getattr(m, key)
        assert d["snippet"] == m.snippet()
