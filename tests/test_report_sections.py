"""The report's sections on memory, precision, timing quality, drift and GPU state, from a
schema-2 result set with every number known (``synthetic.gpu_run``), and an old run (the
published CPU quick run, read only) that lacks those fields."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import detbench
from detbench import analysis
from detbench.analysis import quality
from detbench.report.render import Details, Table, md_text, to_markdown
from detbench.report.sections import ReportRun, build
from detbench.report.write import write_report

from .conftest import ROOT
from .synthetic import MIB, as_version_1, env, fast_and_same, gpu, gpu_run, write_run

PUBLISHED = ROOT / "results" / "20261123-002720-cpu-quick"

#: The GPU before and after the run: its SM clock fell from 1980 to 1755 MHz while it heated.
STATE = {
    "source": "nvml",
    "reason": None,
    "before": [gpu(uuid="GPU-other"), gpu(uuid="GPU-0000", index=1)],
    "after": [
        gpu(uuid="GPU-other"),
        gpu(
            sm_clock=1755, power_draw=690, temperature=83, reasons=("sw_thermal_slowdown",), index=1
        ),
    ],
}


def gpu_env(**extra: Any) -> dict[str, Any]:
    worker = {"cuda_build": "12.8", "cuda_runtime": None, "sm_count": 132,
              "gpu_uuid": "GPU-0000", "mig_mode": "disabled"}  # fmt: skip
    doc = env(worker=worker, cuda="12.4", **extra)  # the host's figure: cuda_build wins
    doc["options"]["modes"] = ["default", "det-algos", "no-cudnn"]
    return doc


def markdown(directory: Path, records: list[dict[str, Any]], env_doc: dict[str, Any]) -> str:
    """The report's Markdown for a result set, without plots (they are tested elsewhere)."""
    write_run(directory, records, env_doc)
    df = detbench.load_results(directory)
    return to_markdown(build(ReportRun(df, env_doc)), directory)


def section(md: str, heading: str) -> str:
    """The text from ``heading`` (a whole line) to the next heading of the same or a higher
    level."""
    level = heading.split()[0]
    lines = md.splitlines()
    start = lines.index(heading)
    end = next(
        (i for i in range(start + 1, len(lines))
         if lines[i].startswith("#") and len(lines[i].split()[0]) <= len(level)),
        len(lines),
    )  # fmt: skip
    return "\n".join(lines[start:end]).rstrip("\n")


def test_peak_memory_and_its_ratio(tmp_path: Path) -> None:
    write_run(tmp_path, gpu_run())
    m = analysis.peak_memory(detbench.load_results(tmp_path)).set_index(["workload", "mode"])
    assert m.loc[("conv", "default"), "peak_memory_bytes"] == 100 * MIB  # median of 100, 100, 120
    assert m.loc[("conv", "det-algos"), "memory_ratio"] == 1.5  # 150 / 100
    assert m.loc[("conv", "no-cudnn"), "memory_ratio"] == 2.5
    assert m.loc[("mm", "det-algos"), "memory_ratio"] == 1.5  # 1.5 GiB / 1 GiB


def test_memory_columns(tmp_path: Path) -> None:
    md = markdown(tmp_path, gpu_run(), gpu_env())
    assert "| peak memory (median) | memory vs default |" in md
    assert "| conv | det-algos | reproducible | 3/3 | – | 500 | burst | 0.500 |" in md
    rows = [line for line in md.splitlines() if line.startswith(("| conv |", "| mm |"))]
    assert [r.split(" | ")[-2:] for r in rows if r.count("|") == 14] == [
        ["100 MiB", "1.00 |"], ["150 MiB", "1.50 |"], ["250 MiB", "2.50 |"],
        ["1.00 GiB", "1.00 |"], ["1.50 GiB", "1.50 |"], ["1.00 GiB", "1.00 |"],
    ]  # fmt: skip
    # The per-workload recommendation: the default mode (every mode is reproducible here, and
    # none is faster).
    assert "| conv | default | 1x (baseline) | 0% | default | 1.00x | fewest changes" in md


def test_a_zero_baseline_peak_has_no_ratio(tmp_path: Path) -> None:
    """On a CPU a workload's peak RSS growth can be 0 (an earlier workload set the peak): its
    ratio is undefined, not infinite."""
    recs = gpu_run()
    for r in recs:
        if r["mode"] == "default" and r["workload"] == "conv":
            r["peak_memory_bytes"] = 0
    m = analysis.peak_memory(detbench.load_results(write_run(tmp_path, recs)))
    conv = m[(m["workload"] == "conv") & (m["mode"] == "det-algos")].iloc[0]
    assert conv["memory_ratio"] != conv["memory_ratio"]  # NaN


