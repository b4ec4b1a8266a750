"""The report's batch-invariance section: on a real run of the probe workloads (whose behaviour is
known on this CPU: a 512x512 fp32 matmul's row 0 changes with its batch, an elementwise op's
cannot), and on synthetic records with known timings for the price of an invariant reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import detbench
from detbench.analysis.invariance_table import base_mode_of
from detbench.report import invariance as ir
from detbench.report.render import Bullets, Details, Figure, Heading, Para, Table, to_markdown
from detbench.report.write import write_report
from tests.synthetic import record, write_run


def _rows(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """``ir.table`` keyed by (workload, mode)."""
    return {(str(r["workload"]), str(r["mode"])): {str(k): v for k, v in r.items()}
            for r in ir.table(df).to_dict("records")}  # fmt: skip


@pytest.fixture(scope="module")
def probe(invariance_probe_run: Path) -> pd.DataFrame:
    return detbench.load_results(invariance_probe_run)


def test_table_of_the_probe(probe: pd.DataFrame) -> None:
    t = _rows(probe)
    assert {w for w, _ in t} == {"matmul_rows", "elementwise_rows"}
    for mode in ("default", "det-algos"):
        mm, ew = t[("matmul_rows", mode)], t[("elementwise_rows", mode)]
        assert mm["invariant"] is False and mm["first_variant_size"] in (2, 4)
        assert mm["max_abs_diff"] > 0 and mm["batch_sizes"] == (1, 2, 4, 16)
        assert ew["invariant"] is True and ew["first_variant_size"] is None
        assert ew["max_abs_diff"] == 0 and ew["replicates"] == 2


def full_table(blocks: list[Any]) -> Table:
    """The section's full per-record table: collapsed, under its compact table."""
    (tab,) = [t for b in blocks if isinstance(b, Details) for t in b.blocks if isinstance(t, Table)]
    return tab


def test_section_and_plane_of_the_probe(probe: pd.DataFrame, tmp_path: Path) -> None:
    plots = ir.write_plots(probe, tmp_path / "plots")
    assert [p.kind for p in plots] == ["invariance-plane"]
    assert plots[0].png.exists() and plots[0].png.read_bytes()[:4] == b"\x89PNG"
    blocks = ir.blocks(probe, plots)
    assert Heading(2, "Batch invariance") in blocks
    assert [b.plot for b in blocks if isinstance(b, Figure)] == plots
    tab = full_table(blocks)
    cells = {(str(r[0]), str(r[1])): str(r[3]) for r in tab.rows}
    assert cells[("elementwise_rows", "det-algos")] == "invariant"
    assert cells[("matmul_rows", "det-algos")].startswith("varies from batch ")
    text = to_markdown(blocks, tmp_path)
    assert "not batch invariant in any mode" in text and "deterministic algorithms included" in text
    points = ir.plane(probe)
    assert set(points["reproducible"]) == {0.5}  # one of the two sized workloads, in each mode


def test_no_batch_sizes_no_section(tmp_path: Path) -> None:
    df = pd.DataFrame([record("w", "default", r, "x", [0.01] * 5) for r in range(2)])
    assert ir.table(df).empty and ir.blocks(df, []) == []
    assert ir.write_plots(df, tmp_path) == []


def _sized(workload: str, mode: str, rep: int, secs: float, invariant: bool,
           **extra: Any) -> dict[str, Any]:  # fmt: skip
    sizes = (1, 2, 8)
    same = {str(b): invariant or b < 8 for b in sizes}
    return record(
        workload, mode, rep, "f", [secs] * 5, batch_invariant=invariant,
        batch_first_variant_size=None if invariant else 8,
        batch_max_abs_diff=0.0 if invariant else 1e-6, batch_same_as_smallest=same,
        batch_distinct_results=1 if invariant else 2, batch_size=8, settings_changed=[], **extra,
    )  # fmt: skip


