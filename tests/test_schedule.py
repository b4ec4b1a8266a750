"""The plan: shuffled mode order per replicate, what a resumed run still has to do, the estimate,
and ``detbench run --dry-run`` (which prints the plan and writes nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from detbench.core.modes import MODES, get_mode
from detbench.run.estimate import estimate
from detbench.run.figures import INVARIANCE_SECONDS_PER_SIZE
from detbench.run.schedule import clock, make_plan, mode_order
from detbench.run.slot_seconds import Probed, per_record_seconds, timing_seconds

ROOT = Path(__file__).resolve().parent.parent


def test_mode_order_is_a_seeded_shuffle_per_replicate() -> None:
    order = mode_order(MODES, 3, seed=0)
    assert len(order) == 3
    for modes_r in order:
        assert sorted(m.name for m in modes_r) == sorted(m.name for m in MODES)
    # Each replicate its own order (10! orders: equal by chance with odds 1 in 3.6 million).
    names = [tuple(m.name for m in r) for r in order]
    assert len(set(names)) == 3
    assert names[0] != tuple(m.name for m in MODES)
    # The same seed gives the same order in any process (string seeding, not the hash seed).
    script = (
        "from detbench.run.schedule import mode_order; from detbench.core.modes import MODES;"
        "print([[m.name for m in r] for r in mode_order(MODES, 3, seed=0)])"
    )
    for hash_seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hash_seed},
        ).stdout
        assert out.strip() == str([list(r) for r in names])
    assert mode_order(MODES, 3, seed=1) != order


def test_plan_skips_what_a_resumed_run_has() -> None:
    modes = [get_mode("default"), get_mode("det-algos")]
    keys = ["a/x", "a/y"]
    full = make_plan(keys, modes, 2, seed=0)
    assert (full.records, full.workers) == (8, 4)
    assert [s.replicate for s in full.slots] == [0, 0, 1, 1]
    assert [s.position for s in full.slots] == [0, 1, 0, 1]
    first = full.slots[0]
    done = {("a/x", first.mode.name, 0), ("a/y", first.mode.name, 0), ("a/x", "det-algos", 1)}
    rest = make_plan(keys, modes, 2, seed=0, done=done)
    assert rest.records == 5 and rest.workers == 3
    assert rest.order == full.order  # the same order as the run it resumes
    det1 = next(s for s in rest.slots if s.replicate == 1 and s.mode.name == "det-algos")
    assert det1.keys == ("a/y",)


def _verdict(device: str, profile: str, budget: float) -> float:
    """The model's seconds of a verdict record (no timing pass: the paired phase times the
    costs): its record less the model's timing pass, a third of it at least
    (``slot_seconds.record_seconds``)."""
    per = per_record_seconds(device, profile, budget)
    return max(per / 3, per - timing_seconds(device, budget))


def test_estimate_is_the_records_and_the_paired_phase_without_a_workers_start_up() -> None:
    # Every run's workers are its paired groups', whose start-ups the paired phase prices: the
    # records are charged their own seconds, no verdict worker's start-up beside them.
    keys = [f"a/w{i}" for i in range(40)]
    plan = make_plan(keys, list(MODES), 3, seed=0)
    est = estimate(plan, "cpu", "quick", budget=0.1, startup_seconds=3.0, measured=True)
    verdict = _verdict("cpu", "quick", 0.1)
    assert verdict == pytest.approx(per_record_seconds("cpu", "quick", 0.1) / 3)
    assert est.records == 1200 and est.workers == 30
    assert est.seconds == pytest.approx(1200 * verdict)
    assert est.to_json()["estimated_seconds"] == round(est.seconds, 1)
    cuda = estimate(plan, "cuda", "quick", budget=0.1, startup_seconds=9.8, measured=False)
    assert cuda.seconds == pytest.approx(1200 * _verdict("cuda", "quick", 0.1))
    assert clock(61) == "1:01" and clock(3725) == "1:02:05"


def test_estimate_counts_every_batch_size_an_invariance_pass_builds() -> None:
    keys = [f"a/w{i}" for i in range(40)]
    plan = make_plan(keys, list(MODES), 3, seed=0)
    plain = estimate(plan, "cpu", "quick", budget=0.1, startup_seconds=2.0, measured=True)
    sized = estimate(plan, "cpu", "quick", budget=0.1, startup_seconds=2.0, measured=True,
                     batch_sizes={"a/w0": 5, "a/w1": 12})  # fmt: skip
    assert sum(sized.lane_sizes) == 30 * (5 + 12)  # every (mode, replicate) builds them all
    per_size = INVARIANCE_SECONDS_PER_SIZE[("cpu", "quick")]
    assert sized.seconds == pytest.approx(plain.seconds + 30 * 17 * per_size)
    assert sized.to_json()["invariance_sizes"] == 510


def _detbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "detbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.slow  # whole workers started: make test-slow and CI run it
def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "--suite", "conv", "--mode", "default", "--mode", "det-algos",
            "--replicates", "2", "--device", "cpu", "--out", str(out), "--dry-run"]  # fmt: skip
    r = _detbench(*args, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    n = len(plan["workloads"])
    assert n >= 5
    assert plan["records"] == n * 2 * 2 and plan["workers"] == 4
    assert isinstance(plan["estimated_seconds"], float)
    # The start-up was measured by starting a real worker, and is what the estimate adds.
    assert 0.2 < plan["startup_seconds"] < 60 and plan["startup_measured"] is True
    # The estimate is the sum of its parts: the verdict workers' (their start-up, the waits no
    # later start-up hides behind, their records and the invariance passes), and
    # the paired phase's: one group of timing workers per (workload, replicate) (issue 34).
    assert plan["paired"]["groups"] == n * 2 and plan["paired"]["workers_per_group"] == 3
    assert plan["paired_seconds"] > 0 and plan["record_seconds"] > 0
    expected = (
        # the paired workers make the verdicts (issue 39): their start-ups are in paired_seconds
        plan.get("probe_seconds", 0.0)
        + plan["record_seconds"]
        + plan["invariance_seconds"]
        + plan["paired_seconds"]
    )
    assert plan["torchrun_launches"] == 0  # no distributed workload: no launch is charged
    assert abs(plan["estimated_seconds"] - expected) < 0.3  # the JSON rounds each figure
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere here
    text = _detbench(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    # one group of fresh workers per replicate makes its verdicts and costs (issue 39)
    assert f"= {n * 4} records in 2 groups of 3 fresh workers (one per replicate)" in text.stdout
    assert "nothing was written" in text.stdout
    assert not out.exists()
    bad = _detbench("run", "--suite", "conv", "--json", "--device", "cpu", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_a_measured_workload_prices_its_paired_members_at_its_own_build() -> None:
    """The paired phase builds each workload once per member: a workload measured here (a
    probe worker's record, or a resumed run's own) is priced at what its record took, but the
    FLOP count and the timing pass; another at its suite's figure."""
    from detbench.run.figures import PAIRED_PREPARE_SECONDS
    from detbench.run.paired_plan import PairedPlan

    plan = PairedPlan(
        groups=3,
        replicates=3,
        keys=("custom/unet",) * 3,
        workers=11,
        rounds=12,
        block_seconds=0.008,
    )
    model = plan.seconds("cpu", "quick", 3.0, cores=2)
    unet = Probed(seconds=7.5, count=1.5)  # 6 s of build and first steps
    measured = plan.seconds("cpu", "quick", 3.0, cores=2, probed={"custom/unet": unet})
    prepare = PAIRED_PREPARE_SECONDS[("cpu", "quick")]
    assert measured - model == pytest.approx(11 * 3 * (6.0 - prepare))
    assert plan.seconds("cpu", "quick", 3.0, cores=2, probed={"custom/other": unet}) == model