def test_precision_of_the_baseline_and_the_mixed_precision_warning(tmp_path: Path) -> None:
    md = markdown(tmp_path, gpu_run(), gpu_env())
    assert (
        "Precision of the baseline: the default mode ran float32 matmuls and convolutions in "
        "TF32 (as each record says;"
    ) in md
    assert (
        "- The modes did not all run float32 in the same precision: no-cudnn ran matmuls in TF32 "
        "and convolutions in full fp32 (IEEE); default and det-algos ran matmuls and "
        "convolutions in TF32. A throughput ratio between these groups mixes the cost of "
        "precision with the cost of determinism"
    ) in md


def test_same_precision_everywhere_no_warning(tmp_path: Path) -> None:
    recs = [r for r in gpu_run() if r["mode"] != "no-cudnn"]
    md = markdown(tmp_path, recs, gpu_env())
    assert "did not all run float32 in the same precision" not in md
    assert "the default mode ran float32 matmuls and convolutions in TF32" in md


def test_timing_counts_the_records_that_reached_their_target(tmp_path: Path) -> None:
    """A run of the earlier design (each record timed in its own worker, with a stopping rule):
    its Timing section counts the records that reached their target; the warnings and the
    Method no longer say its stopping rule (issue 48)."""
    md = markdown(tmp_path, gpu_run(), gpu_env(run_stats={"wall": 1.0, "timing_target_missed": 2}))
    # 18 timed records: 2 at 0.025 stopped short of the ±1% target, the others reached it.
    assert (
        "within ±1% of the median or its timing budget ran out: 16 of 18 timed records reached "
        "the target"
    ) in section(md, "### Timing")
    assert "hit the timing budget" not in md and "The runner counted" not in md
    assert "- Timing:" not in md  # the Costs item names the earlier design
    assert "- Costs: timed by detbench's earlier design, each mode in its own worker" in md


def test_spread_across_replicates(tmp_path: Path) -> None:
    order = {"seed": 7, "replicates": [["det-algos", "default", "no-cudnn"]] * 3}
    md = markdown(tmp_path, gpu_run(), gpu_env(mode_order=order))
    spread = section(md, "### Spread across replicates")
    assert "shuffled order in each replicate (seed 7)" in spread
    # Within replicates 0, 1, 2: sqrt(0.5 x 1), sqrt(0.5 x 0.5), sqrt(0.25 x 1); pooled:
    # sqrt(0.5 x 1) from the medians over replicates.
    assert "| s | det-algos | 0.707 | 0.500 | 0.707 | 1.41x | 0: 0.707, 1: 0.500, 2: 0.500 | 2 |" \
        in spread  # fmt: skip
    assert "| s | no-cudnn | 1.000 | 1.000 | 1.000 | 1.00x |" in spread
    assert "| s | default |" not in spread  # 1 by construction
    assert "modes run in a shuffled order within each (seed 7; env.json mode\\_order)" in md


def test_spread_min_max_exact(tmp_path: Path) -> None:
    write_run(tmp_path, gpu_run())
    s = quality.replicate_spread(detbench.load_results(tmp_path)).set_index("mode")
    det = s.loc["det-algos"]
    assert det["min"] == pytest.approx(0.5) and det["max"] == pytest.approx(0.5**0.5)
    assert det["pooled"] == pytest.approx(0.5**0.5)
    assert det["per_replicate"] == pytest.approx({0: 0.5**0.5, 1: 0.5, 2: 0.5})


def test_spread_needs_every_replicate(tmp_path: Path) -> None:
    """A workload missing from one replicate is left out of every replicate's mean, so the
    replicates are compared over the same workloads."""
    recs = [r for r in gpu_run() if not (r["workload"] == "mm" and r["replicate"] == 2)]
    write_run(tmp_path, recs)
    det = quality.replicate_spread(detbench.load_results(tmp_path)).set_index("mode")
    assert det.loc["det-algos", "workloads"] == 1
    assert det.loc["det-algos", "per_replicate"] == pytest.approx({0: 0.5, 1: 0.5, 2: 0.25})


def test_gpu_state_in_the_environment(tmp_path: Path) -> None:
    md = markdown(tmp_path, gpu_run(), gpu_env(gpu_state=STATE))
    envt = section(md, "## Environment")
    for row in (
        "| cuda | 12.8 |", "| SM count | 132 |", "| GPU UUID | GPU-0000 |",
        "| MIG mode | disabled |", "| GPU state (before → after the run) | from nvml |",
        "| SM clock | 1980 → 1755 MHz (max 1980 MHz) |", "| memory clock | 2619 MHz |",
        "| power limit | 700 W |", "| power draw | 80 → 690 W |",
        "| temperature | 35 → 83 °C |", "| throttle reasons | none → sw\\_thermal\\_slowdown |",
    ):  # fmt: skip
        assert row in envt, row


