"""`detbench run --shard K/N` and `detbench merge`: the shards of a real CPU run of two small
suites, merged, are the run made whole; merge refuses what is not one run's shards, in one line,
writing nothing; runs from several machines become one set with each record's machine named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from detbench import analysis
from detbench.core.modes import get_mode
from detbench.core.workload import builtin_suite_files, load_file, suites_dir
from detbench.run.config import suite_digests
from detbench.run.schedule import make_plan, shard_groups, shard_slots
from detbench.store.identity import source_digest
from detbench.store.paired import iter_paired
from detbench.store.results import load_results

from .conftest import ROOT, detbench_cli
from .synthetic import env, record, write_run

#: Two small suites, two workloads each, two modes, two replicates: 4 workers, 16 records.
SELECTION = [
    "--suite", "bmm", "--suite", "batchnorm", "--only", "bmm/bmm_attention_scores_fp32",
    "--only", "bmm/bmm_moe_experts_fp32", "--only", "batchnorm/batchnorm1d_train_quartznet",
    "--only", "batchnorm/batchnorm2d_eval_resnet50_stage1", "--mode", "default", "--mode",
    "det-algos", "--replicates", "2", "--budget", "0.02", "--device", "cpu", "--no-report",
]  # fmt: skip


def identity(d: Path) -> set[tuple[str, str, str, int]]:
    df = load_results(d)
    return set(zip(df["suite"], df["workload"], df["mode"], df["replicate"].astype(int),
                   strict=True))  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The run made whole, and its shards 1/2 and 2/2."""
    d = tmp_path_factory.mktemp("shards")
    out = {}
    for name, extra in (("whole", []), ("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"])):
        proc = detbench_cli("run", *SELECTION, *extra, "--out", str(d / name))
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[name] = d / name
    return out


def test_shards_deal_whole_groups() -> None:
    """With a paired phase (the default), every (workload, replicate) group is in exactly one
    shard with all its modes, the deal is the same each time, and the shards' records are
    balanced: a group's modes are timed side by side, so a shard never splits one."""
    modes = [get_mode(m) for m in ("default", "det-algos", "no-cudnn")]
    keys = ["s/a", "s/b", "s/c"]
    full = make_plan(keys, modes, 3, 0)
    deals = [shard_groups(full, (k, 2)) for k in (1, 2)]
    groups = {(k, r) for k in keys for r in range(3)}
    assert deals[0] | deals[1] == groups and not deals[0] & deals[1]
    assert [len(d) for d in deals] == [5, 4]
    assert deals == [shard_groups(make_plan(keys, modes, 3, 0), (k, 2)) for k in (1, 2)]
    mine = make_plan(keys, modes, 3, 0, shard=(2, 2), by_group=True)
    records = {(k, s.mode.name, s.replicate) for s in mine.slots for k in s.keys}
    assert records == {(k, m.name, r) for k, r in deals[1] for m in modes}


def test_an_earlier_runs_shards_deal_whole_workers() -> None:
    """An earlier detbench's shards of a run that timed nothing paired dealt whole workers, as
    its plan is read back: every (replicate, mode) in exactly one shard, the same deal each
    time, the shards' records balanced."""
    modes = [get_mode(m) for m in ("default", "det-algos", "no-cudnn")]
    full = make_plan(["s/a", "s/b"], modes, 3, 0)
    deals = [shard_slots(full, (k, 2)) for k in (1, 2)]
    workers = {(s.replicate, s.mode.name) for s in full.slots}
    assert deals[0] | deals[1] == workers and not deals[0] & deals[1]
    assert [len(d) for d in deals] == [5, 4]
    assert deals == [shard_slots(make_plan(["s/a", "s/b"], modes, 3, 0), (k, 2)) for k in (1, 2)]
    mine = make_plan(["s/a", "s/b"], modes, 3, 0, shard=(2, 2), by_group=False)
    assert {(s.replicate, s.mode.name) for s in mine.slots} == deals[1]


def test_more_shards_than_groups_is_refused() -> None:
    proc = detbench_cli("run", *SELECTION, "--shard", "9/9", "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "detbench: error: --shard 9/9: the plan has 8 (workload, replicate) groups, fewer than 9 "
        "shards; give at most 8"
    )


