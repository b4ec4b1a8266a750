"""Every built-in workload as a pytest-benchmark test, in the mode given by ``--detbench-mode``.

    make pytest-bench MODE=det-algos ARGS="--benchmark-json=det.json"

pytest-benchmark calibrates the rounds and iterations and computes the statistics; each call of the
benchmarked function is one step followed by a device synchronisation, so on a GPU the sync cost is
inside every sample (detbench's own runner amortises it; see detbench/timing.py). Each test also
stores the mode and the bitwise fingerprint of the first steps in the JSON's ``extra_info``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from detbench.core.modes import current_flags
from detbench.core.seeding import seed_all
from detbench.core.workload import Context, Unsupported, builtin_suite_files, load_file
from detbench.worker import fingerprint as fp

FINGERPRINT_STEPS = 3


def _workloads() -> list[Any]:
    out = []
    for path in builtin_suite_files().values():
        out += load_file(path)
    return out


WORKLOADS = _workloads()


@pytest.mark.parametrize("w", WORKLOADS, ids=[w.key for w in WORKLOADS])
def test_workload(
    w: Any, benchmark: Any, request: pytest.FixtureRequest, detbench_mode: Any
) -> None:
    suites = request.config.getoption("--detbench-suite")
    if suites and w.suite not in suites:
        pytest.skip(f"suite {w.suite} not selected")
    if w.distributed:
        pytest.skip("a distributed workload runs under torchrun: detbench run --suite distributed")
    dev = request.config.getoption("--detbench-device") or (
        "cuda" if torch.cuda.is_available() else "cpu"
    )
    profile = request.config.getoption("--detbench-profile") or (
        "full" if dev == "cuda" else "quick"
    )
    ctx = Context(device=torch.device(dev), profile=profile, seed=0)
    seed_all(ctx.seed)
    try:
        step = w.factory(ctx)
    except Unsupported as exc:  # a library the models suite needs is not installed here
        pytest.skip(str(exc))
    digests = [fp.step_digest(fp.step_outputs(step())) for _ in range(FINGERPRINT_STEPS)]
    # A step whose outputs hash like no outputs would fingerprint nothing.
    assert fp.step_digest([]) not in digests, f"{w.key}: a step returned no tensor"

    def synced_step() -> None:
        step()
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()

    benchmark.group = w.suite
    benchmark.extra_info.update(
        mode=request.config.getoption("--detbench-mode"),
        flags=current_flags(),
        profile=profile,
        device=dev,
        items_per_step=w.items(ctx),
        fingerprint=fp.combine(digests),
        num_threads=torch.get_num_threads(),
    )
    benchmark(synced_step)
    # What was measured ran in the mode its results are filed under (a workload that changed a
    # flag would be measured in another mode), and it was measured.
    flags = current_flags()
    assert flags == {k: getattr(detbench_mode, k) for k in flags}, (w.key, flags)
    if not benchmark.disabled:
        stats = benchmark.stats.stats
        assert stats.rounds >= 1 and stats.min > 0, w.key
