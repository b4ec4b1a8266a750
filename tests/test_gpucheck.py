"""``detbench gpu-check``'s judgement, on a real paired run of the CPU: each (workload, mode)
line reads its timing from the run's ``paired.jsonl``, since a verdict record times nothing."""

from __future__ import annotations

from pathlib import Path

from detbench.run.gpucheck import checks, timed_records
from detbench.store.results import load_env


def test_each_line_reads_its_timing_from_the_paired_lines(paired_ops_run: Path) -> None:
    lines = {
        c.text.split(":")[0]: c
        for c in checks(timed_records(paired_ops_run), load_env(paired_ops_run))
    }
    for workload in ("ops/cumsum", "ops/index_put_accumulate"):
        for mode in ("default", "det-algos"):
            check = lines[f"{workload} [{mode}]"]
            assert check.ok, check.text
            samples = int(check.text.split("timing ")[1].split("+")[0])
            assert samples >= 6, check.text
        # On a CPU full determinism runs what det-algos timed: its line says so and passes.
        full = lines[f"{workload} [cudnn-det+det-algos]"]
        assert full.ok and "timed as det-algos (the same computation here)" in full.text, full.text
    # index_put_accumulate's default mode races (3 replicates, fresh processes): a finding in
    # the default mode, never a failure; det-algos must give the same bits in every process.
    assert (
        "reproducible over 3 fresh processes" in lines["ops/index_put_accumulate [det-algos]"].text
    )
