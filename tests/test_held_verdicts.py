"""Verdicts side by side (issue 49): on a device of ``paired.HELD_VERDICTS`` the members of a
group that owe a verdict make it at once (``hold KEY``) once the baseline's copy is prepared,
and warm up their kept step one at a time at their turn (``warm KEY``); an autotuned mode joins
them where the step calls no convolution, and the baseline where an earlier group of the
workload showed what a copy holds. A real paired run on the CPU with the CPU let in, against the
same run without, both with each mode timed as itself as on a GPU (on a CPU cudnn.benchmark
acts on nothing, and bench is timed as default): the same verdicts, record for record, the same
groups in ``paired.jsonl``, and the runner's count of held verdicts says which path ran. A held
verdict that fails is that member's record and the group goes on."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from detbench.core import acts
from detbench.core.modes import get_mode
from detbench.core.workload import builtin_suite_files, load_file
from detbench.run import paired
from detbench.run.config import RunConfig
from detbench.run.figures import CONVOLUTION_FREE
from detbench.run.probe import probe_ops
from detbench.run.runner import prepare
from tests.conftest import WORKLOADS, requires_cuda

#: A workload that raises under deterministic algorithms alone: the baseline (default) prepares
#: it, and det-algos' verdict, held, fails.
FAILS = """
import torch
import detbench


@detbench.workload(suite="heldfail", items_per_step=8)
def raises_when_deterministic(ctx):
    x = torch.arange(8.0, device=ctx.device)

    def step():
        if torch.are_deterministic_algorithms_enabled():
            raise ValueError("deliberate failure under deterministic algorithms")
        return [torch.cumsum(x, 0)]

    return step


@detbench.workload(suite="heldconv", items_per_step=4)
def integer_conv(ctx):
    # Integers in float64: every order of the additions gives the same bits.
    x = torch.randint(-3, 4, (4, 2, 16), device=ctx.device).double()
    w = torch.randint(-3, 4, (3, 2, 5), device=ctx.device).double()

    def step():
        return [torch.nn.functional.conv1d(x, w)]

    return step
