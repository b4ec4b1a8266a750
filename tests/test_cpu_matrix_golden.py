"""Behaviour unchanged (issue 30): the CPU matrix's records and verdicts are what they were.

A small CPU matrix (five workloads, one from each core suite, all 10 modes, 2 replicates, the
quick profile) is run in fresh worker processes as a user runs it, and every record's identity,
status, settings, fingerprints and counts, and every verdict, must equal those recorded in
``tests/data/behaviour/cpu_matrix_golden.json``. Timings are not compared: they are
measurements, not behaviour.

The bits must not depend on the host's vector unit, so the run pins every library that picks its
kernels by the CPU (``PINS``): ATen's portable kernels (``ATEN_CPU_CAPABILITY=default``), MKL's
code path that gives the same bits on every x86 CPU (``MKL_CBWR=COMPATIBLE``: the GRU's and the
training step's matrix products), and oneDNN's SSE4.1 kernels (``ONEDNN_MAX_CPU_ISA=SSE41``: the
convolutions). With ATen's pin alone, an AVX-512 host and CI's host gave other bits for
rnn/gru_2layer and training/resnet18_cifar. The file was recorded with these pins at commit
216c085 (before issue 34's paired timing) and is the same at the commit that added them: what
issue 30's refactoring kept (its golden at 0be270f held the same verdicts) and issue 34 kept.
It was recorded again when the separate design was retired (2026-12-05): every record's
``mode_position`` moved (91 of 100: a paired group's seeded order of its modes, the same in two
runs), every fingerprint, count and verdict stayed as it was. On 2026-12-06 ``ops_called`` began
to name a convolution (``worker.ops``): the conv and ResNet-18 records' ``[]`` became
``["convolution"]``, nothing else.

To record the file again after an intended change of behaviour (say why in the commit)::

    ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41 \\
    python -m detbench run --device cpu --profile quick \\
        --replicates 2 --out /tmp/golden --no-report \\
        --only conv/conv2d_resnet50_stage1_3x3 --only bmm/bmm_attention_scores_fp32 \\
        --only batchnorm/batchnorm2d_train_resnet50_stage1 --only rnn/gru_2layer \\
        --only training/resnet18_cifar
    python -c "from tests.test_cpu_matrix_golden import write; write('/tmp/golden')"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from detbench.analysis import verdicts
from detbench.store.results import load_results
from tests.conftest import detbench_cli

GOLDEN = Path(__file__).parent / "data" / "behaviour" / "cpu_matrix_golden.json"
ONLY = [
    "conv/conv2d_resnet50_stage1_3x3",
    "bmm/bmm_attention_scores_fp32",
    "batchnorm/batchnorm2d_train_resnet50_stage1",
    "rnn/gru_2layer",
    "training/resnet18_cifar",
]
#: The libraries' own choices of kernels by the CPU, pinned (the module docstring says why).
PINS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"}
#: The fields of a record that are behaviour: what ran, under which settings, and its bits.
RECORD_FIELDS = [
    "suite",
    "workload",
    "mode",
    "replicate",
    "status",
    "base_mode",
    "mode_position",
    "device",
    "profile",
    "seed",
    "seeding",
    "fingerprint",
    "fingerprint_method",
    "step_fingerprints",
    "flops_per_step",
    "items_per_step",
    "params",
    "precision",
    "settings_changed",
    "ops_called",
    "benchmark",
    "cudnn_deterministic",
    "cudnn_enabled",
    "deterministic_algorithms",
    "warn_only",
    "float32_matmul_precision",
    "fill_uninitialized_memory",
    "execution",
    "autocast",
]
VERDICT_FIELDS = ["suite", "workload", "mode", "verdict", "distinct_fingerprints", "ok"]


def behaviour(run: Path) -> dict[str, Any]:
    """The records' behaviour fields (sorted by identity) and the verdicts of a run directory."""
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    records = sorted(
        ({f: r.get(f) for f in RECORD_FIELDS} for r in rows),
        key=lambda r: (r["suite"], r["workload"], r["mode"], r["replicate"]),
    )
    v = verdicts(load_results(run))
    verdict_rows = [
        {f: (int(x) if isinstance(x, int) else x) for f, x in row.items()}
        for row in v[VERDICT_FIELDS].to_dict("records")
    ]
    verdict_rows.sort(key=lambda r: (r["suite"], r["workload"], r["mode"]))
    return {"records": records, "verdicts": verdict_rows}


def write(run: str) -> None:
    """Record the golden file from a run made with the command in the module docstring."""
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(behaviour(Path(run)), indent=1, sort_keys=True) + "\n")


@pytest.mark.slow
def test_cpu_matrix_records_and_verdicts_are_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "run"
    only = [a for key in ONLY for a in ("--only", key)]
    proc = detbench_cli(
        "run",
        "--device",
        "cpu",
        "--profile",
        "quick",
        "--replicates",
        "2",
        "--out",
        str(out),
        "--no-report",
        *only,
        env=PINS,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = behaviour(out)
    want = json.loads(GOLDEN.read_text())
    assert len(got["records"]) == len(want["records"]) == 100
    for g, w in zip(got["records"], want["records"], strict=True):
        assert g == w, (g, w)
    assert got["verdicts"] == want["verdicts"]
    # The matrix is not trivially uniform: the golden holds distinct bits across workloads.
    assert len({r["fingerprint"] for r in want["records"]}) >= 5
