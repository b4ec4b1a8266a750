"""``--fingerprint both``: the device digest and sha256 must split replicates the same way. Checked
exactly on hand-made fingerprints, and on a real run with a genuine race (index_put_ with
accumulate on 2 threads) and a workload that is reproducible."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from detbench.analysis.quality import _partition, fingerprint_agreement
from detbench.report.write import write_report
from detbench.store.results import load_results

from .conftest import WORKLOADS, detbench_cli


def test_partition_names_which_replicates_share_a_fingerprint() -> None:
    assert _partition(["a", "b", "a"]) == (0, 1, 0)
    assert _partition(["x", "y", "x"]) == _partition(["a", "b", "a"])
    assert _partition(["a", "a", "b"]) != _partition(["a", "b", "a"])


def test_agreement_on_hand_made_fingerprints() -> None:
    rows = []
    # w1: both methods see replicates 0 and 2 equal, 1 different; w2: they disagree.
    for rep, dev, sha in [(0, "d0", "s0"), (1, "d1", "s1"), (2, "d0", "s0")]:
        rows.append(("w1", rep, dev, sha))
    for rep, dev, sha in [(0, "d0", "s0"), (1, "d0", "s1"), (2, "d0", "s0")]:
        rows.append(("w2", rep, dev, sha))
    df = pd.DataFrame(
        [
            {"suite": "s", "workload": w, "mode": "default", "replicate": rep,
             "fingerprint": d, "fingerprint_sha256": h,
             "step_fingerprints": [d], "step_fingerprints_sha256": [h]}
            for w, rep, d, h in rows
        ]
    )  # fmt: skip
    a = {r["workload"]: r for r in fingerprint_agreement(df).to_dict("records")}
    assert a["w1"]["agree"] and a["w1"]["steps_agree"]
    assert not a["w2"]["agree"] and not a["w2"]["steps_agree"]
    assert (a["w1"]["device_distinct"], a["w2"]["sha256_distinct"]) == (2, 2)
    assert fingerprint_agreement(df.drop(columns=["fingerprint_sha256"])).empty


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_both_methods_give_the_same_verdicts_on_a_real_race(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "behaviour.py"),
        "--only", "behaviour/index_put_accumulate", "--only", "behaviour/seeded_mlp",
        "--mode", "default", "--replicates", "3", "--budget", "0.02", "--device", "cpu",
        "--fingerprint", "both", "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    df = load_results(out)
    assert set(df["fingerprint_method"]) == {"device"}
    a = {r["workload"]: r for r in fingerprint_agreement(df).to_dict("records")}
    assert all(r["agree"] and r["steps_agree"] for r in a.values())
    # The race gave different bits in 3 fresh processes by both methods; the MLP never.
    assert a["index_put_accumulate"]["device_distinct"] > 1
    assert a["index_put_accumulate"]["sha256_distinct"] > 1
    assert a["seeded_mlp"]["device_distinct"] == 1
    md, _ = write_report(out)
    assert "split the replicates the same way for 2 of 2 (workload, mode) pairs" in md.read_text()