@pytest.mark.slow  # real runs, sharded and whole: test-slow (CI runs it)
def test_merged_shards_are_the_whole_run(runs: dict[str, Path], tmp_path: Path) -> None:
    assert identity(runs["s1"]) and identity(runs["s2"])
    assert not identity(runs["s1"]) & identity(runs["s2"])
    proc = detbench_cli("merge", str(tmp_path / "m"), str(runs["s2"]), str(runs["s1"]),
                        "--no-report")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"merged the shards of one run: 16 records in {tmp_path / 'm'}"
    merged, whole = load_results(tmp_path / "m"), load_results(runs["whole"])
    assert identity(tmp_path / "m") == identity(runs["whole"])
    cols = ["suite", "workload", "mode", "verdict"]
    assert (analysis.verdicts(merged)[cols].values.tolist()
            == analysis.verdicts(whole)[cols].values.tolist())  # fmt: skip
    # Exact workloads: the same bits as the whole run's, record by record.
    key = ["workload", "mode", "replicate"]
    assert (merged.sort_values(key)["fingerprint"].tolist()
            == whole.sort_values(key)["fingerprint"].tolist())  # fmt: skip
    assert set(merged["shard"]) == {"1/2", "2/2"}
    # FLOPs come from each (workload, mode)'s first replicate, wherever it ran.
    flops = lambda df: df.sort_values(key)["flops_per_step"].fillna(-1).tolist()  # noqa: E731
    assert flops(merged) == flops(whole)
    doc = json.loads((tmp_path / "m" / "env.json").read_text())
    assert [s["shard"] for s in doc["shards"]] == ["1/2", "2/2"]
    assert doc["options"]["shard"] is None and doc["options"]["shards"] == 2
    assert {s["node"] for s in doc["shards"]} == set(merged["node"])

    # The costs: each shard timed its own groups, and the merged run has every group's lines,
    # each saying its shard, and a timing for every record, as the whole run has.
    def lines(d: Path) -> set[tuple[str, str, int, int]]:
        return {(o["workload"], o["mode"], o["replicate"], o["copy"]) for o in iter_paired(d)}

    assert not lines(runs["s1"]) & lines(runs["s2"])
    assert lines(tmp_path / "m") == lines(runs["whole"]) == lines(runs["s1"]) | lines(runs["s2"])
    assert {o["shard"] for o in iter_paired(tmp_path / "m")} == {"1/2", "2/2"}
    assert merged["seconds_per_step"].notna().all() and whole["seconds_per_step"].notna().all()


@pytest.mark.slow  # it reads the real runs above
def test_merge_refusals_write_nothing(runs: dict[str, Path], tmp_path: Path) -> None:
    twin = tmp_path / "twin"
    shutil.copytree(runs["s1"], twin)
    out = tmp_path / "out"

    def refused(*dirs: Path) -> str:
        proc = detbench_cli("merge", str(out), *map(str, dirs))
        assert proc.returncode == 2 and not out.exists(), proc.stdout
        (line,) = proc.stderr.strip().splitlines()
        return line

    assert refused(runs["s1"], twin) == (f"detbench: error: {runs['s1']} and {twin} are both "
                                         "shard 1/2: they overlap")  # fmt: skip
    other = tmp_path / "other"
    shutil.copytree(runs["s2"], other)
    doc = json.loads((other / "env.json").read_text())
    doc["options"]["seed"] = 1
    (other / "env.json").write_text(json.dumps(doc))
    assert refused(runs["s1"], other) == (
        f"detbench: error: the shards' options differ in seed: 0 ({runs['s1']}) vs 1 ({other}); "
        "merge only the shards of one run"
    )
    doc["options"]["seed"] = 0
    doc["worker"]["cpu_capability"] = "DEFAULT"
    (other / "env.json").write_text(json.dumps(doc))
    assert refused(runs["s1"], other).startswith(
        "detbench: error: the shards ran in different environments: cpu_capability"
    )
    # Another source of a suite: the runs record each suite's source digest.
    doc["worker"]["cpu_capability"] = json.loads((runs["s1"] / "env.json").read_text())[
        "worker"]["cpu_capability"]  # fmt: skip
    assert set(doc["options"]["suite_sha256"]) == {"bmm", "batchnorm"}
    doc["options"]["suite_sha256"] = {**doc["options"]["suite_sha256"], "bmm": "0" * 64}
    (other / "env.json").write_text(json.dumps(doc))
    assert refused(runs["s1"], other) == (
        f"detbench: error: the shards ran another source of the suite bmm: its files differ "
        f"between {runs['s1']} and {other}; merge only the shards of one run"
    )
    # One workload hashed over other steps (a suite edited between shards of a run that did not
    # record its source): two workloads, not one.
    doc["options"]["suite_sha256"] = json.loads((runs["s1"] / "env.json").read_text())[
        "options"]["suite_sha256"]  # fmt: skip
    (other / "env.json").write_text(json.dumps(doc))
    recs = [json.loads(x) for x in (other / "results.jsonl").read_text().splitlines()]
    for r in recs:
        if r["workload"] == "bmm_moe_experts_fp32" and r["step_fingerprints"]:
            r["step_fingerprints"] = r["step_fingerprints"][:2]
    (other / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert refused(runs["s1"], other) == (
        f"detbench: error: the shards ran bmm/bmm_moe_experts_fp32 as two different workloads: "
        f"hashed steps 3 ({runs['s1']}) vs 2 ({other}); merge only the shards of one run"
    )
    assert refused(runs["s1"]) == ("detbench: error: give at least two directories: the shards "
                                   "of a run, or runs from several machines")  # fmt: skip
    proc = detbench_cli("merge", str(runs["whole"]), str(runs["s1"]), str(runs["s2"]))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"detbench: error: {runs['whole']} holds a finished detbench run (16 records): give a new "
        "OUT (nothing was changed)"
    )


