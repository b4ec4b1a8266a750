"""One verdict across commands (issue 35): `run`, `audit` and `locate` agree, on the CPU, on
whether a mode is bitwise reproducible, and `locate` says two runs parted only at an op it names,
with its line.

Locate compares each op's bits (its name, the digests of its inputs and outputs, which name their
dtypes and shapes), never where the op was called from: torch-geometric writes each layer's code
to a temporary file whose name differs in each process, and that name is not a difference.
``tests/workloads/generated_code.py`` does the same for real (a module written to a
``NamedTemporaryFile`` and imported with ``importlib`` in each process).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.analysis import verdicts
from detbench.core.modes import get_mode
from detbench.core.workload import load_file, registry
from detbench.locate.culprits import compare, same_bits
from detbench.locate.report import parting, to_text
from detbench.locate.stages import conclude
from detbench.locate.worker import record_workload
from detbench.store.results import load_results

from .conftest import ROOT, WORKLOADS, detbench_cli

GENERATED = WORKLOADS / "generated_code.py"


# --- in this process: the bits, not the metadata ----------------------------------------------


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """graph_conv built and stepped twice under the recorder: each build writes its generated
    module to a new temporary file, as a fresh process does."""
    load_file(str(GENERATED))
    w = registry()["generated/graph_conv"]
    out = []
    for _ in range(2):
        got = record_workload(w, get_mode("default"), torch.device("cpu"), 2, 0, "quick", set(),
                              tmp_path_factory.mktemp("saved"))  # fmt: skip
        assert got["status"] == "ok", got["error"]
        out.append(got)
    return out


def generated_files(ops: list[dict[str, Any]]) -> set[str]:
    return {op["file"] for op in ops if "detbench_graphconv_" in op["file"]}


def test_a_generated_files_name_is_not_a_difference(two_streams: list[dict[str, Any]]) -> None:
    a, b = (s["ops"] for s in two_streams)
    # The metadata differs: the generated code's ops name another temporary file in each build.
    assert generated_files(a) and generated_files(b) and not generated_files(a) & generated_files(b)
    assert a != b
    # The bits do not.
    assert same_bits(a, b) and compare(a, b).first_difference is None
    loc = conclude("generated/graph_conv", get_mode("default"), two_streams, "cpu")
    assert loc.reproducible is True and loc.ops_reproducible and loc.outputs_reproducible
    assert "reproducible: all" in to_text([loc.to_json()])


def test_a_difference_in_bits_is_named_at_its_op_and_line(
    two_streams: list[dict[str, Any]],
) -> None:
    a = two_streams[0]
    b = json.loads(json.dumps(two_streams[1]))
    i = next(k for k, op in enumerate(b["ops"]) if op["op"] == "aten.index_add")
    b["ops"][i]["out"] = ["float32[64, 16]:changed"]  # other bits from equal inputs
    loc = conclude("generated/graph_conv", get_mode("default"), [a, b], "cpu").to_json()
    assert loc["reproducible"] is False and not loc["ops_reproducible"]
    (c,) = loc["culprits"]
    assert (c["op"], c["function"]) == ("aten.index_add", "propagate")
    assert c["line"] > 0 and "detbench_graphconv_" in c["file"]
    assert "parted at 1 op" in parting(loc)


def test_outputs_that_differ_with_every_op_alike_name_no_op(
    two_streams: list[dict[str, Any]],
) -> None:
    """The step's outputs differ while every op the recorder saw has the same bits (a change
    outside the dispatcher): not reproducible, and nothing is said to have parted at an op."""
    a = two_streams[0]
    b = {**two_streams[1], "step_digests": ["something else"]}
    loc = conclude("generated/graph_conv", get_mode("default"), [a, b], "cpu").to_json()
    assert loc["reproducible"] is False and loc["ops_reproducible"] is True
    assert loc["culprits"] == [] and loc["first_difference"] is None
    text = parting(loc)
    assert "parted" not in text and "no op can be named" in text


def test_an_lstms_workspace_is_scratch_and_its_reader_is_compared(tmp_path: Path) -> None:
    """oneDNN's LSTM on a CPU returns a workspace for its backward, part of which holds whatever
    the memory held (it differed between two builds in one process): not a result, so not
    compared; the backward op that reads it is flagged, as a reader of torch.empty's memory is,
    and its outputs are compared."""
    load_file(str(ROOT / "suites" / "rnn.py"))
    w = registry()["rnn/lstm_2layer"]
    streams = [
        record_workload(
            w, get_mode("default"), torch.device("cpu"), 1, 0, "quick", set(), tmp_path / str(k)
        )["ops"]
        for k in range(2)
    ]
    for ops in streams:
        fwd = [op for op in ops if op["op"] == "aten.mkldnn_rnn_layer"]
        bwd = [op for op in ops if op["op"] == "aten.mkldnn_rnn_layer_backward"]
        assert fwd and all(op["out"][3] == "workspace" for op in fwd)
        assert bwd and all(op.get("reads_uninitialized") for op in bwd)
        assert all(
            v in {op["i"] for op in fwd} for op in bwd for v in op["reads_uninitialized"].values()
        )
    assert same_bits(*streams)


# --- the three commands, in fresh processes ------------------------------------------------


def three_verdicts(target: str, run_args: list[str], out: Path) -> dict[str, dict[str, Any]]:
    """``run`` (default mode, 2 replicates), ``audit`` and ``locate`` (2 processes) of the same
    workloads on the CPU, quick profile: per workload, each command's answer."""
    times = {}
    t = time.monotonic()
    proc = detbench_cli("run", *run_args, "--mode", "default", "--replicates", "2", "--device",
                        "cpu", "--profile", "quick", "--budget", "0.01",
                        "--no-report", "--out", str(out / "run"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    times["run"] = time.monotonic() - t
    v = verdicts(load_results(out / "run"))
    v = v[v["mode"] == "default"]
    got: dict[str, dict[str, Any]] = {
        f"{r['suite']}/{r['workload']}": {"run": r["verdict"]} for r in v.to_dict("records")
    }
    t = time.monotonic()
    proc = detbench_cli("audit", target, "--replicates", "2", "--device", "cpu", "--json",
                        "--out", str(out / "audit"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    times["audit"] = time.monotonic() - t
    for a in json.loads(proc.stdout):
        got[a["workload"]]["audit"] = a["verdicts"]["default"]["verdict"]
    t = time.monotonic()
    proc = detbench_cli("locate", target, "--until", "2", "--no-check", "--device", "cpu",
                        "--json")  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    times["locate"] = time.monotonic() - t
    docs = json.loads(proc.stdout)
    for d in docs if isinstance(docs, list) else [docs]:
        got[d["workload"]]["locate"] = d
    print(f"{target}: seconds {', '.join(f'{k} {s:.0f}' for k, s in times.items())}")
    return got


def assert_one_verdict(key: str, got: dict[str, Any]) -> None:
    """The three commands agree on ``key``; a locate that is not reproducible names an op and a
    line. A workload that cannot run here (a model whose library is missing) is left out."""
    run, audit, loc = got["run"], got["audit"], got["locate"]
    if run == "unsupported":
        assert audit == "unsupported" and loc["reproducible"] is None, (key, got)
        return
    assert run == audit, (key, run, audit)
    assert run in ("reproducible", "nondeterministic"), (key, run)
    assert loc["error"] is None, (key, loc["error"])
    assert loc["reproducible"] is (run == "reproducible"), (key, run, to_text([loc]))
    if not loc["reproducible"]:
        where = loc["culprits"][:1] or [loc["first_difference"] or loc["parted_at"] or {}]
        assert where[0].get("op") and where[0].get("file") and where[0].get("line"), (key, loc)


@pytest.mark.slow  # three commands in fresh processes, about 2 minutes on 2 cores
def test_generated_code_in_a_temporary_file_is_reproducible_in_all_three(tmp_path: Path) -> None:
    got = three_verdicts(str(GENERATED), ["--workload", str(GENERATED)], tmp_path)
    d = got["generated/graph_conv"]
    assert (d["run"], d["audit"], d["locate"]["reproducible"]) == ("reproducible",) * 2 + (True,)
    assert_one_verdict("generated/graph_conv", d)


@pytest.mark.slow  # every workload of a suite through three commands: minutes per suite
@pytest.mark.parametrize("suite", ["conv", "rnn", "batchnorm", "bmm", "training", "models"])
def test_run_audit_and_locate_agree_on_every_workload(suite: str, tmp_path: Path) -> None:
    got = three_verdicts(str(ROOT / "suites" / f"{suite}.py"), ["--suite", suite], tmp_path)
    assert got and all({"run", "audit", "locate"} <= set(d) for d in got.values()), got
    for key, d in got.items():
        assert_one_verdict(key, d)
