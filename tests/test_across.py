"""The cross-machine verdict (`detbench compare A B [C ...]`): result sets with known fingerprints
and environments, and, for real, runs of one workload file under two CPU capabilities
(``ATEN_CPU_CAPABILITY=default`` and ``avx2``): two machines' arithmetic on one host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.analysis.across import across, load_runs
from detbench.report.across import to_text

from .conftest import WORKLOADS, detbench_cli
from .synthetic import env, record, write_run


def _runs(tmp_path: Path, spec: dict[str, dict[str, list[str]]],
          envs: dict[str, dict[str, Any]]) -> list[Path]:  # fmt: skip
    """Runs named by ``spec``'s keys: workload -> the fingerprints of its replicates (mode
    default), each run with its env.json from ``envs``."""
    out = []
    for name, workloads in spec.items():
        recs = [record(w, "default", r, fp, [0.01] * 3, fingerprint_method="sha256", seed=0,
                       device="cuda")
                for w, fps in workloads.items() for r, fp in enumerate(fps)]  # fmt: skip
        out.append(write_run(tmp_path / name, recs, envs[name]))
    return out


def _by_workload(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["workload"]: r for r in rows}


def test_groups_and_what_differs(tmp_path: Path) -> None:
    """Two H100 runs agree with each other and not with the A100 run; the facts that differ
    between the groups are the GPU and its SM count, not what all share."""
    h100 = env(gpu="H100", worker={"sm_count": 132})
    a100 = env(gpu="A100", worker={"sm_count": 108})
    dirs = _runs(tmp_path, {
        "h1": {"conv": ["x", "x"], "ints": ["i", "i"], "race": ["r1", "r2"]},
        "a100": {"conv": ["y", "y"], "ints": ["i", "i"], "race": ["r3", "r3"]},
        "h2": {"conv": ["x", "x"], "ints": ["i", "i"], "race": ["r4", "r4"], "alone": ["z"] * 2},
    }, {"h1": h100, "a100": a100, "h2": h100})  # fmt: skip
    rows = _by_workload(across(load_runs(dirs)))
    assert set(rows) == {"conv", "ints", "race"}  # "alone" is in one run only
    conv = rows["conv"]
    assert (conv["same_bits"], conv["verdict"]) == (False, "different bits")
    assert conv["groups"] == [[str(dirs[0]), str(dirs[2])], [str(dirs[1])]]
    assert conv["differs"] == {"gpu": ["H100", "A100"], "sm_count": ["132", "108"]}
    assert (rows["ints"]["same_bits"], rows["ints"]["groups"]) == (True, [[str(d) for d in dirs]])
    # Nondeterministic inside h1: not called a difference between machines.
    race = rows["race"]
    assert (race["same_bits"], race["verdict"]) == (None, "nondeterministic within a run")
    assert race["nondeterministic_in"] == [str(dirs[0])]


def test_not_comparable_is_never_different(tmp_path: Path) -> None:
    """A CPU run against a CUDA run, or other sizes, or another digest: not comparable."""
    cuda = write_run(tmp_path / "cuda", [record("w", "default", r, "x", [0.01], device="cuda",
                                                fingerprint_method="device") for r in range(2)],
                     env())  # fmt: skip
    cpu = write_run(tmp_path / "cpu", [record("w", "default", r, "y", [0.01], device="cpu",
                                              fingerprint_method="sha256") for r in range(2)],
                    env(gpu=None))  # fmt: skip
    big = [record("w", "default", r, "z", [0.01], device="cuda", fingerprint_method="device")
           for r in range(2)]  # fmt: skip
    for rec in big:
        rec["params"] = {"n": 2}
    sized = write_run(tmp_path / "big", big, env())
    (row,) = across(load_runs([cuda, cpu]))
    assert (row["same_bits"], row["verdict"], row["groups"]) == (None, "not comparable", [])
    assert "device cuda" in row["note"] and "digest method device" in row["note"]
    (row,) = across(load_runs([cuda, sized]))
    assert (row["same_bits"], row["verdict"]) == (None, "not comparable")
    assert "workload parameters" in row["note"]
    # Two comparable runs beside a third that is not: the verdict is the two's.
    cuda2 = write_run(tmp_path / "cuda2", [record("w", "default", r, "x", [0.01], device="cuda",
                                                  fingerprint_method="device") for r in range(2)],
                      env())  # fmt: skip
    (row,) = across(load_runs([cuda, cpu, cuda2]))
    assert (row["same_bits"], row["groups"]) == (True, [[str(cuda), str(cuda2)]])
    assert list(row["not_comparable"]) == [str(cpu)]


def test_a_run_with_both_digests_compares_by_the_one_it_shares(tmp_path: Path) -> None:
    """``--fingerprint both`` keeps the sha256 digest beside the device digest: such a run
    compares with a sha256 run by sha256 (the published CPU runs 20261123-124820-cpu-quick-both
    and 20261123-133303-cpu-quick agree this way), and with a device run by the device digest."""
    both = []
    for r in range(2):
        rec = record("w", "default", r, "dev-x", [0.01], device="cpu", fingerprint_method="device")
        rec["fingerprint_sha256"] = "sha-x"
        both.append(rec)
    b = write_run(tmp_path / "both", both, env(gpu=None))
    sha = write_run(tmp_path / "sha", [record("w", "default", r, "sha-x", [0.01], device="cpu",
                                              fingerprint_method="sha256") for r in range(2)],
                    env(gpu=None))  # fmt: skip
    other = write_run(tmp_path / "dev", [record("w", "default", r, "dev-y", [0.01], device="cpu",
                                                fingerprint_method="device") for r in range(2)],
                      env(gpu=None))  # fmt: skip
    (row,) = across(load_runs([b, sha]))
    assert (row["same_bits"], row["groups"]) == (True, [[str(b), str(sha)]])
    (row,) = across(load_runs([b, other]))
    assert (row["same_bits"], row["groups"]) == (False, [[str(b)], [str(other)]])


def test_a_run_where_it_did_not_run(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [record("w", "det-algos", r, "x", [0.01]) for r in range(2)],
                  env())  # fmt: skip
    b = write_run(tmp_path / "b", [record("w", "det-algos", r, None, [], status="unsupported")
                                   for r in range(2)], env())  # fmt: skip
    (row,) = across(load_runs([a, b]))
    assert (row["same_bits"], row["verdict"]) == (None, "no verdict")
    assert row["not_run"] == {str(b): "unsupported"}


@pytest.mark.slow  # compare of two whole runs through the CLI: 11 s here
def test_cli_compare_json_and_text(tmp_path: Path) -> None:
    dirs = _runs(tmp_path, {"a": {"w": ["x", "x"]}, "b": {"w": ["y", "y"]}},
                 {"a": env(torch="2.10.0"), "b": env(torch="2.11.0")})  # fmt: skip
    proc = detbench_cli("compare", *map(str, dirs), "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert {k: row[k] for k in ("workload", "mode", "same_bits", "groups")} == {
        "workload": "w", "mode": "default", "same_bits": False,
        "groups": [[str(dirs[0])], [str(dirs[1])]],
    }  # fmt: skip
    assert row["differs"] == {"torch": ["2.10.0", "2.11.0"]}
    proc = detbench_cli("compare", *map(str, dirs))
    assert proc.returncode == 0, proc.stderr
    # Two runs: the throughput comparison first, kept as it was, then the verdict.
    assert "WARNING: the runs differ in torch: 2.10.0 (A) vs 2.11.0 (B)" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("s/w "))
    assert line.split()[:2] == ["s/w", "default"]
    verdict = next(x for x in proc.stdout.splitlines() if "DIFFERENT bits" in x)
    assert verdict.split() == ["s/w", "default", "DIFFERENT", "bits", "A", "|", "B", "torch:",
                               "2.10.0", "|", "2.11.0"]  # fmt: skip


def test_cli_compare_needs_two_runs(tmp_path: Path) -> None:
    (a,) = _runs(tmp_path, {"a": {"w": ["x", "x"]}}, {"a": env()})
    proc = detbench_cli("compare", str(a))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"detbench: error: {a} holds one run: give two or more runs "
                                   "to compare")  # fmt: skip


# --- For real: two CPU capabilities on this host -------------------------------------------------

CAPABILITY = torch.backends.cpu.get_cpu_capability()


@pytest.mark.skipif(CAPABILITY not in ("AVX2", "AVX512"),
                    reason=f"needs a CPU with AVX2 (torch here: {CAPABILITY})")  # fmt: skip
@pytest.mark.slow  # three real runs under two CPU capabilities: test-slow (CI runs it)
def test_two_cpu_capabilities_for_real(tmp_path: Path) -> None:
    """Three runs of tests/workloads/capability.py and a workload nondeterministic in every
    process, under ATEN_CPU_CAPABILITY=default, avx2 and avx2 again: exp/softmax and the matmul
    differ across the capabilities with the two avx2 runs in one group, the integer workload
    agrees, and the nondeterministic one is called that, not a cross-machine difference."""
    dirs = []
    for name, cap in (("default", "default"), ("avx2", "avx2"), ("avx2-again", "avx2")):
        out = tmp_path / name
        proc = detbench_cli(
            "run", "--workload", str(WORKLOADS / "capability.py"), "--workload",
            str(WORKLOADS / "behaviour.py"), "--only", "capability/softmax_exp", "--only",
            "capability/matmul", "--only", "capability/integer_ops", "--only",
            "behaviour/urandom_order_sum", "--mode", "default", "--replicates", "2",
            "--budget", "0.02", "--device", "cpu", "--no-report", "--out", str(out),
            env={"ATEN_CPU_CAPABILITY": cap},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads((out / "env.json").read_text())["worker"]["cpu_capability"] == cap.upper()
        dirs.append(str(out))
    proc = detbench_cli("compare", *dirs, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = _by_workload(json.loads(proc.stdout))
    for w in ("softmax_exp", "matmul"):
        assert rows[w]["same_bits"] is False, rows[w]
        assert rows[w]["groups"] == [[dirs[0]], [dirs[1], dirs[2]]]
        assert rows[w]["differs"] == {"cpu_capability": ["DEFAULT", "AVX2"]}
    assert rows["integer_ops"]["same_bits"] is True
    assert rows["integer_ops"]["groups"] == [dirs]
    race = rows["urandom_order_sum"]
    assert (race["same_bits"], race["verdict"]) == (None, "nondeterministic within a run")
    assert race["nondeterministic_in"] == dirs
    text = to_text(load_runs(dirs), across(load_runs(dirs)))
    assert "CPU capability: DEFAULT | AVX2" in text
    assert text.rstrip().endswith(
        "4 (workload, mode) in more than one run: 1 same bits, 2 different bits, 0 autotuner's "
        "choice, 1 nondeterministic within a run, 0 not comparable, 0 no verdict"
    )


# --- Like with like (issue 28, item 2) -----------------------------------------------------------


def _stepped(workload: str, mode: str, steps: list[str], reps: int = 2) -> list[dict[str, Any]]:
    """Replicates of one workload whose fingerprint pass hashed ``steps`` (one digest a step)."""
    return [record(workload, mode, r, "+".join(steps), [0.01], device="cuda",
                   fingerprint_method="device", step_fingerprints=steps)
            for r in range(reps)]  # fmt: skip


def test_other_step_counts_compare_over_the_common_steps(tmp_path: Path) -> None:
    """20 steps against 10: equal first steps are the same bits "over the 10 steps both ran";
    a difference inside them is still a difference."""
    long = [f"s{i}" for i in range(20)]
    recs_a = _stepped("same", "default", long) + _stepped("drift", "default", long)
    recs_b = _stepped("same", "default", long[:10]) + _stepped("drift", "default",
                                                               [*long[:9], "other"])  # fmt: skip
    a = write_run(tmp_path / "a", recs_a, env(gpu="H100"))
    b = write_run(tmp_path / "b", recs_b, env(gpu="H200"))
    runs = load_runs([a, b])
    rows = _by_workload(across(runs))
    same, drift = rows["same"], rows["drift"]
    assert (same["verdict"], same["compared_steps"]) == ("same bits", 10)
    assert same["steps"] == {str(a): 20, str(b): 10}
    assert (drift["verdict"], drift["compared_steps"]) == ("different bits", 10)
    assert drift["differs"] == {"gpu": ["H100", "H200"]}
    text = to_text(runs, list(rows.values()))
    assert ("The s suite's 2 workloads hashed 20 steps in A and 10 in B: their bits are compared "
            "over the 10 steps both ran.") in text  # fmt: skip
    line = next(x for x in text.splitlines() if x.startswith("s/same"))
    assert line.split() == ["s/same", "default", "same", "bits", "over", "the", "10", "steps",
                            "both", "ran", "A", "B", "steps", "hashed:", "A", "20,", "B",
                            "10"]  # fmt: skip


def test_a_difference_without_benchmark_is_the_machines(tmp_path: Path) -> None:
    """A workload that differs across GPUs in a mode without cudnn.benchmark differs in its
    bench modes for the same reason as far as anyone can tell: "different bits" in both. One
    that differs only under bench is the autotuner's choice."""

    def recs(tag: str) -> list[dict[str, Any]]:
        out = []
        for mode in ("default", "bench", "det-algos"):
            out += [record("both", mode, r, f"{tag}-{mode}", [0.01], device="cuda")
                    for r in range(2)]  # fmt: skip
            bits = f"{tag}-bench" if mode == "bench" else mode
            out += [record("tuned", mode, r, bits, [0.01], device="cuda") for r in range(2)]
        return out

    a = write_run(tmp_path / "a", recs("x"), env(gpu="H100"))
    b = write_run(tmp_path / "b", recs("y"), env(gpu="H200"))
    rows = {(r["workload"], r["mode"]): r for r in across(load_runs([a, b]))}
    assert {m: rows[("both", m)]["verdict"] for m in ("default", "bench", "det-algos")} == {
        "default": "different bits",
        "bench": "different bits",
        "det-algos": "different bits",
    }
    assert rows[("both", "bench")]["differs"] == {"gpu": ["H100", "H200"]}
    tuned = rows[("tuned", "bench")]
    assert (tuned["verdict"], tuned["cause"], tuned["differs"]) == (
        "autotuner's choice",
        "cudnn.benchmark",
        {},
    )
    assert tuned["machine_facts"] == {"gpu": ["H100", "H200"]}
    assert tuned["note"] == (
        "cudnn.benchmark was on, and its autotuner may pick another algorithm in each process; "
        "both modes without it give the same bits in both runs"
    )


