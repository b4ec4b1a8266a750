"""Like with like across runs: which runs ran the same workload (``store.identity``), over how
many steps their bits can be compared (the steps all of them hashed), and what is known of
their suites' source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from detbench.store.identity import FIELDS, describe, differences, suite_sources
from detbench.worker.fingerprint import combine


def classes(identities: Sequence[Mapping[str, str]]) -> list[list[int]]:
    """The indexes of ``identities`` in classes of the same workload (unrecorded: any)."""
    out: list[list[int]] = []
    for i, ident in enumerate(identities):
        home = next((c for c in out if not differences(identities[c[0]], ident)), None)
        if home is None:
            out.append([i])
        else:
            home.append(i)
    return out


def not_comparable(
    ref: Mapping[str, str], other: Mapping[str, str], ref_name: str, other_name: str
) -> str:
    """What differs between two runs' workloads, in words; "" where nothing does."""
    return "; ".join(
        describe(k, ref[k], other[k], ref_name, other_name) for k in differences(ref, other)
    )


def prefix(steps: Sequence[str], n: int) -> str:
    """The fingerprint a pass of its first ``n`` steps would have had."""
    return combine(list(steps[:n]))


def step_differences(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (suite, steps in each run) compared over a prefix of their steps."""
    out: dict[tuple[str, tuple[tuple[str, int], ...]], dict[str, Any]] = {}
    for r in rows:
        if r.get("compared_steps") is None:
            continue
        key = (str(r["suite"]), tuple(r["steps"].items()))
        entry = out.setdefault(
            key,
            {
                "suite": r["suite"],
                "steps": dict(r["steps"]),
                "common": r["compared_steps"],
                "workloads": [],
            },
        )
        if r["workload"] not in entry["workloads"]:
            entry["workloads"].append(r["workload"])
    return list(out.values())


def source_lines(runs: Sequence[Any], lab: Mapping[str, str]) -> list[str]:
    """What is known of the suites' source in each of ``runs`` (with ``name`` and ``env``)."""
    unrecorded = [r for r in runs if not suite_sources(r.env)]
    if not unrecorded:
        digests: dict[str, set[str]] = {}
        for r in runs:
            for suite, d in suite_sources(r.env).items():
                digests.setdefault(suite, set()).add(d)
        other = sorted(s for s, ds in digests.items() if len(ds) > 1)
        if not other:
            return ["Every run recorded its suites' source digests, and they agree."]
        return [
            f"Every run recorded its suites' source digests; those of {', '.join(other)} "
            f"differ, so their workloads are not comparable ({FIELDS['source']})."
        ]

    def commit(r: Any) -> str:
        git = r.env.get("git") or {}
        c = str(git.get("commit") or "unknown")[:7]
        return c + (" with uncommitted changes" if git.get("dirty") else "")

    who = "; ".join(f"{lab.get(r.name, r.name)}: commit {commit(r)}" for r in unrecorded)
    if len(unrecorded) == len(runs):
        said = "Neither run recorded its" if len(runs) == 2 else "No run recorded its"
    else:
        names = " and ".join(lab.get(r.name, r.name) for r in unrecorded)
        said = f"{names} did not record {'its' if len(unrecorded) == 1 else 'their'}"
    return [
        f"{said} suites' source digest ({who}), so the workloads are matched by their "
        "parameters, size profile, seed, digest and steps."
    ]
