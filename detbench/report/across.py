"""The cross-machine verdict (``detbench.analysis.across``) as text, Markdown and a report
section, for ``detbench compare A B [C ...]`` and a set merged by ``detbench merge``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from detbench.analysis import comparable
from detbench.analysis.across import FACTS, VERDICTS, Run, across, counts, load_runs
from detbench.analysis.autotuner import AUTOTUNER, WHY
from detbench.analysis.matrix import summary_table
from detbench.report import samebits
from detbench.report.render import Block, Bullets, Code, Heading, Para, Table, text_table
from detbench.report.render import to_markdown as render

HEADER = ("workload", "mode", "verdict", "groups (runs with equal bits)", "what differs, or why")

EXPLAIN = (
    "For every workload and mode (with its settings) found in more than one run: 'same bits' "
    "when every run's fingerprints agree, 'different bits' when the runs fall into groups of "
    "equal fingerprints (the facts of their environments that differ between the groups are "
    "named), 'autotuner's choice' when a workload's runs differ only in modes with "
    "cudnn.benchmark on (it times candidate algorithms in each process and may pick another one "
    "in the next, on one GPU too), 'nondeterministic within a run' when a run's own replicates "
    "disagree (run-to-run nondeterminism, not a difference between machines), 'not comparable' "
    "when the workload or the digest differs (a CPU run and a GPU run draw other random numbers; "
    "other sizes, profile or suite source), and 'no verdict' when fewer than two runs ran it. "
    "Runs that hashed a different number of steps are compared over the steps all of them ran."
)


def labels(runs: Sequence[Run]) -> dict[str, str]:
    """A short label per run: A, B, C, ..."""
    return {r.name: chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i, r in enumerate(runs)}


def fact_lines(runs: Sequence[Run]) -> tuple[str, list[str]]:
    """The facts the runs share (one line) and each run's own where they differ."""
    facts = [r.facts for r in runs]
    same = [k for k in FACTS if len({f.get(k) for f in facts}) == 1]
    common = ", ".join(f"{FACTS[k]} {facts[0][k]}" for k in same if facts[0].get(k))
    own = []
    for r, f in zip(runs, facts, strict=True):
        diff = ", ".join(f"{FACTS[k]} {f.get(k) or '?'}" for k in FACTS if k not in same)
        own.append(f"{r.name}" + (f"  ({diff})" if diff else ""))
    return common, own


def _differs(r: Mapping[str, Any]) -> str:
    return "; ".join(f"{FACTS.get(k, k)}: {' | '.join(v)}" for k, v in r["differs"].items())


def _named(words: str, lab: Mapping[str, str]) -> str:
    """``words`` with each run's name replaced by its label (the longest names first)."""
    for name in sorted(lab, key=len, reverse=True):
        words = words.replace(name, lab[name])
    return words


def _verdict(r: Mapping[str, Any], lab: Mapping[str, str]) -> str:
    v = str(r["verdict"])
    n = r.get("compared_steps")
    over = f" over the {n} steps {'both' if len(r['steps']) == 2 else 'all'} ran" if n else ""
    if v == "different bits":
        return "DIFFERENT bits" + over
    if v == "same bits":
        return v + over
    if v == "nondeterministic within a run":
        return (
            f"nondeterministic within {' '.join(lab.get(n, n) for n in r['nondeterministic_in'])}"
        )
    if v == AUTOTUNER:
        return "autotuner's choice"
    return v


def _why(r: Mapping[str, Any], lab: Mapping[str, str]) -> str:
    """The last column: what differs between the groups, or why there is no such verdict."""
    v = r["verdict"]
    if v == "nondeterministic within a run":
        last = "run to run: not a cross-machine difference"
        if r.get("cause"):
            last += "; " + WHY
    elif v == "not comparable":
        last = "not comparable: " + str(r["note"])
    else:
        last = _differs(r) or str(r["note"] or "")
    if r.get("compared_steps"):
        each = ", ".join(f"{lab.get(n, n)} {k}" for n, k in r["steps"].items())
        last = "; ".join(x for x in (last, f"steps hashed: {each}") if x)
    if r["not_comparable"] and v != "not comparable":
        last = "; ".join(
            x for x in (last, "not comparable: " + "; ".join(r["not_comparable"].values())) if x
        )
    return _named(last, lab)


