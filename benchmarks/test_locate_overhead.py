"""What the recorder of ``detbench locate`` costs: a training-suite step with and without it.

    python -m pytest -q -s benchmarks/test_locate_overhead.py

For each workload of the training suite (quick profile on a CPU, full on a GPU), the same built
step is timed plain and under :class:`detbench.locate.record.Recorder` (every op's inputs and
outputs digested; on a GPU the digests stay on the device until the end of the step). The ratio
is the slowdown a user pays to locate; locate runs only a few steps, so it is its cost in
seconds, not its throughput, that matters. Rounds are few so that the file takes about a minute
on a 2-core CPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from detbench.core.seeding import seed_all
from detbench.core.workload import Context, builtin_suite_files, load_file
from detbench.locate.record import Recorder

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PROFILE = "full" if DEVICE == "cuda" else "quick"
ROUNDS = 7
WORKLOADS = [w for w in load_file(builtin_suite_files()["training"]) if w.suite == "training"]


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _median_seconds(run: Any) -> float:
    times = []
    for _ in range(ROUNDS):
        _sync()
        t0 = time.perf_counter()
        run()
        _sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_recorder_overhead_on_the_training_suite(benchmark: Any, w: Any) -> None:
    seed_all(0)
    step = w.factory(Context(device=torch.device(DEVICE), profile=PROFILE, seed=0))
    step()  # warm up (allocator, first-call costs)
    plain = _median_seconds(step)
    rec = Recorder()
    rec.install()
    try:

        def recorded() -> None:
            with rec:
                step()
            rec.end_step()  # the one copy of the step's digests to the host
            rec.ops.clear()

        recorded()
        seconds = benchmark.pedantic(recorded, rounds=ROUNDS, iterations=1)
        under = benchmark.stats.stats.median
    finally:
        rec.remove()
    assert seconds is None and under > 0
    benchmark.extra_info.update(plain_seconds=plain, recorded_seconds=under, device=DEVICE)
    print(
        f"\n{w.key:32} {DEVICE} {PROFILE}: plain {1e3 * plain:8.2f} ms/step, recorded "
        f"{1e3 * under:8.2f} ms/step: {under / plain:5.1f}x"
    )