def test_a_long_step_measured_here_prices_its_groups_turns_warm_ups_and_rounds() -> None:
    """A user's training step of 2 s (issue 39's Faster R-CNN): each turn times a block of one
    step, with no untimed step before it (a block of one step of 0.1 s or more), 6 rounds (no
    such block fits the 0.1 s budget), and each member but the A/A copy warms the verdict's step
    up for a first group of steps. Priced as a 0.008 s block, the groups read 27 s against 282 s
    on paper (benchmarks/workloads/detector_step.py)."""
    from detbench.run.figures import PAIRED_ROUNDS_TAKEN, PAIRED_TURN_SECONDS
    from detbench.run.paired_plan import PairedPlan
    from detbench.worker.warmup import GROUP

    plan = PairedPlan(
        groups=1,
        replicates=1,
        keys=("mine/det",),
        workers=3,
        rounds=12,
        block_seconds=0.008,
        fused=True,
        warmup=0.048,
        budget=0.1,
    )
    turn = PAIRED_TURN_SECONDS["cpu"]
    rounds = plan.rounds_seconds("mine/det", "cpu", "quick", step=2.0)
    assert rounds == pytest.approx(6 * 3 * (2.0 + turn))
    det = Probed(seconds=8.0, count=1.0, step=2.0)  # build and steps: 7 s
    total = plan.seconds("cpu", "quick", 1.5, cores=2, probed={"mine/det": det})
    assert total == pytest.approx(1.5 * 3 / 2 + 7.0 + 2 * GROUP * 2.0 + rounds)
    # A step of 1 ms: blocks of 8 steps, as many rounds as the suites take (under the cap).
    short = plan.rounds_seconds("mine/det", "cpu", "quick", step=0.001)
    taken = max(6, PAIRED_ROUNDS_TAKEN["cpu"] * 12)
    assert short == pytest.approx(taken * 3 * (0.008 + 0.001 + turn))