def rows(verdicts: Sequence[Mapping[str, Any]], lab: Mapping[str, str]) -> list[list[str]]:
    return [
        [
            f"{r['suite']}/{r['workload']}",
            str(r["mode"]),
            _verdict(r, lab),
            " | ".join(" ".join(lab.get(n, n) for n in g) for g in r["groups"]) or "–",
            _why(r, lab),
        ]
        for r in verdicts
    ]


def like_lines(runs: Sequence[Run], verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Whether the runs ran the same workloads (steps hashed, suites' source)."""
    lab = labels(runs)
    out = []
    for d in comparable.step_differences(verdicts):
        n = len(d["workloads"])
        each = [f"{k} in {lab.get(r, r)}" for r, k in d["steps"].items()]
        each[0] = each[0].replace(" in ", " steps in ", 1)
        out.append(
            f"The {d['suite']} suite's {n} workload{'s' if n != 1 else ''} hashed "
            f"{', '.join(each[:-1])} and {each[-1]}: their "
            f"bits are compared over the {d['common']} steps "
            f"{'both' if len(d['steps']) == 2 else 'all'} ran."
        )
    return out + comparable.source_lines(runs, lab)


def summary_line(verdicts: Sequence[Mapping[str, Any]]) -> str:
    if not verdicts:
        return "no workload and mode is in more than one run: nothing to compare"
    n = counts(verdicts)
    return f"{len(verdicts)} (workload, mode) in more than one run: " + ", ".join(
        f"{n[v]} {v}" for v in VERDICTS
    )


def to_text(runs: Sequence[Run], verdicts: Sequence[Mapping[str, Any]]) -> str:
    lab = labels(runs)
    common, own = fact_lines(runs)
    lines = ["Across machines: the same bits in every run?"]
    lines += [f"  {lab[r.name]}  {line}" for r, line in zip(runs, own, strict=True)]
    if common:
        lines.append(f"  all: {common}")
    lines.append("")
    lines += like_lines(runs, verdicts)
    lines.append("")
    lines += text_table([list(HEADER), *rows(verdicts, lab)])
    lines += ["", summary_line(verdicts)]
    return "\n".join(lines) + "\n"


def blocks(
    runs: Sequence[Run], verdicts: Sequence[Mapping[str, Any]], level: int = 2
) -> list[Block]:
    """The "Across machines" section."""
    lab = labels(runs)
    common, own = fact_lines(runs)
    items = [f"{lab[r.name]}: {line}" for r, line in zip(runs, own, strict=True)]
    if common:
        items.append(f"all runs: {common}")
    return [
        Heading(level, "Across machines"),
        Para(EXPLAIN),
        Bullets(items),
        Para(" ".join(like_lines(runs, verdicts))),
        Table(list(HEADER), rows(verdicts, lab), caption="the same bits across the runs"),
        Para(summary_line(verdicts) + "."),
    ]


def to_markdown(runs: Sequence[Run], verdicts: Sequence[Mapping[str, Any]]) -> str:
    return render(blocks(runs, verdicts), Path("."))


def set_blocks(directory: Path) -> list[Block]:
    """The report of a set of runs merged from several machines (``detbench merge``)."""
    runs = load_runs([directory])
    verdicts = across(runs)
    out: list[Block] = [
        Heading(1, f"detbench report: {len(runs)} machines"),
        Para(
            f"Runs from {len(runs)} machines merged into one set ({directory}): "
            + ", ".join(f"{r.name.rsplit(':', 1)[-1]} ({len(r.df)} records)" for r in runs)
            + ". Each record names its machine (the column 'machine')."
        ),
    ]
    out += blocks(runs, verdicts)
    for r in runs:
        name = r.name.rsplit(":", 1)[-1]
        facts = ", ".join(f"{FACTS[k]} {v}" for k, v in r.facts.items() if v)
        out += [Heading(2, f"Machine {name}"), Para(facts), Code(summary_table(r.df)[1])]
        out += [
            b if not isinstance(b, Heading) else Heading(3, b.text) for b in samebits.blocks(r.df)
        ]
    return out
