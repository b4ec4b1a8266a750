"""Whose processes shared the GPU while a record was timed, as ``analysis.busy`` reads it: the
published H100 run of 2026-11-26 (its records say there was another process, not whose), and the
same records as the split of issue 29 writes them (the run's own worker, or a foreign program)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import detbench
from detbench.analysis import busy

H100 = Path(__file__).resolve().parent.parent / "results" / "20261126-060355-cuda-full-h100-partial"


@pytest.fixture(scope="module")
def h100() -> pd.DataFrame:
    return detbench.load_results(H100)


def _split(df: pd.DataFrame, **fields: Any) -> pd.DataFrame:
    """``df`` with each record that had another process on its GPU given the split's ``fields``,
    as a record written since issue 29 would be."""
    out = df.copy()
    loads = []
    for h in out["host_load"]:
        h = dict(h)
        if h.get("gpu_other_processes"):
            h.update(fields)
        loads.append(h)
    out["host_load"] = pd.Series(loads, index=out.index, dtype=object)
    return out


def test_the_h100_run_does_not_say_whose_the_other_process_was(h100: pd.DataFrame) -> None:
    h = busy.host_load(h100)
    assert h is not None and (h.timed, h.gpu_unknown, h.gpu_foreign) == (736, 146, 0)
    # Before the split, another process whose SM use NVML did not sample (no samples in the
    # window: 37 records) made a timing busy; 37 of 736 is under a tenth: a quiet host.
    assert h.busy == 37 and not h.is_busy
    assert "146 timings had another process on the GPU that the records do not attribute" in (
        h.sentence()
    )


def test_the_runs_own_worker_does_not_make_a_host_busy(h100: pd.DataFrame) -> None:
    # The same 146 records as the split writes them: the run's own next worker. A timing is
    # busy by what is not the run's, as a paired timing is (issue 48: the runner's stopping of
    # its other workers, timed_alone, is no longer read).
    df = _split(h100, gpu_own_processes=1, gpu_foreign_processes=0, gpu_own_util=40)
    h = busy.host_load(df)
    assert h is not None and (h.busy, h.gpu_foreign, h.gpu_unknown) == (0, 0, 0)
    assert not h.is_busy
    assert h.sentence().startswith("The host was quiet while this run timed: other processes")
    assert "on the GPU" not in h.sentence()


def test_a_foreign_program_on_the_gpu_makes_a_host_busy(h100: pd.DataFrame) -> None:
    df = _split(h100, gpu_own_processes=0, gpu_foreign_processes=1, gpu_foreign_util=None)
    h = busy.host_load(df)
    assert h is not None and (h.busy, h.gpu_foreign, h.gpu_unknown) == (146, 146, 0)
    assert h.is_busy  # 146 of 736: a fifth
    assert h.sentence().startswith("The host was busy while this run timed")
    assert "146 timings shared the GPU with another program" in h.sentence()
    # A foreign process NVML sampled idle (a monitoring tool holding a context) is not a load.
    idle = busy.host_load(
        _split(h100, gpu_own_processes=0, gpu_foreign_processes=1, gpu_foreign_util=0)
    )
    assert idle is not None and idle.busy == 0 and idle.gpu_foreign == 146
