"""tools/interval_replay.py on a small synthetic GPU run of the paired design: the A/A
comparisons and the true-null mode pairs it finds, and what each rule (current, stated) counts
false. Exact counts on injected lines; nothing is timed."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import stats as sps

from detbench.analysis.pairs import Paired
from detbench.store.paired import PairedWriter
from tests.synthetic import env, paired_line, record, write_run

ROOT = Path(__file__).resolve().parent.parent
#: Round noise of a one-process comparison: symmetric, MAD 0.01 (robust spread 0.0148).
NOISE = [-0.02, -0.015, -0.01, -0.005, 0.0, 0.0, 0.005, 0.01, 0.015, 0.02]
BASE = 0.01  # seconds a step of default's copy 0, every round


def _tool() -> ModuleType:
    """The tool as a module (registered first: its dataclass looks its module up)."""
    if "interval_replay" in sys.modules:
        return sys.modules["interval_replay"]
    spec = importlib.util.spec_from_file_location(
        "interval_replay", ROOT / "tools" / "interval_replay.py"
    )
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    sys.modules["interval_replay"] = tool
    spec.loader.exec_module(tool)
    return tool


def _secs(logs: list[float]) -> list[float]:
    """Seconds a step of a side whose log throughput ratio to default's copy 0 is ``logs``."""
    return [BASE / math.exp(x) for x in logs]


def _run(directory: Path) -> Path:
    """Three bmm workloads and one conv workload on a GPU, paired design.

    - ``offset_small`` (1 replicate): copy 1 and ``no-cudnn`` 3% off in every round, with the
      round noise: today's interval of the median excludes 1, the stated floor does not.
      ``bench`` has no offset. Every mode has default's bits.
    - ``offset_large`` (1 replicate): copy 1 20% off: false under both rules.
    - ``two_reps`` (2 replicates): copy 1's medians -1% and +1%: the t-interval holds 1.
    - ``conv`` (1 replicate): ``no-cudnn`` has other bits, so cuDNN runs there and no mode is a
      true null; copy 1 on default.
    """
    plan = {
        ("bmm", "offset_small"): [{"copy1": 0.03, "no-cudnn": 0.03, "bench": 0.0}],
        ("bmm", "offset_large"): [{"copy1": 0.2, "no-cudnn": 0.0, "bench": 0.0}],
        ("bmm", "two_reps"): [{"copy1": -0.01}, {"copy1": 0.01}],
        ("conv", "conv"): [{"copy1": 0.0, "no-cudnn": 0.5, "bench": 0.0}],
    }
    records, lines = [], []
    for (suite, workload), reps in plan.items():
        for rep, offsets in enumerate(reps):
            lines.append(paired_line(workload, "default", rep, [BASE] * 10, suite=suite))
            modes = ["default", "det-algos", *(m for m in offsets if m != "copy1")]
            for mode in modes:
                bits = "b" if (suite, mode) == ("conv", "no-cudnn") else "a"
                records.append(
                    record(workload, mode, rep, bits, [], suite=suite, timing_design="paired")
                )
            for label, offset in {"det-algos": 0.0, **offsets}.items():
                mode, copy = ("default", 1) if label == "copy1" else (label, 0)
                secs = _secs([offset + e for e in NOISE])
                lines.append(paired_line(workload, mode, rep, secs, copy=copy, suite=suite))
    write_run(directory, records, env())
    with PairedWriter(directory) as w:
        w.append_all(lines)
    return directory


def test_the_replay_counts_each_rule_on_a_synthetic_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    rows = tool.comparisons(_run(tmp_path / "run"))
    s = tool.summary(rows).set_index(["kind", "rule"])
    assert s.loc[("A/A", "current"), ["comparisons", "false"]].tolist() == [4, 2]
    assert s.loc[("A/A", "stated"), ["comparisons", "false"]].tolist() == [4, 1]
    # True nulls: bench and no-cudnn on the two one-replicate bmm workloads (det-algos never;
    # nothing on conv, whose bits change with cuDNN off; two_reps has no cuDNN-off record).
    nulls = rows[(rows["kind"] == "true null") & (rows["rule"] == "current")]
    assert sorted(zip(nulls["workload"], nulls["mode"], strict=True)) == [
        ("offset_large", "bench"),
        ("offset_large", "no-cudnn"),
        ("offset_small", "bench"),
        ("offset_small", "no-cudnn"),
    ]
    assert set(nulls["evidence"]) == {"no cuDNN path"}
    assert s.loc[("true null", "current"), "false"] == 1  # offset_small's no-cudnn
    assert s.loc[("true null", "stated"), "false"] == 0
    assert tool.main([str(tmp_path / "run")]) == 0
    said = capsys.readouterr().out
    assert "current                    2 of   4 false (50.0%)" in said, said
    assert "stated                     1 of   4 false (25.0%)" in said, said
    assert "7 of 8 rest on one replicate" in said, said


def test_the_stated_floor_with_one_process_and_what_it_rests_on() -> None:
    tool = _tool()
    x = np.asarray([0.03 + e for e in NOISE])
    p = Paired((0,), (x,), (np.arange(10.0),))
    point, low, high = tool.paired_interval(p, "stated")
    half = float(sps.t.ppf(0.975, 9)) * 1.4826 * 0.01 * math.sqrt(1 + math.pi / 20)
    assert point == pytest.approx(math.exp(0.03))
    assert (low, high) == pytest.approx((math.exp(0.03 - half), math.exp(0.03 + half)))
    assert tool.paired_interval(p, "current")[1] > 1.0  # today's interval: the rounds' only
    two = Paired((0, 1), (x, x + 0.01), (np.arange(10.0),) * 2)
    assert tool.paired_interval(two, "stated") == tool.paired_interval(two, "current")
    assert tool.rests_on(1, 10).startswith("1 replicate, 10 rounds: the process level assumed")
    assert "measured (t, 2 degrees of freedom)" in tool.rests_on(3, 30)