def test_price_of_an_invariant_reference(tmp_path: Path) -> None:
    """``mm_ref`` (invariant, 4x slower than ``mm``: price 0.25x) and ``mm_bad`` (claims to be
    ``mm``'s reference, half as fast, but varies): the report gives the price and says plainly
    that mm_bad is not invariant. A record whose workload changed a setting is left out."""
    recs = []
    for r in range(3):
        for mode in ("default", "det-algos"):
            recs += [
                _sized("mm", mode, r, 0.010, False),
                _sized("mm_ref", mode, r, 0.040, True, params={"invariant_reference_of": "mm"}),
                _sized("mm_bad", mode, r, 0.020, False, params={"invariant_reference_of": "mm"}),
            ]
    changed = _sized("mm_ref", "default", 3, 9.0, False, params={"invariant_reference_of": "mm"})
    changed["settings_changed"] = ["deterministic_algorithms"]
    df = detbench.load_results(write_run(tmp_path / "run", [*recs, changed]))
    t = _rows(df)
    ref = t[("mm_ref", "default")]
    assert ref["reference_of"] == "mm" and ref["reference_invariant"] is True
    assert ref["price"] == pytest.approx(0.25) and ref["replicates"] == 3
    assert ref["price_low"] == pytest.approx(0.25) and ref["price_high"] == pytest.approx(0.25)
    assert ref["base_invariant"] is False
    bad = t[("mm_bad", "det-algos")]
    assert bad["reference_invariant"] is False and bad["price"] == pytest.approx(0.5)
    assert t[("mm", "default")]["price"] is None
    blocks = ir.blocks(df, [])
    tab = full_table(blocks)
    row = next(r for r in tab.rows if r[0] == "mm_ref" and r[1] == "default")
    assert row[7] == "0.25x [0.25, 0.25] vs mm" and row[8] == "yes"
    paras = " ".join(b.text for b in blocks if isinstance(b, Para))
    paras += " ".join(x for b in blocks if isinstance(b, Bullets) for x in b.items)
    assert (
        "mm_bad, the invariant reference of mm, is NOT batch invariant in default (varies from "
        "batch 8), det-algos (varies" in paras
    )
    assert "its invariant reference mm_ref costs 0.25x [0.25, 0.25] in default" in paras
    assert "mm_bad is NOT batch invariant itself in default, det-algos" in paras


#: A mode with a setting, beside its base mode ``default``.
MEDIUM = "default[float32_matmul_precision=medium]"


