"""The report's "Located" section: what ``run --locate`` found (``located.json``)."""

from __future__ import annotations

from typing import Any

from detbench.locate.report import HEADER, module_words, parting, shown, size_words
from detbench.report.render import Code, Heading, Para, Table


def blocks(located: list[dict[str, Any]]) -> list[Any]:
    """The report's "Located" section: [] for a run made without ``--locate``."""
    if not located:
        return []
    rows: list[list[str | Code]] = []
    for loc in located:
        name = f"{loc['workload']} [{loc['mode']}]"
        if loc.get("error"):
            rows.append([name, "could not be recorded", "", "", str(loc["error"])[:200], ""])
            continue
        if not loc["culprits"]:
            what = "reproducible under the recorder" if loc["reproducible"] else parting(loc)
            rows.append([name, what, "", "", "", ""])
            continue
        for c in loc["culprits"]:
            fixed = {True: "yes", False: "no"}.get(c.get("fixed_by_deterministic_mode"), "unknown")
            rows.append(
                [
                    name,
                    Code(f"{c['op']} ({c['phase']})"),
                    module_words(c).removeprefix("module "),
                    Code(f"{shown(c['file'])}:{c['line']}  {c.get('code', '')}".strip()),
                    size_words(c),
                    f"{'yes' if c.get('documented') else 'no'} / {fixed}",
                ]
            )
    return [
        Heading(2, "Located"),
        Para(
            "For each nondeterministic (workload, mode) of this run, detbench locate recorded "
            "every op of its build and fingerprint steps in fresh processes and compared them: "
            "a culprit is an op whose inputs were bitwise equal in both runs and whose outputs "
            "were not; the ops after it only carried the difference. Documented: the installed "
            "torch lists the op as nondeterministic. Fixed: the culprit no longer differs in "
            "cudnn-det+det-algos."
        ),
        Table(HEADER, rows),
    ]