@pytest.mark.slow  # it reads the real runs above
def test_a_set_keeps_each_machines_costs(runs: dict[str, Path], tmp_path: Path) -> None:
    """A whole run and a run's two shards, merged as two machines: each record's timing is its
    own machine's, from that machine's ``paired.jsonl`` lines, which name it."""
    out = tmp_path / "set"
    dirs = [str(runs[name]) for name in ("whole", "s1", "s2")]
    proc = detbench_cli("merge", str(out), *dirs, "--no-report")
    assert proc.returncode == 0, proc.stderr
    df = load_results(out)
    names = sorted(set(df["machine"]))
    assert len(names) == 2 and {o["machine"] for o in iter_paired(out)} == set(names)
    key = ["workload", "mode", "replicate"]
    whole = load_results(runs["whole"]).sort_values(key)["seconds_per_step"].tolist()
    parts = pd.concat([load_results(runs["s1"]), load_results(runs["s2"])])
    shards = parts.sort_values(key)["seconds_per_step"].tolist()
    got = {n: df[df["machine"] == n].sort_values(key)["seconds_per_step"].tolist() for n in names}
    assert sorted(got.values()) == sorted([whole, shards]) and whole != shards


@pytest.mark.slow  # whole workers started: make test-slow and CI run it
def test_runs_from_several_machines_become_a_set(tmp_path: Path) -> None:
    """Each record names its machine; compare reads the set as one run per machine; its report
    opens with the Across machines section."""
    a = write_run(tmp_path / "h100", [record("w", "default", r, "x", [0.01] * 3)
                                      for r in range(2)], env(gpu="H100"))  # fmt: skip
    b = write_run(tmp_path / "a100", [record("w", "default", r, "y", [0.01] * 3)
                                      for r in range(2)], env(gpu="A100"))  # fmt: skip
    out = tmp_path / "set"
    proc = detbench_cli("merge", str(out), str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (f"merged runs from 2 machines (h100, a100): 4 records "
                                           f"in {out}")  # fmt: skip
    df = load_results(out)
    assert df["machine"].tolist() == ["h100", "h100", "a100", "a100"]
    proc = detbench_cli("compare", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["groups"] == [[f"{out}:h100"], [f"{out}:a100"]]
    assert row["differs"] == {"gpu": ["H100", "A100"]}
    md = (out / "report.md").read_text()
    assert md.startswith("# detbench report: 2 machines")
    assert "## Across machines" in md and "## Machine h100" in md
    assert "| s/w | default | DIFFERENT bits | A \\| B | GPU: H100 \\| A100 |" in md


def test_a_suites_source_digest_covers_its_helper_files() -> None:
    """A built-in suite's digest is over its file and the helper files it loads
    (``suite_helper``): editing suites/_decoder.py changes the invariance suite's digest."""
    suites = builtin_suite_files()
    ws = load_file(suites["invariance"]) + load_file(suites["bmm"])
    d = suites_dir()
    assert suite_digests(ws) == {
        "bmm": source_digest([suites["bmm"]]),
        "invariance": source_digest([suites["invariance"], d / "_batched.py", d / "_decoder.py"]),
    }


def test_machines_that_ran_a_workload_differently_are_noted(tmp_path: Path) -> None:
    """The published H100 run hashed training over 20 steps, the H200 run over 10: merged as a
    set, with a note that says so and what compare will do with them."""
    old = ROOT / "results" / "20261124-085144-cuda-full-conv-rnn-training"
    h200 = ROOT / "results" / "20261126-040517-cuda-full-h200-partial"
    out = tmp_path / "set"
    proc = detbench_cli("merge", str(out), str(old), str(h200), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == (
        "note: the machines ran 3 workloads differently (training/resnet18_cifar, "
        "training/lstm_language_model, training/transformer_encoder): hashed steps 20 "
        f"({old.name}) vs 10 ({h200.name}); compare reads their bits over the steps both ran"
    )