def test_a_records_step_is_its_timing_median_else_its_fingerprint_steps_but_the_first() -> None:
    from detbench.run.slot_seconds import step_seconds

    assert step_seconds({"timing": {"median": 0.5}, "first_step_seconds": 3.0}) == 0.5
    paired = {
        "first_step_seconds": 3.0,
        "step_fingerprints": ["a", "b", "c"],
        "phases": {"fingerprint": 7.0},
    }
    assert step_seconds(paired) == pytest.approx(2.0)  # (7 - 3) / 2: the first carries set-up
    assert step_seconds({"first_step_seconds": 3.0, "step_fingerprints": ["a"]}) == 3.0
    assert step_seconds({"status": "unsupported"}) == 0.0


def test_a_cuda_group_is_priced_at_its_suites_measured_turns() -> None:
    """On the H200 (2026-11-28) the two members without cuDNN of an RNN group ran 0.4 s steps
    against 0.035 s with it: on CUDA those two set the group's rounds, where an unmeasured device
    keeps the block-only turn. A turn is its block and 2.5 ms, and the untimed step before a
    block but where the block is one step of 0.1 s or more: the native RNNs' 0.4 s steps."""
    from detbench.run.paired_plan import PairedPlan

    def plan(off: int) -> PairedPlan:
        return PairedPlan(groups=1, replicates=1, keys=("rnn/lstm",), workers=11, rounds=10,
                          block_seconds=0.01, fused=True, cudnn_off=off)  # fmt: skip

    with_cudnn = plan(0).rounds_seconds("rnn/lstm", "cuda", "full")
    native = plan(2).rounds_seconds("rnn/lstm", "cuda", "full")
    assert native > 1.5 * with_cudnn  # 2 of 11 members at ten times the step
    # at least 6 rounds, each member's 35 ms step timed once and warmed up once
    assert with_cudnn > 6 * 11 * 2 * 0.0347
    # the two without cuDNN: a block of one 0.4 s step, no untimed step before it
    from detbench.run.figures import PAIRED_ROUNDS_BY_SUITE as BY_SUITE

    rounds = max(6, BY_SUITE[("cuda", "full")]["rnn"] * 10)
    assert native - with_cudnn == pytest.approx(rounds * 2 * (0.3993 - 2 * 0.0347))
    # a short step's block takes its untimed step: BatchNorm's 0.4 ms steps in 10 ms blocks
    bn = PairedPlan(
        groups=1,
        replicates=1,
        keys=("batchnorm/bn",),
        workers=11,
        rounds=10,
        block_seconds=0.01,
        fused=True,
    )
    from detbench.run.figures import PAIRED_ROUNDS_BY_SUITE, PAIRED_TURN_SECONDS

    rounds = max(6, PAIRED_ROUNDS_BY_SUITE[("cuda", "full")]["batchnorm"] * 10)
    turn = 0.0098 + 0.0004 + PAIRED_TURN_SECONDS["cuda"]
    assert bn.rounds_seconds("batchnorm/bn", "cuda", "full") == pytest.approx(rounds * 11 * turn)
    # the CPU has no measured turns: the block and the turn's overhead, whatever the members
    assert plan(2).rounds_seconds("rnn/lstm", "cpu", "quick") == plan(0).rounds_seconds(
        "rnn/lstm", "cpu", "quick"
    )


