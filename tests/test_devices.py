"""``detbench run --devices``: workers side by side, one per device at a time, with real worker
processes (``--devices cpu,cpu`` here; GPUs where there are two). The plan spreads the
replicates of each mode over the devices; every record says where it ran; a crash on one device
leaves the other going; the verdicts equal a serial run's; bad lists are refused before anything
runs; ``same bits across GPUs`` is computed from the records."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench import analysis
from detbench.cli.main import main
from detbench.core.modes import MODES, get_mode
from detbench.report import devices
from detbench.run.schedule import make_plan
from detbench.store.paired import iter_paired
from detbench.store.results import load_env, load_results

from .conftest import WORKLOADS, detbench_cli

#: Exact workloads (the same bits in every process, whatever the threads), then one that aborts
#: its worker: last in its worker, so the crash costs no extra worker.
SELECTION = [
    "--workload", str(WORKLOADS / "resumable.py"), "--workload", str(WORKLOADS / "crashing.py"),
    "--only", "resumable/mlp_step", "--only", "resumable/tiny_training",
    "--only", "crashing/aborts",
]  # fmt: skip
RUN = [
    "run", *SELECTION, "--mode", "default", "--mode", "det-algos", "--replicates", "2",
    "--budget", "0.02", "--no-report",
]  # fmt: skip


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("devices") / "parallel"
    proc = detbench_cli(*RUN, "--devices", "cpu,cpu", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def serial(resumable_serial_run: Path) -> Path:
    """The session's serial run of resumable.py in the same modes and replicates (its timing
    budget differs, which no verdict or fingerprint depends on)."""
    return resumable_serial_run


# -- the plan --------------------------------------------------------------------------------


def test_replicates_of_a_mode_spread_over_the_devices_and_the_load_balances() -> None:
    keys = ["s/a", "s/b"]
    for n_modes, replicates, lanes in ((2, 2, 2), (10, 3, 8), (10, 3, 2), (3, 5, 4)):
        plan = make_plan(keys, list(MODES[:n_modes]), replicates, seed=0, lanes=lanes)
        by_mode: dict[str, list[int]] = defaultdict(list)
        for s in plan.slots:
            by_mode[s.mode.name].append(s.lane)
        for used in by_mode.values():  # never stacked while another device has none
            assert len(set(used)) == min(replicates, lanes)
            assert max(Counter(used).values()) - min(Counter(used).values()) <= 1
        load = Counter(s.lane for s in plan.slots)
        assert max(load.values()) - min(load.values()) <= 1, (n_modes, replicates, lanes)
    # One device: today's plan, every slot on it.
    assert {s.lane for s in make_plan(keys, list(MODES), 3, seed=0).slots} == {0}


def test_a_resumed_plan_spreads_beside_the_kept_records() -> None:
    modes = [get_mode("default")]
    # Replicate 0 of a/x ran on device 1 before the interruption; a/y had no record yet.
    done = {("s/x", "default", 0)}
    plan = make_plan(["s/x", "s/y"], modes, 2, seed=0, done=done, lanes=2,
                     placed={("s/x", "default", 0): 1})  # fmt: skip
    lane = {(s.replicate, s.keys): s.lane for s in plan.slots}
    assert lane[(0, ("s/y",))] == 1  # the rest of replicate 0 where it began
    assert lane[(1, ("s/x", "s/y"))] == 0  # replicate 1 beside it
    # The same inputs give the same plan (a --dry-run of a resume shows what will run).
    again = make_plan(["s/x", "s/y"], modes, 2, seed=0, done=done, lanes=2,
                      placed={("s/x", "default", 0): 1})  # fmt: skip
    assert again == plan


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--devices", "cpu,cuda:0"], "mixes cpu and cuda"),
        (["--devices", "gpu0"], "unknown device 'gpu0'"),
        (["--devices", "cuda"], "unknown device 'cuda'"),
        (["--devices", "cpu,,cpu"], "unknown device ''"),
        (["--devices", "cuda:0,cuda:0"], "cuda:0 is listed twice"),
        (["--devices", f"cuda:{torch.cuda.device_count()}"], "cuda"),
        (["--devices", ",".join(["cpu"] * ((os.cpu_count() or 1) + 1))], "cores"),
        (["--device", "cpu", "--devices", "cuda:0"], "but --device cpu says otherwise"),
        (["run", "--resume", "X", "--devices", "cpu"], "give no --devices with it"),
    ],
)
def test_bad_devices_are_refused_before_anything_runs(
    args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(args if args[0] == "run" else [*RUN, "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("detbench: error: ") and says in err, err
    assert not out.exists()


def test_dry_run_shows_which_device_runs_which_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main([*RUN, "--devices", "cpu,cpu", "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "2 groups of 3 fresh workers (one per replicate on each device)" in text
    lines = [line.strip() for line in text.splitlines()]
    lanes = [line for line in lines if line.startswith(("cpu:0 ", "cpu:1 "))]
    assert len(lanes) == 2 and all("3 groups: " in line for line in lanes)
    for key in ("resumable/mlp_step", "resumable/tiny_training", "crashing/aborts"):
        # each device times one replicate of each workload
        assert all(line.count(key) == 1 for line in lanes)
    assert "not comparable with a serial run's" in text
    assert not out.exists()


# -- a real run ----------------------------------------------------------------------------


@pytest.mark.slow  # two whole runs end to end: make test-slow and CI run it
def test_records_say_where_they_ran_and_replicates_span_both_devices(parallel: Path) -> None:
    recs = _records(parallel)
    assert len(recs) == 3 * 2 * 2
    assert {r["device_name"] for r in recs} == {"cpu:0", "cpu:1"}
    assert {r["device"] for r in recs} == {"cpu"}  # the device type, as before
    spans: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in recs:
        spans[(r["workload"], r["mode"])].add(r["device_name"])
    assert all(s == {"cpu:0", "cpu:1"} for s in spans.values()), spans
    # Each parallel CPU worker had its share of the cores, recorded with the run.
    env = load_env(parallel)
    share = max(1, torch.get_num_threads() // 2)
    assert env["options"]["devices"] == ["cpu:0", "cpu:1"]
    assert env["options"]["threads_per_worker"] == share
    assert "not comparable with a serial run's" in env["parallel_timing_note"]
    assert sorted(env["device_workers"]) == ["cpu:0", "cpu:1"]
    assert {r["num_threads"] for r in recs if r["status"] == "ok"} == {share}
    # Timed paired: each device timed its own groups, and every record that ran has its cost.
    lines = list(iter_paired(parallel))
    assert {o["device_name"] for o in lines} == {"cpu:0", "cpu:1"}
    for o in lines:  # a group's members all on one device, its replicates on both
        same = [
            x for x in lines if (x["workload"], x["replicate"]) == (o["workload"], o["replicate"])
        ]
        assert {x["device_name"] for x in same} == {o["device_name"]}
    ok = load_results(parallel).query("status == 'ok'")
    assert len(ok) == 8 and ok["seconds_per_step"].notna().all()


@pytest.mark.slow  # two whole runs end to end: make test-slow and CI run it
def test_a_crash_on_one_device_leaves_the_other_going(parallel: Path) -> None:
    recs = _records(parallel)
    crashed = [r for r in recs if r["workload"] == "aborts"]
    assert len(crashed) == 4 and all(r["status"] == "crashed" for r in crashed)
    assert {r["device_name"] for r in crashed} == {"cpu:0", "cpu:1"}
    assert all("SIGABRT" in r["message"] for r in crashed)
    ok = [r for r in recs if r["workload"] != "aborts"]
    assert len(ok) == 8 and all(r["status"] == "ok" for r in ok)


@pytest.mark.slow  # two whole runs end to end: make test-slow and CI run it
def test_the_verdicts_equal_a_serial_runs(parallel: Path, serial: Path) -> None:
    cols = ["suite", "workload", "mode", "verdict", "ok", "distinct_fingerprints"]
    both = ["mlp_step", "tiny_training"]  # the workloads the two runs share

    def verdicts(d: Path) -> Any:
        v = analysis.verdicts(load_results(d))
        return v[v["workload"].isin(both)][cols].reset_index(drop=True)

    assert len(verdicts(serial)) == 4 and verdicts(serial).equals(verdicts(parallel))
    fp = {(r["workload"], r["mode"], r["replicate"]): r["fingerprint"] for r in _records(serial)}
    for r in _records(parallel):
        if r["workload"] not in both:
            continue
        assert r["fingerprint"] == fp[(r["workload"], r["mode"], r["replicate"])]
        if r["workload"] == "mlp_step":  # the FLOPs of replicate 1 come from replicate 0's count
            assert r["flops_per_step"] is not None
    # A serial run ran on one device: no cross-device verdict, no section.
    assert {r["device_name"] for r in _records(serial)} == {"cpu:0"}
    assert devices.blocks(load_results(serial), load_env(serial)) == []


@pytest.mark.slow  # two whole runs end to end: make test-slow and CI run it
def test_same_bits_across_devices_is_computed(parallel: Path) -> None:
    t = devices.table(load_results(parallel)).set_index(["workload", "mode"])
    for w in ("mlp_step", "tiny_training"):
        for m in ("default", "det-algos"):
            assert t.loc[(w, m), "same_bits"] is True
            assert t.loc[(w, m), "devices"] == ("cpu:0", "cpu:1")
    assert t.loc[("aborts", "default"), "same_bits"] is None
    assert "did not run (crashed)" in str(t.loc[("aborts", "default"), "note"])
    from detbench.report.render import to_markdown

    md = to_markdown(devices.blocks(load_results(parallel), load_env(parallel)), parallel)
    assert "## Same bits across devices" in md
    assert "4 of 4 (workload, mode) that ran on more than one of the devices gave the same" in md


def test_the_verdict_tells_device_differences_from_run_to_run_ones() -> None:
    import pandas as pd

    def rec(mode: str, device: str, fp: str) -> dict[str, Any]:
        return {"suite": "s", "workload": "w", "mode": mode, "status": "ok",
                "fingerprint": fp, "device_name": device, "settings_changed": []}  # fmt: skip

    df = pd.DataFrame([
        rec("default", "cuda:0", "a"), rec("default", "cuda:0", "a"),
        rec("default", "cuda:1", "b"), rec("default", "cuda:1", "b"),
        rec("det-algos", "cuda:0", "a"), rec("det-algos", "cuda:0", "c"),
        rec("det-algos", "cuda:1", "a"), rec("bench", "cuda:1", "a"), rec("bench", "cuda:1", "a"),
    ])  # fmt: skip
    t = devices.table(df).set_index("mode")
    assert t.loc["default", "same_bits"] is False
    assert "each device gave the same bits every time" in str(t.loc["default", "note"])
    assert t.loc["det-algos", "same_bits"] is False
    assert "run-to-run" in str(t.loc["det-algos", "note"])
    assert t.loc["bench", "same_bits"] is None and t.loc["bench", "note"] == "ran on cuda:1 only"


# -- GPUs ----------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "resumable.py"), "--only", "resumable/mlp_step",
        "--mode", "default", "--mode", "det-algos", "--replicates", "2", "--budget", "0.05",
        "--devices", "cuda:0,cuda:1", "--no-report", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = _records(out)
    assert {r["device"] for r in recs} == {"cuda"}
    assert {r["device_name"] for r in recs} == {"cuda:0", "cuda:1"}
    env = load_env(out)
    uuids = {w.get("gpu_uuid") for w in env["device_workers"].values()}
    assert len(uuids) == 2  # each device's workers saw their own GPU
    t = devices.table(load_results(out))
    assert t["same_bits"].notna().all()  # integer-valued math: the same bits on both GPUs
    assert (t["same_bits"] == True).all()  # noqa: E712


def test_a_gpu_index_beyond_those_torch_sees_is_refused(tmp_path: Path) -> None:
    from detbench.run.config import RunConfig, RunError, check_devices

    n = torch.cuda.device_count()
    config = RunConfig(out=tmp_path, device="cuda", devices=[f"cuda:{n}"])
    with pytest.raises(RunError, match=f"no cuda:{n} here: torch sees {n} CUDA GPU"):
        check_devices(config, cuda_available=True)
