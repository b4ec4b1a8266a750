"""A CPU plan's figures scaled by this host's speed (``run/hostspeed.py``): what scales (the
seconds of work: records, preparations, steps, turns, launches, invariance passes) and what does
not (what was measured here: a start-up, a probe's record; what is a time by design: a block's
size, the warm-up's ceiling), and the factor as a run keeps it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from detbench.core.modes import MODES
from detbench.run.estimate import estimate
from detbench.run.figures import (
    HOST_REFERENCE_SECONDS,
    INVARIANCE_SECONDS_PER_SIZE,
    LAUNCH_SECONDS,
    PAIRED_BLOCK_STEP_SECONDS,
    PAIRED_TURN_SECONDS,
    VERDICT_RECORD_SECONDS,
)
from detbench.run.hostspeed import FACTOR_BOUNDS, HostSpeed, measure, reference_pass
from detbench.run.paired_plan import PairedPlan
from detbench.run.schedule import make_plan
from detbench.run.slot_seconds import Probed
from tests.conftest import detbench_cli

KEYS = ["conv/a", "rnn/b", "distributed/c", "ops/mine"]


def test_the_reference_work_is_the_same_work_on_every_pass() -> None:
    assert reference_pass() == reference_pass()  # seeded: the same bits, so the same work
    assert 0 < measure(passes=3) < 5


def test_the_factor_is_this_hosts_seconds_over_the_reference_hosts_within_bounds() -> None:
    ref = HOST_REFERENCE_SECONDS["cpu"]
    assert HostSpeed(2 * ref, ref).factor == pytest.approx(2.0)
    assert HostSpeed(ref / 4, ref).to_json() == {
        "seconds": round(ref / 4, 5),
        "reference_seconds": ref,
        "factor": 0.25,
    }
    assert HostSpeed(1000 * ref, ref).factor == FACTOR_BOUNDS[1]  # a measurement gone wrong
    assert "cuda" not in HOST_REFERENCE_SECONDS  # a GPU plan is never scaled


def _priced(factor: float) -> tuple[dict[str, float], float, float, float, float]:
    """A fused CPU plan of KEYS on a host ``factor`` times as slow: each record's seconds (the
    first worker's), the launch, the invariance size, the start-up and the paired phase."""
    plan = make_plan(KEYS, list(MODES)[:2], 2, seed=0)
    paired = PairedPlan(
        groups=6,
        replicates=2,
        keys=("conv/a", "rnn/b", "ops/mine") * 2,
        workers=3,
        rounds=12,
        block_seconds=0.008,
        fused=True,
        warmup=0.05,
    )
    est = estimate(
        plan,
        "cpu",
        "quick",
        budget=0.1,
        startup_seconds=1.5,
        measured=True,
        distributed=frozenset({"distributed/c"}),
        batch_sizes={"conv/a": 4},
        probed={"ops/mine": Probed(0.4)},
        paired=paired,
        host=HostSpeed(factor * 0.01, 0.01),
    )
    first = plan.slots[0]
    records = dict(est.slot_seconds[(first.replicate, first.mode.name)][1])
    return records, est.launch_seconds, est.size_seconds, est.startup_seconds, est.paired_seconds


def test_a_slower_host_scales_the_figures_of_work_and_nothing_measured_here() -> None:
    (rec1, launch1, size1, start1, paired1) = _priced(1.0)
    (rec2, launch2, size2, start2, paired2) = _priced(2.0)
    verdict = VERDICT_RECORD_SECONDS[("cpu", "quick", True)]
    assert rec1["conv/a"] == pytest.approx(verdict["conv"])
    assert rec2["conv/a"] == pytest.approx(2 * verdict["conv"])
    assert rec2["rnn/b"] == pytest.approx(2 * verdict["rnn"])
    assert rec1["ops/mine"] == rec2["ops/mine"] == pytest.approx(0.4)  # probed here
    assert (launch1, launch2) == pytest.approx((LAUNCH_SECONDS["cpu"], 2 * LAUNCH_SECONDS["cpu"]))
    size = INVARIANCE_SECONDS_PER_SIZE[("cpu", "quick")]
    assert (size1, size2) == pytest.approx((size, 2 * size))
    assert start1 == start2 == 1.5  # measured here: the caller's, never scaled
    # The paired phase: the group start-ups (measured) and the warm-ups (a ceiling in seconds)
    # stay; the A/A copies' builds, the steps and the turns' overheads double.
    assert paired1 < paired2 < 2 * paired1