def test_a_reference_check_is_priced_after_every_round() -> None:
    """``--reference-check 0.1`` on a CPU: each timed member's blocked_autorange after each round
    costs 1.14 x 0.1 s (measured: 0.114 s over 3,348 references, where the plan had priced
    nothing and the run took 7:17 against 1:34 planned); on a GPU, 9 of the member's blocks,
    whatever the seconds asked."""
    from dataclasses import replace

    from detbench.run.figures import PAIRED_ROUNDS_TAKEN
    from detbench.run.paired_plan import PairedPlan
    from detbench.run.paired_rounds import MIN_ROUNDS

    plain = PairedPlan(
        groups=1,
        replicates=1,
        keys=("custom/x",),
        workers=3,
        rounds=12,
        block_seconds=0.008,
        fused=True,
        timed=3,
    )
    checked = replace(plain, reference=0.1)
    rounds = 12 * PAIRED_ROUNDS_TAKEN["cpu"]
    extra = checked.rounds_seconds("custom/x", "cpu", "quick") - plain.rounds_seconds(
        "custom/x", "cpu", "quick"
    )
    assert extra == pytest.approx(max(MIN_ROUNDS, rounds) * 3 * 0.114)
    on_gpu = checked.rounds_seconds("custom/x", "cuda", "full") - plain.rounds_seconds(
        "custom/x", "cuda", "full"
    )
    assert on_gpu == pytest.approx(
        max(MIN_ROUNDS, 12 * PAIRED_ROUNDS_TAKEN["cuda"]) * 3 * 9 * 0.008
    )


def test_a_cpu_group_prices_the_turns_of_its_timed_workers_only() -> None:
    """On a CPU a group of eleven workers has three that take turns (default, det-algos and the
    A/A copy; the others make their verdicts and sit the rounds out): its rounds and warm-ups are
    priced for three, its start-up for all eleven."""
    from detbench.run.paired_plan import PairedPlan

    def plan(timed: int) -> PairedPlan:
        return PairedPlan(groups=1, replicates=1, keys=("ops/cumsum",), workers=11, rounds=12,
                          block_seconds=0.008, fused=True, warmup=0.05, timed=timed)  # fmt: skip

    every, three = plan(0), plan(3)
    assert every.turns == 11 and three.turns == 3
    rounds = every.rounds_seconds("ops/cumsum", "cpu", "quick")
    assert three.rounds_seconds("ops/cumsum", "cpu", "quick") == pytest.approx(rounds * 3 / 11)
    # the rest of the difference is eight warm-ups of 0.05 s; the start-ups are the same
    saved = every.seconds("cpu", "quick", 3.0, cores=2) - three.seconds(
        "cpu", "quick", 3.0, cores=2
    )
    assert saved == pytest.approx(rounds * 8 / 11 + 8 * 0.05)
    assert three.to_json()["timed_per_group"] == 3


def test_verdicts_side_by_side_cost_their_slowest_or_their_steps_one_after_another() -> None:
    """On a GPU a group's held verdicts (``run.paired.HELD_VERDICTS``) run at once: a group's
    costs the slowest of them, unless their steps, one process's kernels at a time, take longer.
    Training on the H200: 10 steps a verdict, 46.6 ms with cuDNN and 305 ms without."""
    import dataclasses

    from detbench.run.figures import PAIRED_BLOCK_STEP_SECONDS, VERDICT_STEPS
    from detbench.run.paired_plan import PairedPlan

    held = (("cudnn-det", True), ("det-algos", True), ("no-cudnn", False))
    keys = ("training/t", "conv/c", "mine/x")
    plan = PairedPlan(
        groups=1,
        replicates=1,
        keys=keys,
        workers=11,
        rounds=10,
        block_seconds=0.01,
        fused=True,
        held=held,
    )
    records = {"training/t": 2.0, "conv/c": 0.3, "mine/x": 5.0}
    slots = {(0, m): (0.0, dict(records, **({"conv/c": 0.4} if not on else {}))) for m, on in held}
    slots[(0, "default")] = (0.0, dict(records))  # the baseline's: never held
    saved = plan.held_saving(slots, "cuda", "full")
    steps = PAIRED_BLOCK_STEP_SECONDS[("cuda", "full")]
    n = VERDICT_STEPS[("cuda", "full")]["training"]
    work = 2 * n * steps[("training", True)][1] + min(2.0, n * steps[("training", False)][1])
    training = 3 * 2.0 - max(2.0, work)  # the steps one after another outlast the slowest
    conv = (0.3 + 0.3 + 0.4) - 0.4  # three steps of 1.5 ms or 43 ms: the slowest verdict
    assert work > 2.0
    assert saved == pytest.approx(training + conv)  # mine/x: no measured step, nothing saved
    assert dataclasses.replace(plan, held=()).held_saving(slots, "cuda", "full") == 0


