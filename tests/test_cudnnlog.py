"""Which cuDNN engine each process chose (``run --cudnn-log``), read from cuDNN's API log.

The logs in tests/data/cudnn/ are excerpts, whole blocks in their order, of real cuDNN 9.19 logs
recorded on an H100 (torch 2.11.0+cu130; results/20261126-h100-experiments/cudnnlog.txt):
conv3d_r3d18_stage1's forward and backward in fresh processes, with cudnn.benchmark on (processes
r0 and r3, whose bits differed) and off. Each keeps the first blocks of its log, a warning block,
and for each operation the last candidate the autotuner tried before the one it kept, then the
last execution of the kept one (tests/data/cudnn/README.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from detbench.analysis.engines import describe, differs, engine_choices, timings_logged
from detbench.core.modes import get_mode
from detbench.core.workload import Context, Workload
from detbench.run.config import resume_config
from detbench.run.gpucheck import engines_check
from detbench.store.results import load_results
from detbench.worker.cudnnlog import LogWatch, parse, read_since
from detbench.worker.passes import run_workload

from .conftest import ROOT, WORKLOADS, detbench_cli

DATA = Path(__file__).resolve().parent / "data" / "cudnn"
R0 = DATA / "conv3d_r3d18_stage1-bench-log-r0.log"
R3 = DATA / "conv3d_r3d18_stage1-bench-log-r3.log"
NO_BENCH = DATA / "conv3d_r3d18_stage1-nobench-log-r0.log"
SHAPES = (
    "x=[8,64,8,56,56] w=[64,64,3,3,3] y=[8,64,8,56,56] pad=[1,1,1] stride=[1,1,1] "
    "dilation=[1,1,1] groups=1 FLOAT"
)
R0_FORWARD = "67:TILE_SIZE=0,TILEK=0,IDX_MODE=0,WORKSPACE=0,TILE_CGA_M=8,TILE_CGA_N=1"
R3_FORWARD = "67:TILE_SIZE=1,TILEK=0,IDX_MODE=0,WORKSPACE=1,TILE_CGA_M=8,TILE_CGA_N=1"
R0_BWD_DATA = "71:TILE_SIZE=3,TILEK=0,IDX_MODE=0,WORKSPACE=0,TILE_CGA_M=4,TILE_CGA_N=1"
R3_BWD_DATA = "71:TILE_SIZE=4,TILEK=0,IDX_MODE=0,WORKSPACE=1,TILE_CGA_M=4,TILE_CGA_N=1"
BWD_FILTER = "68:TILE_SIZE=5,TILEK=0,IDX_MODE=1,WORKSPACE=0,TILE_CGA_M=1,TILE_CGA_N=1"


def engines(path: Path) -> dict[str, str]:
    return {e.op: e.engine for e in parse(path.read_text()).engines}


def test_the_process_whose_bits_differed_settled_on_another_forward_engine() -> None:
    r0, r3 = parse(R0.read_text()), parse(R3.read_text())
    assert r0.unsupported is None and r0.version == "91900" and (r0.blocks, r0.cut) == (13, 0)
    assert [asdict(e) for e in r0.engines] == [
        {"op": op, "shapes": SHAPES, "engine": engine, "candidates": 2, "executions": 2}
        for op, engine in [
            ("CONV_FORWARD", R0_FORWARD),
            ("CONV_BWD_DATA", R0_BWD_DATA),
            ("CONV_BWD_FILTER", BWD_FILTER),
        ]
    ]
    assert engines(R3) == {
        "CONV_FORWARD": R3_FORWARD,
        "CONV_BWD_DATA": R3_BWD_DATA,
        "CONV_BWD_FILTER": BWD_FILTER,
    }
    assert [e.shapes for e in r3.engines] == [SHAPES] * 3


def test_without_benchmark_one_configuration_per_operation() -> None:
    parsed = parse(NO_BENCH.read_text())
    assert [(e.op, e.engine, e.candidates) for e in parsed.engines] == [
        ("CONV_FORWARD", "38:TILE_SIZE=1,TILEK=0,STAGES=4,IDX_MODE=0,LDGC=2,SPECFILT=0", 1),
        ("CONV_BWD_DATA", "28:TILE_SIZE=4,TILEK=0,STAGES=2,IDX_MODE=0,SPECFILT=0", 1),
        ("CONV_BWD_FILTER", BWD_FILTER, 1),
    ]


def test_a_block_cut_off_at_either_end_is_left_out() -> None:
    text = R0.read_text()
    last = text.rindex("cudnnBackendExecuteInternal() called:")
    # The bytes end inside the kept backward-filter execution: the last complete one of that
    # operation is the candidate tried before it.
    cut_end = parse(text[: last + 900])
    assert cut_end.cut == 1 and cut_end.unsupported is None
    bwd_filter = [e for e in cut_end.engines if e.op == "CONV_BWD_FILTER"]
    assert [(e.engine, e.executions) for e in bwd_filter] == [
        ("68:TILE_SIZE=0,TILEK=0,IDX_MODE=1,WORKSPACE=1,TILE_CGA_M=1,TILE_CGA_N=1", 1)
    ]
    # The bytes start inside the first block: that block is left out, the rest read as before.
    cut_start = parse(text[40:])
    assert cut_start.cut == 1 and cut_start.blocks == 12
    assert {e.op: e.engine for e in cut_start.engines} == engines(R0)


def test_every_cut_of_a_log_parses_without_an_exception() -> None:
    text = R3.read_text()
    for end in range(0, len(text), 97):
        parsed = parse(text[:end])
        assert parsed.unsupported is not None or all(e.candidates >= 1 for e in parsed.engines)


def test_empty_and_foreign_texts_are_unsupported_with_the_reason() -> None:
    assert parse("").to_record() == {
        "unsupported": "not a cuDNN API log that this parser reads: it is empty"
    }
    readme = parse((ROOT / "README.md").read_text())
    assert readme.unsupported is not None
    assert readme.unsupported.startswith("not a cuDNN API log that this parser reads: its first")
    # A cuDNN whose execution blocks name no engine (here: the real excerpt, its engine_id
    # lines removed) gives the reason, not a guess.
    no_id = re.sub(r"^i! +engine_id: .*\n", "", R0.read_text(), flags=re.M)
    assert parse(no_id).to_record() == {
        "unsupported": "cuDNN v91900's cudnnBackendExecuteInternal() blocks name no operation "
        "or engine_id that this parser reads"
    }
    # cuDNN calls without an execution: nothing ran, so no engine.
    first_blocks = R0.read_text().split("\n\n\nW! ")[0]
    assert parse(first_blocks).to_record() == []


def test_only_the_bytes_gained_since_the_offset_are_read(tmp_path: Path) -> None:
    log = tmp_path / "r0-default.cudnn.log"
    log.write_bytes(R0.read_bytes())
    offset = log.stat().st_size
    with log.open("ab") as f:
        f.write(R3.read_bytes())
    assert engines_of(read_since(log, offset)) == engines(R3)
    # Replaced by a shorter file: all of it.
    log.write_bytes(NO_BENCH.read_bytes())
    assert read_since(log, offset) == NO_BENCH.read_text()
    assert read_since(log, 0, limit=100) == NO_BENCH.read_text()[-100:]


def engines_of(text: str) -> dict[str, str]:
    return {e.op: e.engine for e in parse(text).engines}


def _job(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "device": "cpu",
        "seed": 0,
        "profile": "quick",
        "replicate": 0,
        "fingerprint_steps": 2,
        "reference_dir": str(tmp_path / "reference"),
        "warmup_steps": 1,
        "budget": 0.02,
        "target_rel": 0.03,
        "min_samples": 5,
        "fingerprint": "sha256",
        **extra,
    }


def test_a_workload_records_the_engines_its_log_gained(tmp_path: Path) -> None:
    """The worker's pass, in this process: the log's size before the build, the bytes gained by
    the end of the fingerprint pass parsed into the record (a recorded log replayed)."""
    log = tmp_path / "r0-default.cudnn.log"
    log.write_bytes(R0.read_bytes())  # an earlier workload's

    def factory(ctx: Context) -> Any:
        x = torch.arange(4.0)
        calls = []

        def step() -> list[torch.Tensor]:
            calls.append(1)
            if len(calls) <= 2:  # the fingerprint pass's two steps (the timing pass's are later)
                with log.open("ab") as f:
                    f.write(R3.read_bytes())
            return [x * 2]

        return step

    w = Workload(suite="t", name="replay", factory=factory, items_per_step=1)
    rec, _ = run_workload(w, _job(tmp_path, cudnn_log=str(log)), get_mode("bench"))
    assert rec["status"] == "ok" and rec["fingerprint"] is not None and rec["cudnn_log"] is True
    assert {e["op"]: e["engine"] for e in rec["cudnn_engines"]} == engines(R3)
    # Two fingerprint steps appended the excerpt twice: each configuration ran twice as often.
    assert [e["executions"] for e in rec["cudnn_engines"]] == [4, 4, 4]


def test_on_a_cpu_no_log_appears_and_the_record_says_why(tmp_path: Path) -> None:
    w = Workload(suite="t", name="w", factory=lambda ctx: lambda: [torch.ones(3)], items_per_step=1)
    log = tmp_path / "r0-default.cudnn.log"
    rec, _ = run_workload(w, _job(tmp_path, cudnn_log=str(log)), get_mode("default"))
    assert rec["status"] == "ok" and rec["cudnn_log"] is True and rec["fingerprint"] is not None
    assert rec["cudnn_engines"] == {
        "unsupported": "cuDNN runs only on CUDA GPUs, and this record ran on the CPU"
    }
    plain, _ = run_workload(w, _job(tmp_path), get_mode("default"))
    assert "cudnn_log" not in plain and "cudnn_engines" not in plain


def test_a_distributed_workload_says_its_ranks_are_not_read(tmp_path: Path) -> None:
    rec: dict[str, Any] = {}
    LogWatch({"cudnn_log": str(tmp_path / "x.log"), "device": "cuda"}, rec, distributed=True)
    assert rec["cudnn_engines"]["unsupported"].startswith("a distributed workload's cuDNN runs")


def _records() -> pd.DataFrame:
    rows = [
        {
            "suite": "conv",
            "workload": "conv3d_r3d18_stage1",
            "mode": "bench",
            "replicate": rep,
            "device": "cuda",
            "cudnn_log": True,
            "cudnn_engines": parse(p.read_text()).to_record(),
        }
        for rep, p in [(0, R0), (3, R3)]
    ]
    rows.append(
        {**rows[0], "mode": "default", "device": "cpu", "cudnn_engines": {"unsupported": "cpu"}}
    )
    return pd.DataFrame(rows)


def test_the_analysis_names_the_convolutions_whose_engine_differed() -> None:
    df = _records()
    choices = engine_choices(df)
    assert list(choices) == [("conv/conv3d_r3d18_stage1", "bench")]
    by_rep = choices[("conv/conv3d_r3d18_stage1", "bench")]
    assert sorted(by_rep) == [0, 3]
    found = differs(by_rep)
    assert sorted(found) == [f"CONV_BWD_DATA {SHAPES}", f"CONV_FORWARD {SHAPES}"]
    assert found[f"CONV_FORWARD {SHAPES}"] == {R0_FORWARD: [0], R3_FORWARD: [3]}
    assert describe(f"CONV_FORWARD {SHAPES}", found[f"CONV_FORWARD {SHAPES}"]) == (
        f"CONV_FORWARD {SHAPES}: replicate 0 chose engine {R0_FORWARD}; replicate 3 chose "
        f"engine {R3_FORWARD}."
    )
    assert describe("c", {"a": [1, 2, 3], "b": [0]}) == (
        "c: replicates 1, 2 and 3 chose engine a; replicate 0 chose engine b."
    )
    assert timings_logged(df).tolist() == [True, True, False]
    assert not timings_logged(df.drop(columns=["cudnn_log"])).any()


def test_gpu_check_says_whether_each_conv_record_names_its_engines() -> None:
    named = {"suite": "conv", "status": "ok", "cudnn_engines": parse(R0.read_text()).to_record()}
    no_conv = {"suite": "bmm", "status": "ok", "cudnn_engines": []}
    check = engines_check([named, no_conv], "cuda")
    assert check.ok and check.text == (
        "cuDNN's log: 1 of 1 conv records name the engines their convolutions ran "
        "(CONV_BWD_DATA, CONV_BWD_FILTER, CONV_FORWARD)"
    )
    unread = {**named, "cudnn_engines": {"unsupported": "cuDNN wrote no log"}}
    assert not engines_check([named, unread], "cuda").ok
    cpu = {"suite": "conv", "status": "ok", "cudnn_engines": {"unsupported": "on the CPU"}}
    assert engines_check([cpu, cpu], "cpu").text == (
        "cuDNN's log: 2 of 2 records that ran say why they name no engine: on the CPU"
    )


@pytest.mark.slow
def test_a_cpu_run_with_the_log_on(tmp_path: Path) -> None:
    """``detbench run --cudnn-log --device cpu``: each worker started with cuDNN's variables set,
    a record that names no engine says why, one that replays a recorded log names its engines,
    and the option survives a resume."""
    out = tmp_path / "out"
    proc = detbench_cli(
        "run",
        "--cudnn-log",
        "--device",
        "cpu",
        "--workload",
        str(WORKLOADS / "cudnn_log.py"),
        "--mode",
        "bench",
        "--replicates",
        "2",
        "--out",
        str(out),
        "--no-report",
    )
    assert proc.returncode == 0, proc.stderr
    assert "detbench: --cudnn-log on a CPU: cuDNN never loads here, so each record will say " in (
        proc.stderr
    )
    df = load_results(out)
    assert (df["status"] == "ok").all() and len(df) == 4, df[["workload", "message"]]
    assert df["cudnn_log"].tolist() == [True] * 4
    plain = df[df["workload"] == "sees_the_log_variables"]["cudnn_engines"].tolist()
    assert (
        plain
        == [{"unsupported": "cuDNN runs only on CUDA GPUs, and this record ran on the CPU"}] * 2
    )
    by_rep = engine_choices(df)[("cudnnlog/replays_a_recorded_log", "bench")]
    assert by_rep == {
        0: {f"{op} {SHAPES}": e for op, e in engines(R0).items()},
        1: {f"{op} {SHAPES}": e for op, e in engines(R3).items()},
    }
    assert sorted(differs(by_rep)) == [f"CONV_BWD_DATA {SHAPES}", f"CONV_FORWARD {SHAPES}"]
    # Since issue 39 a replicate's paired workers make its verdicts: the mode's (timing0, whose
    # log the records replay) and the A/A copy's (timing1), each with its own log.
    assert sorted(p.name for p in (out / "logs").glob("*.cudnn.log")) == [
        f"r{r}-bench-timing{c}.cudnn.log" for r in (0, 1) for c in (0, 1)
    ]
    env = json.loads((out / "env.json").read_text())
    assert env["options"]["cudnn_log"] is True
    assert resume_config(out).cudnn_log is True


def test_the_report_shows_the_engines_beside_the_verdicts() -> None:
    from detbench.report.answer import engine_lines

    lines = engine_lines(_records())
    assert len(lines) == 2
    assert lines[0].startswith(
        "cuDNN's log: in conv/conv3d_r3d18_stage1 under bench, the processes chose different "
        "engines: CONV_"
    )
    assert any(f"replicate 3 chose engine {R3_FORWARD}" in line for line in lines)
