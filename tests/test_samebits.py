"""Within one run: which modes and settings give the same bits as default (the summary's lines and
the report's section), from records with known fingerprints."""

from __future__ import annotations

from pathlib import Path

from detbench.analysis.samebits import table, text
from detbench.report.write import write_report
from detbench.store.results import load_results

from .synthetic import env, record, write_run


def _run(tmp_path: Path) -> Path:
    """``attn``: det-algos keeps default's bits, the math backend gives others (recorded 2e-6
    from default), no-cudnn is nondeterministic, autocast unsupported. ``mm``: every mode
    gives default's bits. ``race``: default itself is nondeterministic."""
    recs = []
    for r in range(2):
        recs += [
            record("attn", "default", r, "a", [0.01]),
            record("attn", "det-algos", r, "a", [0.01], max_abs_diff_vs_default=0.0),
            record("attn", "default[sdpa_backend=math]", r, "m", [0.01],
                   max_abs_diff_vs_default=2e-6 if r else None),
            record("attn", "no-cudnn", r, f"n{r}", [0.01]),
            record("attn", "default[autocast=bf16]", r, None, [], status="unsupported"),
            record("mm", "default", r, "x", [0.01]),
            record("mm", "det-algos", r, "x", [0.01]),
            record("race", "default", r, f"r{r}", [0.01]),
            record("race", "det-algos", r, "d", [0.01]),
        ]  # fmt: skip
    return write_run(tmp_path / "run", recs, env())


def test_groups_of_equal_bits(tmp_path: Path) -> None:
    t = table(load_results(_run(tmp_path))).set_index("workload")
    attn = t.loc["attn"]
    assert (attn["baseline"], attn["baseline_verdict"]) == ("default", "reproducible")
    assert attn["same"] == ["det-algos"]
    assert attn["other"] == [["default[sdpa_backend=math]"]]
    assert attn["max_diff"] == {"default[sdpa_backend=math]": 2e-6}
    assert attn["nondeterministic"] == ["no-cudnn"]
    assert attn["not_run"] == {"default[autocast=bf16]": "unsupported"}
    assert (t.loc["mm", "same"], t.loc["mm", "other"]) == (["det-algos"], [])
    race = t.loc["race"]
    assert (race["baseline_verdict"], race["same"], race["other"]) == (
        "nondeterministic", [], [["det-algos"]])  # fmt: skip


def test_summary_lines(tmp_path: Path) -> None:
    assert text(load_results(_run(tmp_path))).splitlines() == [
        "same bits as default (modes whose replicates agree with each other):",
        "  s/attn: default's bits in det-algos; other bits: default[sdpa_backend=math] (max "
        "|diff| 2e-06); not reproducible: no-cudnn",
        "  s/race: default is nondeterministic: no bits to compare with; other bits: det-algos",
        "  1 workload(s): every reproducible mode gives default's bits",
    ]


def test_report_section(tmp_path: Path) -> None:
    d = _run(tmp_path)
    md_path, _ = write_report(d)
    md = md_path.read_text()
    assert "## Same bits as default" in md
    assert (
        "| s/attn | reproducible | det-algos | default\\[sdpa\\_backend=math\\] "
        "(max \\|diff\\| 2e-06) | no-cudnn | default\\[autocast=bf16\\] (unsupported) |"
    ) in md
    assert (
        "In 2 of 3 workloads a reproducible mode gives other bits than default: s/attn, s/race."
        in md
    )


def test_one_mode_has_no_section(tmp_path: Path) -> None:
    d = write_run(tmp_path / "one", [record("w", "default", r, "x", [0.01]) for r in range(2)],
                  env())  # fmt: skip
    assert table(load_results(d)).empty and text(load_results(d)) == ""