def test_price_of_a_setting_a_decoder_and_the_plane(tmp_path: Path) -> None:
    """Under ``MEDIUM`` (beside ``default``): ``mm`` becomes invariant at half the throughput
    (price 0.5x); the decoder ``dec`` (params hold ``new_tokens``: its results are completions,
    its items tokens) stays variant, 2 distinct completions over 3 batch compositions, at 0.8x;
    ``ew`` is invariant in both. ``mm_ref`` is ``mm``'s invariant reference: left out of the
    plane's fraction."""
    recs = []
    for r in range(2):
        recs += [
            _sized("mm", "default", r, 0.010, False),
            _sized("mm", MEDIUM, r, 0.020, True),
            _sized("dec", "default", r, 0.008, False, params={"new_tokens": 8}),
            _sized("dec", MEDIUM, r, 0.010, False, params={"new_tokens": 8}),
            _sized("ew", "default", r, 0.004, True),
            _sized("ew", MEDIUM, r, 0.004, True),
            _sized("mm_ref", "default", r, 0.040, True, params={"invariant_reference_of": "mm"}),
            _sized("mm_ref", MEDIUM, r, 0.040, True, params={"invariant_reference_of": "mm"}),
        ]
    df = detbench.load_results(write_run(tmp_path / "run", recs))
    t = _rows(df)
    mm = t[("mm", MEDIUM)]
    assert mm["base_mode"] == "default" and mm["base_mode_invariant"] is False
    assert mm["setting_price"] == pytest.approx(0.5) and mm["invariant"] is True
    assert t[("dec", MEDIUM)]["setting_price"] == pytest.approx(0.8)
    assert t[("mm", "default")]["base_mode"] is None
    dec = t[("dec", "default")]
    assert dec["completion"] is True and dec["distinct_results"] == 2
    assert dec["items_per_second"] == pytest.approx(10 / 0.008)
    blocks = ir.blocks(df, [])
    tab = full_table(blocks)
    assert tab.header[-1] == "price of the setting (throughput vs base mode)"
    cells = {(str(r[0]), str(r[1])): r for r in tab.rows}
    assert cells[("mm", MEDIUM)][-1] == "0.50x [0.50, 0.50] vs default"
    assert cells[("dec", "default")][4] == "2 completions of 3"
    assert cells[("dec", "default")][6] == "1250 tokens/s"
    assert cells[("ew", "default")][4] == "1 of 3" and cells[("mm", "default")][-1] == "–"
    words = " ".join(x for b in blocks if isinstance(b, Bullets) for x in b.items)
    assert (
        "dec: in default, 2 distinct completions of the same request over 3 batch compositions,"
        " at 1250 tokens/s; in " + MEDIUM + ", 2 distinct completions" in words
    )
    assert f"The setting float32_matmul_precision=medium ({MEDIUM} against default)" in words
    assert "makes mm batch invariant, at 0.50x [0.50, 0.50] the throughput of default" in words
    assert (
        "dec: the setting does not make it invariant on this device (varies from batch 8; "
        "0.80x [0.80, 0.80] the throughput of default)" in words
    )
    assert "2 workload(s) invariant in default stay invariant" in words  # ew and mm_ref
    p = {r["mode"]: r for r in ir.plane(df).to_dict("records")}
    assert p["default"]["workloads"] == 3  # mm, dec, ew: mm_ref left out
    assert p["default"]["reproducible"] == pytest.approx(1 / 3)
    assert p[MEDIUM]["reproducible"] == pytest.approx(2 / 3)
    assert p[MEDIUM]["relative_throughput"] == pytest.approx((0.5 * 0.8 * 1.0) ** (1 / 3))
    plots = ir.write_plots(df, tmp_path / "plots")
    assert "invariant references left out" in plots[0].title


def test_a_setting_is_priced_against_the_mode_that_has_all_its_other_settings() -> None:
    """``inductor_batch_invariant`` is compared with the compiled mode without it, not with the
    eager ``default``, when the run has both; the words name the added setting only."""
    compiled = "default[execution=compile]"
    both = "default[execution=compile,inductor_batch_invariant=on]"
    assert base_mode_of(both, ["default", compiled, both]) == compiled
    assert base_mode_of(both, ["default", both]) == "default"
    assert base_mode_of(compiled, ["default", compiled, both]) == "default"
    assert base_mode_of("default", ["default", compiled]) is None
    assert ir._added(both, compiled) == "inductor_batch_invariant=on"


def test_a_run_where_nothing_could_run(tmp_path: Path) -> None:
    """Every record unsupported (an SDPA backend the device lacks): the whole report builds, the
    section says nothing could run and why, each workload is listed as unsupported with its
    reason shortened, and there is no plane."""
    why = "fingerprint: No viable backend for scaled_dot_product_attention was found. This is long."
    recs = [
        record(w, "default[sdpa_backend=efficient]", r, None, [], status="unsupported",
               message=why, batch_size=8, batch_invariant=None, batch_first_variant_size=None,
               batch_max_abs_diff=None, params={"sdpa_backend": "efficient"})
        for w in ("sdpa_padded", "decoder") for r in range(2)
    ]  # fmt: skip
    run = write_run(tmp_path / "run", recs)
    md, html = write_report(run)
    text = md.read_text()
    assert html.exists() and not list((run / "plots").glob("*invariance-plane*"))
    assert "Nothing in s could run" in text
    short = ("unsupported: fingerprint: No viable backend for scaled\\_dot\\_product\\_attention "
             "was found")  # fmt: skip
    assert f"{short} (2 workload/mode pairs)" in text
    mode = "default\\[sdpa\\_backend=efficient\\]"
    assert f"| decoder (sdpa efficient) | {mode} | – | {short} |" in text
    assert "Ran in no mode: sdpa\\_padded, decoder" in text
