"""Issue 21, item 7: locate on CUDA. Its recording processes (stage 3, the fully deterministic
check, among them) get their mode's environment, ``CUBLAS_WORKSPACE_CONFIG`` as a run's worker
gets it; the recorder survives a stack under 3 frames (autograd's device thread on torch < 2.11);
the quick profile is the default on a GPU as on a CPU."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.core.modes import CUBLAS_DEFAULT, CUBLAS_ENV, get_mode
from detbench.locate import record, stages
from detbench.worker import protocol

from .conftest import WORKLOADS, requires_cuda


def test_run_child_gives_the_child_the_environment_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CUBLAS_ENV, raising=False)
    det = get_mode(stages.DETERMINISTIC_MODE)
    got = protocol.run_child("tests.gpu21_env_child:work", {}, tmp_path, "a", 60, det.environment)
    assert got["cublas"] == CUBLAS_DEFAULT
    plain = protocol.run_child("tests.gpu21_env_child:work", {}, tmp_path, "b", 60)
    assert plain["cublas"] is None  # without one, the child environment as before
    monkeypatch.setenv(CUBLAS_ENV, ":16:8")
    default = protocol.run_child(
        "tests.gpu21_env_child:work", {}, tmp_path, "c", 60, get_mode("default").environment
    )
    assert default["cublas"] is None  # a mode without deterministic algorithms runs without it


def test_every_recording_process_gets_its_modes_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def fake(kind: str, job: dict[str, Any], workdir: Path, name: str, timeout: float,
             environment: Any = None, label: str | None = None) -> dict[str, Any]:  # fmt: skip
        seen.append(environment({"PATH": "/bin"}) if environment else None)
        return {"workloads": {}}

    monkeypatch.setattr(stages, "run_child", fake)  # stages imports it at its top
    import io

    runs = stages._Runs(tmp_path / "w.py", "cuda", "quick", 0, tmp_path, io.StringIO())
    runs.run([], get_mode(stages.DETERMINISTIC_MODE), {}, "check")
    runs.run([], get_mode("default"), {}, "find")
    assert seen[0] == {"PATH": "/bin", CUBLAS_ENV: CUBLAS_DEFAULT}
    assert seen[1] == {"PATH": "/bin"}


def test_the_recorder_survives_a_shallow_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    def shallow(depth: int = 0) -> Any:
        raise ValueError("call stack is not deep enough")

    rec = record.Recorder()
    monkeypatch.setattr(record, "sys", types.SimpleNamespace(_getframe=shallow))
    assert rec._where() == ("", 0, "", False)


def test_locate_defaults_to_quick_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile locate picks when none is given, on a host that has a GPU (faked: the
    recording processes are never started)."""
    chosen: list[str] = []

    class Stop(Exception):
        pass

    def runs(source: Path, device: str, profile: str, *rest: Any) -> Any:
        chosen.append(profile)
        raise Stop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(stages, "_Runs", runs)
    with pytest.raises(Stop):
        stages.locate(f"{WORKLOADS / 'locate_me.py'}:gather_backward", device="cuda")
    assert chosen == ["quick"]


@requires_cuda
def test_the_deterministic_check_on_cuda_runs_with_the_workspace(tmp_path: Path) -> None:
    det = get_mode(stages.DETERMINISTIC_MODE)
    got = protocol.run_child("tests.gpu21_env_child:work", {}, tmp_path, "d", 120, det.environment)
    assert got["cublas"] is not None