def test_gpu_state_not_recorded(tmp_path: Path) -> None:
    state = {"source": None, "reason": "no NVML", "before": None, "after": None}
    md = markdown(tmp_path, gpu_run(), gpu_env(gpu_state=state))
    assert "| GPU state | not recorded (no NVML) |" in md
    md = markdown(tmp_path / "old", gpu_run(), gpu_env())  # a CUDA run from before gpu_state
    assert "| GPU state | not recorded |" in md


def test_inherited_cublas_config_and_the_baseline_that_ran_with_it(tmp_path: Path) -> None:
    doc = gpu_env()
    doc["options"]["inherited_cublas_workspace_config"] = ":4096:8"
    recs = gpu_run()
    for r in recs:
        r["cublas_workspace_config"] = ":4096:8"
    md = markdown(tmp_path, recs, doc)
    assert "| CUBLAS\\_WORKSPACE\\_CONFIG in the shell that started the run | :4096:8 |" in md
    assert "- The default mode ran with CUBLAS\\_WORKSPACE\\_CONFIG=:4096:8: the baseline" in md


def test_throttle_warning_from_gpustate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report words ``detbench.store.gpustate.throttled``'s lines as a warning (its own logic is
    tested with the module; here a stand-in returns known lines for a known state)."""
    seen: list[Any] = []

    def throttled(state: dict[str, Any], uuid: str | None = None) -> list[str]:
        seen.append((state, uuid))
        return ["GPU-0000: sw_thermal_slowdown after the run", "SM clock 1980 -> 1755 MHz"]

    monkeypatch.setattr(quality, "throttled", throttled)
    md = markdown(tmp_path, gpu_run(), gpu_env(gpu_state=STATE))
    assert seen and seen[0] == (STATE, "GPU-0000")  # the run's GPU, not every GPU
    assert (
        "- The GPU throttled during the run, so modes measured while it did look slower than "
        "they are (see the GPU state under Environment): GPU-0000: sw\\_thermal\\_slowdown after "
        "the run; SM clock 1980 -&gt; 1755 MHz"
    ) in md


def test_throttle_warning_with_the_real_module(tmp_path: Path) -> None:
    gpustate = pytest.importorskip("detbench.store.gpustate")
    lines = gpustate.throttled(STATE, uuid="GPU-0000")
    assert lines, "sw_thermal_slowdown was active when the run ended"
    md = markdown(tmp_path, gpu_run(), gpu_env(gpu_state=STATE))
    warning = next(x for x in md.splitlines() if x.startswith("- The GPU throttled"))
    assert warning.endswith(md_text("; ".join(lines)))


def test_schema_1_records_have_no_new_sections(tmp_path: Path) -> None:
    recs = [as_version_1(x) for r in range(3) for x in fast_and_same(r)]
    md = markdown(tmp_path, recs, env(gpu=None))
    for absent in ("peak memory", "Precision of the baseline", "### Timing", "GPU state",
                   "SM count", "hit the timing budget"):  # fmt: skip
        assert absent not in md, absent
    assert "| s | det-algos | 0.707 | 0.707 | 0.707 | 1.00x |" in md  # the spread still shows
    assert "same order in every replicate (this run predates shuffling)" in md
    assert "sha256 taken over the dtype" in md and "timed by detbench's earlier design" in md


def drop_column(md: str, name: str) -> str:
    """``md`` without the column ``name`` of every table that has one."""
    out: list[str] = []
    drop: int | None = None
    for line in md.splitlines(keepends=True):
        if not line.startswith("|"):
            drop = None
        elif drop is None:
            cells = line.split(" | ")
            drop = next((i for i, c in enumerate(cells) if c == name), None)
            if drop is not None:
                out.append(" | ".join(cells[:drop] + cells[drop + 1 :]))
                continue
        elif set(line.strip()) <= {"|", "-"}:
            cells = line.split("|")  # the rule under the header: |---|---|...|
            out.append("|".join(cells[: drop + 1] + cells[drop + 2 :]))
            continue
        else:
            cells = line.split(" | ")
            out.append(" | ".join(cells[:drop] + cells[drop + 1 :]))
            continue
        out.append(line)
    return "".join(out)


def strip_new(md: str) -> str:
    """``md`` without the sections an old run gains from this version of the report, and
    without what the recommendation rule of issue 12 changed (tested in test_recommend): the
    Recommendations section, the per-workload recommendation tables, the Method's bullets on
    recommendations, intervals and changed settings, the CPU warning's last sentences, and the
    failures' warning in its old words."""
    if "## Measurement quality" in md:
        md = md.replace(section(md, "## Measurement quality") + "\n\n", "")
    md = md.replace(section(md, "## Recommendations") + "\n\n", "")
    if "## Same bits as default" in md:  # issue 23: which modes give default's bits
        md = md.replace(section(md, "## Same bits as default") + "\n\n", "")
    md = re.sub(r"^\| cpu\\_capability \| [^\n]*\n", "", md, flags=re.M)  # issue 23's fact
    md = re.sub(r"\*[^*\n]*: recommendation per workload\*\n\n(\|[^\n]*\n)+\n", "", md)
    md = re.sub(r"^- (Recommendations|Intervals):[^\n]*\n", "", md, flags=re.M)
    md = drop_column(md, "clocks")  # issue 29: the clock state beside each rate
    # issue 28: the warnings read as sentences
    md = re.sub(r"ended as '(\w+)': see Failures\.", r"ended with status \1 (see Failures).", md)
    return re.sub(r"throughput differences are noise[^\n]*", "", md)