def test_the_autotuned_modes_and_a_later_groups_baseline_join_the_held_verdicts() -> None:
    """bench joins the held verdicts of a workload whose step calls no convolution
    (``figures.CONVOLUTION_FREE``), never of one that does; the baseline joins them in every
    group of a workload but its first."""
    from detbench.run.figures import CONVOLUTION_FREE
    from detbench.run.paired_plan import PairedPlan

    free, conv = "bmm/bmm_moe_experts_fp32", "conv/conv2d_resnet50_stem"
    assert free in CONVOLUTION_FREE and conv not in CONVOLUTION_FREE
    held = (("cudnn-det", True), ("det-algos", True))
    plan = PairedPlan(
        groups=4,
        replicates=2,
        keys=(free, conv, free, conv),
        workers=5,
        rounds=10,
        block_seconds=0.01,
        fused=True,
        held=held,
        autotuned=(("bench", True),),
        baseline=(("default", True),),
    )
    modes = ("default", "cudnn-det", "det-algos", "bench")
    slots = {(r, m): (0.0, {free: 0.2, conv: 0.3}) for r in (0, 1) for m in modes}
    # Each verdict's three steps (6 ms for bmm, 4.5 ms for conv) are far below its 0.2-0.3 s:
    # a held set costs its slowest, and saves the rest.
    first = (3 - 1) * 0.2 + (2 - 1) * 0.3  # bmm: cudnn-det, det-algos, bench; conv: two
    second = (4 - 1) * 0.2 + (3 - 1) * 0.3  # and the baseline in each
    assert plan.held_saving(slots, "cuda", "full") == pytest.approx(first + second)
    alone = PairedPlan(**{**plan.__dict__, "autotuned": (), "baseline": ()})
    assert alone.held_saving(slots, "cuda", "full") == pytest.approx(2 * (0.2 + 0.3))


def test_a_long_steps_warm_up_is_priced_at_its_first_group_of_steps() -> None:
    """A warm-up ends at its ceiling, or after its first group of three samples of a step at
    least (``worker.warmup``): on the H200's figures a cuDNN-off RNN member (0.4 s steps) warms
    up for 1.2 s, far past the 0.05 s ceiling, and a cuDNN BatchNorm member (0.5 ms) at the
    ceiling."""
    from detbench.run.figures import PAIRED_BLOCK_STEP_SECONDS
    from detbench.run.paired_plan import PairedPlan
    from detbench.worker.warmup import GROUP

    plan = PairedPlan(
        groups=1,
        replicates=1,
        keys=("rnn/r",),
        workers=11,
        rounds=10,
        block_seconds=0.01,
        fused=True,
        warmup=0.05,
        cudnn_off=2,
    )
    steps = PAIRED_BLOCK_STEP_SECONDS[("cuda", "full")]
    on, off = steps[("rnn", True)][1], steps[("rnn", False)][1]
    assert GROUP * off > 1.0 and GROUP * on > 0.05
    want = 8 * GROUP * on + 2 * GROUP * off  # ten members but the A/A copy, two without cuDNN
    assert plan.warm_ups("rnn/r", "cuda", "full") == pytest.approx(want)
    assert plan.warm_ups("batchnorm/b", "cuda", "full") == pytest.approx(10 * 0.05)
    # A suite no run measured: a probed step of 0.2 s, else the ceiling.
    assert plan.warm_ups("mine/x", "cuda", "full", step=0.2) == pytest.approx(10 * GROUP * 0.2)
    assert plan.warm_ups("mine/x", "cuda", "full") == pytest.approx(10 * 0.05)


def test_a_plan_without_any_measured_figure_says_it_is_a_guess(tmp_path: Path) -> None:
    """No run has measured the suites on a CPU at the full profile: the plan says every record
    is at the model's guess and that the estimate can be several times off (a CPU full conv run
    here said about 1:10 left after its second group, against 3:50 planned). At the quick
    profile, measured by ``make bench``, it does not."""
    guess = "every record is priced at the model's guess"
    for profile, said in (("full", True), ("quick", False)):
        args = ["run", "--suite", "conv", "--device", "cpu", "--profile", profile, "--dry-run"]
        r = _detbench(*args, "--out", str(tmp_path / profile), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (guess in r.stdout) is said, r.stdout
        assert not (tmp_path / profile).exists()