"""
CONV = "heldconv/integer_conv"
KEYS = [
    "resumable/mlp_step",
    "resumable/tiny_training",
    "heldfail/raises_when_deterministic",
    CONV,
]
MODES = ("default", "bench", "det-algos")
#: The suites of the core matrix.
SUITES = ("conv", "rnn", "batchnorm", "bmm", "training")
REPLICATES = 2


def _run(
    out: Path, fails: Path, device: str = "cpu", modes: tuple[str, ...] = MODES
) -> tuple[dict[str, Any], list[dict[str, Any]], list[Any]]:
    """(the paired phase's stats, the verdict records, paired.jsonl's lines) of one run."""
    config = RunConfig(
        out=out,
        workload_files=[WORKLOADS / "resumable.py", fails],
        only=list(KEYS),
        modes=[get_mode(m) for m in modes],
        replicates=REPLICATES,
        device=device,
        rounds=6,
        budget=0.02,
    )
    runner = prepare(config, io.StringIO())
    stats = runner.run()
    assert stats.paired is not None
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    lines = [json.loads(x) for x in (out / "paired.jsonl").read_text().splitlines()]
    return stats.paired, recs, lines


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("held")
    fails = root / "heldfail.py"
    fails.write_text(FAILS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(acts, "timed_as", lambda modes, device: {m.name: m.name for m in modes})
        plain = _run(root / "plain", fails)
        mp.setattr(paired, "HELD_VERDICTS", frozenset({"cpu", "cuda"}))
        held = _run(root / "held", fails)
    return {"plain": plain, "held": held}


def _by_key(recs: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {(f"{r['suite']}/{r['workload']}", r["mode"], r["replicate"]): r for r in recs}


def test_held_verdicts_are_the_verdicts_made_one_at_a_time(runs: dict[str, Any]) -> None:
    (plain_stats, plain, _), (held_stats, held, _) = runs["plain"], runs["held"]
    # Held in every group: det-algos, and bench but in the group of the workload that calls a
    # convolution (the A/A copy owes none). The baseline prepares alone in a workload's first
    # group, and is held in its second. Without the CPU let in, none was.
    first = 2 * (len(KEYS) - 1) + 1
    assert held_stats["held"] == first + first + len(KEYS)
    assert plain_stats["held"] == 0
    n = len(KEYS) * REPLICATES * len(MODES)
    assert held_stats["verdicts"] == plain_stats["verdicts"] == n
    a, b = _by_key(plain), _by_key(held)
    assert len(a) == len(plain) == n and a.keys() == b.keys()
    for k, r in a.items():
        got = b[k]
        for f in ("status", "step_fingerprints", "fingerprint_method", "mode_position"):
            assert got[f] == r[f], (k, f, got[f], r[f])
        assert got["worker_pid"] != r["worker_pid"]  # two runs, not one read twice
        fails = k[0].startswith("heldfail/") and k[1] == "det-algos"
        assert got["status"] == ("error" if fails else "ok"), got
        # What the baseline's verdict saw decides whether bench is held: a convolution or not.
        if not fails:
            assert got["ops_called"] == (["convolution"] if k[0] == CONV else []), got


def test_every_group_has_its_lines_and_the_held_steps_are_timed(runs: dict[str, Any]) -> None:
    _, recs, lines = runs["held"]
    verdicts = _by_key(recs)
    groups: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for x in lines:
        key = f"{x['suite']}/{x['workload']}"
        groups.setdefault((key, x["replicate"]), set()).add((x["mode"], x["copy"]))
        rec = verdicts[(key, x["mode"], x["replicate"])]
        if x["copy"] == 0 and rec["status"] != "ok":
            assert x["status"] == "not_timed", x
            continue
        assert x["status"] == "ok", x
        assert len(x["samples"]) >= 6 and x["timing"]["median"] > 0
        if x["copy"] == 0:  # the worker that made the verdict timed it, warmed up after
            assert x["worker_pid"] == rec["worker_pid"] and x["same_bits"] is True
    every = {("default", 0), ("bench", 0), ("det-algos", 0), ("default", 1)}
    assert groups == {(k, r): every for k in KEYS for r in range(REPLICATES)}


def test_a_held_verdict_that_fails_is_its_record_and_the_group_goes_on(
    runs: dict[str, Any],
) -> None:
    _, recs, lines = runs["held"]
    failed = [r for r in recs if r["workload"] == "raises_when_deterministic"]
    assert {(r["mode"], r["status"]) for r in failed} == {
        ("default", "ok"),
        ("bench", "ok"),
        ("det-algos", "error"),
    }
    assert all("deliberate failure" in r["message"] for r in failed if r["mode"] == "det-algos")
    mine = [x for x in lines if x["workload"] == "raises_when_deterministic"]
    assert {(x["mode"], x["copy"], x["status"]) for x in mine} == {
        ("default", 0, "ok"),
        ("bench", 0, "ok"),
        ("default", 1, "ok"),
        ("det-algos", 0, "not_timed"),
    }
    # No worker was lost on it: one per member and replicate, none spawned afresh.
    assert runs["held"][0]["workers"] == (len(MODES) + 1) * REPLICATES


@requires_cuda
def test_on_a_gpu_the_verdicts_go_side_by_side_by_default(tmp_path: Path) -> None:
    """As a GPU host runs it (``HELD_VERDICTS`` as shipped): of default, cudnn-det and
    det-algos, the two that are not the baseline are held in every group, and the baseline in
    a workload's second group; each held member times the step its verdict built."""
    fails = tmp_path / "heldfail.py"
    fails.write_text(FAILS)
    modes = ("default", "cudnn-det", "det-algos")
    stats, recs, lines = _run(tmp_path / "gpu", fails, device="cuda", modes=modes)
    # Two in every group, and the baseline in each workload's second.
    assert stats["held"] == 2 * len(KEYS) * REPLICATES + len(KEYS)
    verdicts = _by_key(recs)
    assert len(verdicts) == len(KEYS) * REPLICATES * len(modes)
    for x in lines:
        rec = verdicts[(f"{x['suite']}/{x['workload']}", x["mode"], x["replicate"])]
        if x["copy"] == 0 and rec["status"] == "ok":
            assert x["status"] == "ok" and x["same_bits"] is True, x


def test_the_plans_convolution_free_workloads_are_those_a_step_shows() -> None:
    """``figures.CONVOLUTION_FREE``, which prices bench's held verdicts on paper, is what one
    step of each core workload shows today (``worker.ops.OpsSeen``, on this CPU)."""
    files = builtin_suite_files()
    workloads = [w for s in SUITES for w in load_file(files[s])]
    probed = probe_ops(workloads, [str(files[s]) for s in SUITES], "cpu", "quick", 0)
    assert probed.failed == {} and len(probed.calls) == len(workloads)
    assert set(probed.calls) - set(probed.calling("convolution")) == CONVOLUTION_FREE
    assert "conv/conv2d_resnet50_stem" in probed.calling("convolution")
