"""The report's "Same bits as default" section: for every workload, which modes and settings give
the default mode's bits (``detbench.analysis.samebits``)."""

from __future__ import annotations

import pandas as pd

from detbench.analysis.samebits import diff_text, table
from detbench.report.render import Block, Heading, Para, Table


def blocks(df: pd.DataFrame) -> list[Block]:
    """The section: [] for a run of one mode."""
    t = table(df)
    if t.empty:
        return []
    base = str(t["baseline"].iloc[0])
    rows = []
    for r in t.to_dict("records"):
        other = "\n".join(", ".join(ms) + diff_text(r["max_diff"], ms) for ms in r["other"])
        rows.append(
            [
                f"{r['suite']}/{r['workload']}",
                str(r["baseline_verdict"]),
                ", ".join(r["same"]) or "–",
                other or "–",
                ", ".join(r["nondeterministic"]) or "–",
                ", ".join(f"{m} ({why})" for m, why in r["not_run"].items()) or "–",
            ]
        )
    differ = t[t["other"].map(len) > 0]
    summary = (
        f"In {len(differ)} of {len(t)} workloads a reproducible mode gives other bits than "
        f"{base}: "
        + ", ".join(f"{r['suite']}/{r['workload']}" for r in differ.to_dict("records"))
        + "."
        if len(differ)
        else f"Every reproducible mode gives {base}'s bits in every workload where {base} is "
        "reproducible."
    )
    return [
        Heading(2, f"Same bits as {base}"),
        Para(
            f"Does a mode or setting change the results, not only the speed? Per workload, the "
            f"modes whose replicates agree with each other, grouped by their bits: those with "
            f"{base}'s bits, and groups with other bits (one line each; 'max |diff|' is the "
            f"largest difference from the {base} mode's outputs that the run recorded). A "
            "nondeterministic mode has no bits of its own to compare; a mode that did not run "
            "(unsupported, a failure, one replicate only) is listed with its verdict."
        ),
        Table(
            [
                "workload",
                base,
                f"same bits as {base}",
                "other bits (groups)",
                "not reproducible",
                "not compared",
            ],
            rows,
            caption=f"the modes with {base}'s bits, per workload",
        ),
        Para(summary),
    ]