@pytest.mark.slow  # a whole published run's report: test-slow (CI runs it)
@pytest.mark.skipif(not (PUBLISHED / "results.jsonl").is_file(), reason="no published run")
def test_published_old_run_regenerates_unchanged_but_for_the_new_sections(tmp_path: Path) -> None:
    """The published CPU quick run (schema 1, no memory, precision, adaptive timing or GPU
    state) renders in a copy: its report is the published one plus the spread across
    replicates and the new recommendation rule, and nothing else changed. Its recommendations
    are now the default mode for every suite whose workloads it made reproducible (the CPU
    run's cuDNN-flag modes were picked on noise before)."""
    d = tmp_path / "run"
    shutil.copytree(PUBLISHED, d)
    md_path, _ = write_report(d)
    md = md_path.read_text()
    spread = section(md, "### Spread across replicates")
    assert "| training | no-cudnn | 1.064 | 0.854 | 1.291 | 1.51x |" in spread
    assert "### Timing" not in md and "peak memory" not in md
    assert strip_new(md) == strip_new((PUBLISHED / "report.md").read_text())
    rec = section(md, "## Recommendations")
    for suite in ("batchnorm", "bmm", "conv", "rnn", "training"):
        assert f"| {suite} | default | 1x (baseline) |" in rec
    assert "cudnn.enabled = False" not in rec and "benchmark = True" not in rec


def test_tables_have_as_many_cells_as_headers(tmp_path: Path) -> None:
    write_run(tmp_path, gpu_run(), gpu_env(gpu_state=STATE))
    df = detbench.load_results(tmp_path)
    blocks = build(ReportRun(df, gpu_env(gpu_state=STATE)))
    blocks += [x for b in blocks if isinstance(b, Details) for x in b.blocks]  # collapsed ones
    tables = [b for b in blocks if isinstance(b, Table)]
    # This run's report has its recommendations per suite and per workload, its verdicts, the
    # spread across replicates and the environment: each with rows.
    heads = {tuple(t.header[:2]) for t in tables}
    assert {
        ("suite", "recommended mode"), ("workload", "recommended mode"), ("workload", "mode"),
        ("suite", "mode"), ("", "value"),
    } <= heads, heads  # fmt: skip
    for table in tables:
        assert table.rows, table.header
        assert all(len(row) == len(table.header) for row in table.rows), table.header


def test_sizes_in_binary_units() -> None:
    from detbench.report.render import size

    assert [size(4096), size(3 * 2**20), size(1.5 * 2**30), size(None)] == [
        "4 KiB", "3 MiB", "1.50 GiB", "–",
    ]  # fmt: skip


def test_a_sustained_gpu_run_names_its_clock_mode(tmp_path: Path) -> None:
    # Issue 29's sustained clocks: what the hold did is no longer told apart (issue 48; no
    # published run held its clocks), the clock mode and the SM clock are.
    recs = gpu_run()
    for r in recs:
        r["timing"].update(
            ceiling=3.0,
            clock_mode="sustained",
            hold={"status": "ok", "acted": True, "settled": True, "seconds": 1.9},
            gpu_clocks={"status": "ok", "sm_clock_mhz": {"median": 1365}},
        )
    md = markdown(tmp_path, recs, gpu_env())
    assert "| 500 | sustained, 1365 MHz | 0.500 |" in md