def test_another_suite_source_is_not_comparable(tmp_path: Path) -> None:
    """Runs that recorded their suites' source digests compare only where the digests agree; a
    run that did not record one is matched on the rest."""

    def run(name: str, digest: str | None) -> Path:
        doc = env()
        if digest:
            doc["options"]["suite_sha256"] = {"s": digest}
        return write_run(tmp_path / name, [record("w", "default", r, "x", [0.01], device="cuda")
                                           for r in range(2)], doc)  # fmt: skip

    a, b, old = run("a", "1" * 64), run("b", "2" * 64), run("old", None)
    (row,) = across(load_runs([a, b]))
    assert row["verdict"] == "not comparable"
    assert row["note"] == f"suite source {'1' * 12} ({a}) vs {'2' * 12} ({b})"
    (row,) = across(load_runs([a, old]))
    assert row["verdict"] == "same bits"


def test_on_a_cpu_benchmark_is_no_cause(tmp_path: Path) -> None:
    """cudnn.benchmark acts on nothing on a CPU: a difference only in its modes stays a
    difference between the machines."""

    def recs(tag: str) -> list[dict[str, Any]]:
        return [record("w", mode, r, f"{tag}-{mode}" if mode == "bench" else mode, [0.01],
                       device="cpu")
                for mode in ("default", "bench") for r in range(2)]  # fmt: skip

    a = write_run(tmp_path / "a", recs("x"), env(gpu=None, worker={"cpu_capability": "AVX2"}))
    b = write_run(tmp_path / "b", recs("y"), env(gpu=None, worker={"cpu_capability": "AVX512"}))
    rows = {r["mode"]: r for r in across(load_runs([a, b]))}
    assert (rows["default"]["verdict"], rows["bench"]["verdict"]) == ("same bits",
                                                                      "different bits")  # fmt: skip
    assert rows["bench"]["differs"] == {"cpu_capability": ["AVX2", "AVX512"]}
