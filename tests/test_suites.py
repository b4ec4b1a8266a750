"""Every workload of every built-in suite, quick profile, on CPU, in fresh worker processes: nothing
may end in `error` (an op without a deterministic implementation is `unsupported`, which is
data). One replicate per mode: run-to-run verdicts are tested elsewhere.

On a CPU the 10 modes are two computations (deterministic algorithms off or on; the cuDNN flags
act on nothing), so two modes stand for all ten here: `default` (every flag off) and
`bench+cudnn-det+det-algos` (every flag on but cuDNN's own switch); `make bench` runs all ten."""

from __future__ import annotations

import io

import pandas as pd
import pytest

import detbench
from detbench.core.modes import get_mode
from detbench.core.workload import builtin_suite_files
from detbench.run.config import RunConfig
from detbench.run.runner import prepare

#: Every workload of every suite: the slowest test file (about a minute here). `make test` leaves
#: it out to stay under 10 minutes; `make test-slow` and CI run it.
pytestmark = pytest.mark.slow

#: The two computations of a CPU: every flag off, and every flag on but cuDNN's own switch.
MODES = [get_mode(n) for n in ("default", "bench+cudnn-det+det-algos")]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("suites") / "out"
    config = RunConfig(out=out, modes=MODES, replicates=1, profile="quick", device="cpu",
                       budget=0.01)  # fmt: skip
    prepare(config, stream=io.StringIO()).run()
    return detbench.load_results(out)


def test_every_workload_runs_in_every_mode(matrix: pd.DataFrame) -> None:
    assert set(matrix["suite"]) == set(builtin_suite_files())
    keys = matrix["suite"] + "/" + matrix["workload"]
    assert (keys.value_counts() == len(MODES)).all()
    bad = matrix[~matrix["status"].isin(["ok", "unsupported"])]
    assert bad.empty, bad[["suite", "workload", "mode", "status", "message"]].to_string()
    # `unsupported` only where deterministic algorithms are on, where an invariance workload
    # pins an SDPA backend a CPU lacks (efficient, cudnn: "No viable backend"), or where a
    # models workload needs a library that does not import here (torchvision, on this VM).
    unsupported = matrix[matrix["status"] == "unsupported"]
    pinned = unsupported["workload"].str.fullmatch(r"sdpa_padded_(efficient|cudnn)")
    library = (unsupported["suite"] == "models") & unsupported["message"].str.contains(
        "which does not import here"
    )
    assert unsupported[~pinned & ~library]["deterministic_algorithms"].all()
    assert (matrix[matrix["workload"].str.fullmatch(r"sdpa_padded_(efficient|cudnn)")]["status"]
            == "unsupported").all()  # fmt: skip


def test_work_per_step_is_recorded(matrix: pd.DataFrame) -> None:
    ok = matrix[matrix["status"] == "ok"]
    for suite in ("conv", "training"):
        rows = ok[ok["suite"] == suite]
        assert (rows["flops_per_step"] > 0).all()
        ratio = rows["flops_per_second"] * rows["seconds_per_step"] / rows["flops_per_step"]
        assert ((ratio - 1).abs() < 1e-12).all()


def test_training_losses_are_recorded_per_step(matrix: pd.DataFrame) -> None:
    rows = matrix[(matrix["suite"] == "training") & (matrix["status"] == "ok")]
    assert len(rows) == 3 * len(MODES)
    for losses, fps in zip(rows["losses"], rows["step_fingerprints"], strict=True):
        assert len(losses) == len(fps) == 8  # the training suite's own quick step count
        assert all(isinstance(v, float) for v in losses)


def test_run_directory_is_complete(matrix: pd.DataFrame) -> None:
    assert set(matrix["replicate"]) == {0}
    assert set(matrix["mode"]) == {m.name for m in MODES}