def test_a_block_scales_with_its_step_only_where_the_step_outlasts_the_blocks_size() -> None:
    p = PairedPlan(
        groups=1, replicates=1, keys=("batchnorm/x",), workers=3, rounds=12, block_seconds=0.008
    )
    assert p.here((0.0086, 0.0003), 2.0) == pytest.approx((0.0086, 0.0006))  # many steps a block
    # One step a block (0.0268 s against blocks of 0.008): on a host twice as fast it is 0.0134 s
    # and still outlasts the size, so the block halves; on a host four times as fast the step is
    # 0.0067 s and the block keeps its size's 0.008 s.
    assert p.here((0.0268, 0.0268), 0.5) == pytest.approx((0.0134, 0.0134))
    assert p.here((0.0268, 0.0268), 0.25) == pytest.approx((0.008, 0.0067))
    # A turn of a measured suite: its block, one untimed step and the turn's overhead (work).
    block, step = PAIRED_BLOCK_STEP_SECONDS[("cpu", "quick")][("batchnorm", True)]
    turn = PAIRED_TURN_SECONDS["cpu"]
    slow = p.rounds_seconds("batchnorm/x", "cpu", "quick", 2.0)
    assert slow / p.rounds_seconds("batchnorm/x", "cpu", "quick") == pytest.approx(
        (block + 2 * step + 2 * turn) / (block + step + turn)
    )


def test_a_cpu_plan_says_how_fast_this_host_is_and_a_gpu_plan_on_paper_is_not_scaled(
    tmp_path: Path,
) -> None:
    args = ["run", "--suite", "bmm", "--mode", "default", "--replicates", "2", "--dry-run"]
    cpu = detbench_cli(*args, "--device", "cpu", "--json", cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stderr
    host = json.loads(cpu.stdout)["host_speed"]
    assert host["reference_seconds"] == HOST_REFERENCE_SECONDS["cpu"]
    assert host["factor"] == pytest.approx(host["seconds"] / host["reference_seconds"], abs=2e-3)
    text = detbench_cli(*args, "--device", "cpu", cwd=tmp_path)
    assert "  priced for this host: it ran the reference work in " in text.stdout
    assert "on the host that measured the cpu figures, so they count x" in text.stdout
    cuda = detbench_cli(*args, "--device", "cuda", "--json", cwd=tmp_path)
    assert cuda.returncode == 0, cuda.stderr
    assert json.loads(cuda.stdout)["host_speed"] is None  # on paper or on a GPU alike
    assert sorted(tmp_path.iterdir()) == []  # dry runs: nothing written


def test_a_run_keeps_the_factor_its_plan_was_priced_with(paired_ops_run: Path) -> None:
    calls = json.loads((paired_ops_run / "env.json").read_text())["run_calls"]
    host = calls[-1]["host_speed"]
    assert host["reference_seconds"] == HOST_REFERENCE_SECONDS["cpu"] and host["seconds"] > 0
    assert host["factor"] == pytest.approx(host["seconds"] / host["reference_seconds"], abs=2e-3)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_the_cores_counted_are_this_processs_affinity_not_the_machines() -> None:
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from detbench.run.hostspeed import cores; print(cores(), os.cpu_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mine, machine = map(int, out.stdout.split())
    assert mine == 1 and machine == os.cpu_count()  # one core of the machine's, as taskset -c 0
