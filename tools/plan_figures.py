"""The figures the plan estimates a paired run with, measured from a run: what ``run/figures.py``
holds per (device, profile), so that each figure there names the run it came from.

    python tools/plan_figures.py results/DIR

Prints, per suite (the modes with cuDNN on, and off where the device runs cuDNN):

* the verdict record: the mean over its ok records of their phases (build, fingerprint, FLOP
  count, clean-up, ...), less the timing pass and the batch-invariance pass (estimated per size
  apart), as ``VERDICT_RECORD_SECONDS`` holds it;
* a paired member's block and step: the means over its timed lines of seconds per block
  (a sample times ``number_per_block``) and of its median step (``PAIRED_BLOCK_STEP_SECONDS``);
* the share of the most rounds its groups took (``PAIRED_ROUNDS_BY_SUITE``);

and over the run: the turn's overhead (the rounds' seconds less their blocks and the one untimed
step before each, per turn: ``PAIRED_TURN_SECONDS``), the group start-ups, the torchrun
launches, an invariance pass's seconds per batch size (``INVARIANCE_SECONDS_PER_SIZE``), and the
host's seconds for the reference work (``HOST_REFERENCE_SECONDS``, from the call's plan): the
figures of one run and its reference go into ``run/figures.py`` together. Read from
``results.jsonl``, ``paired.jsonl`` and ``env.json``; nothing is written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

#: A record's phases that the plan estimates apart from its verdict: the timing pass (the rounds
#: time a paired run), the invariance pass (per batch size) and a torchrun launch (per worker).
APART = ("timing", "invariance", "launch", "rank_setup")


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def figures(run: Path) -> dict[str, Any]:
    """The figures of the run in ``run`` (see the module docstring)."""
    records = _lines(run / "results.jsonl")
    env = json.loads((run / "env.json").read_text())
    options = env.get("options") or {}
    verdict: dict[tuple[str, bool], list[float]] = defaultdict(list)
    launches: list[float] = []
    for r in records:
        if r.get("status") != "ok":
            continue
        phases = r.get("phases") or {}
        cudnn = bool(r.get("cudnn_enabled", True))
        verdict[(r["suite"], cudnn)].append(sum(v for k, v in phases.items() if k not in APART))
        if "launch" in phases:
            launches.append(float(phases["launch"]))
    blocks: dict[tuple[str, bool], list[tuple[float, float]]] = defaultdict(list)
    turns, spans = 0, 0.0
    modes = {r["mode"]: bool(r.get("cudnn_enabled", True)) for r in records}
    for line in _lines(run / "paired.jsonl"):
        if line.get("status") != "ok" or not line.get("samples"):
            continue
        n = int(line.get("number_per_block") or 1)
        step = float((line.get("timing") or {}).get("median") or statistics.median(line["samples"]))
        block = statistics.fmean(line["samples"]) * n
        blocks[(line["suite"], modes.get(line["mode"], True))].append((block, step))
        turns += len(line["samples"])
        spans += len(line["samples"]) * (block + step)
    paired = (env.get("run_stats") or {}).get("paired") or {}
    rounds = paired.get("rounds_taken") or []
    cap = int(options.get("rounds") or 0)
    keys = [k for k in dict.fromkeys(f"{r['suite']}" for r in records)]
    by_suite_rounds: dict[str, list[int]] = defaultdict(list)
    # The groups ran in the plan's order of workloads, replicate by replicate: the paired lines
    # of copy 0 of the baseline name each group in that order.
    groups = [
        line["suite"]
        for line in _lines(run / "paired.jsonl")
        if line.get("copy") == 1 and line.get("subgroup", 0) == 0
    ]
    for suite, taken in zip(groups, rounds, strict=False):
        by_suite_rounds[suite].append(taken)
    out: dict[str, Any] = {"suites": {}}
    for suite in keys:
        row: dict[str, Any] = {}
        for cudnn in (True, False):
            v = verdict.get((suite, cudnn))
            b = blocks.get((suite, cudnn))
            if v:
                row[f"verdict_{'on' if cudnn else 'off'}"] = (round(statistics.fmean(v), 4), len(v))
            if b:
                row[f"block_step_{'on' if cudnn else 'off'}"] = (
                    round(statistics.fmean(x for x, _ in b), 4),
                    round(statistics.fmean(y for _, y in b), 4),
                    len(b),
                )
        got = by_suite_rounds.get(suite)
        if got and cap:
            row["rounds_share"] = (round(statistics.fmean(got) / cap, 3), len(got))
        out["suites"][suite] = row
    if turns:
        out["turn_overhead"] = round((float(paired.get("rounds") or 0) - spans) / turns, 5)
        out["turns"] = turns
    if rounds and cap:
        out["rounds_share"] = round(statistics.fmean(rounds) / cap, 3)
    if paired.get("startup") is not None:
        out["group_startup"] = (
            round(float(paired["startup"]), 1),
            len(set(r["replicate"] for r in records)),
        )
    if launches:
        out["launch"] = (round(statistics.fmean(launches), 2), len(launches))
    out["paired_phase"] = {k: round(float(v), 1) for k, v in paired.items() if isinstance(v, float)}
    passes = [
        r for r in records if r.get("status") == "ok" and (r.get("phases") or {}).get("invariance")
    ]
    sizes = _sizes(passes)
    if sizes:
        seconds = sum(float(r["phases"]["invariance"]) for r in passes)
        out["invariance_per_size"] = (round(seconds / sizes, 5), sizes)
    calls = env.get("run_calls") or [{}]
    if calls[-1].get("host_speed"):  # the reference work on this host (run/hostspeed.py)
        out["host_speed"] = calls[-1]["host_speed"]
    return out


def _sizes(passes: list[dict[str, Any]]) -> int:
    """The batch sizes the invariance passes of ``passes`` (records) built: each record of a
    workload that declares batch sizes builds it at every one (the built-in suites'
    declarations)."""
    from detbench.core.workload import builtin_suite_files, load_file

    declared = {
        w.key: len(w.batch_sizes)
        for path in builtin_suite_files().values()
        for w in load_file(path)
        if w.batch_sizes
    }
    return sum(declared.get(f"{r['suite']}/{r['workload']}", 0) for r in passes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run's folder (results.jsonl, paired.jsonl, env.json)")
    args = ap.parse_args(argv)
    if not (args.run / "results.jsonl").is_file() or not (args.run / "env.json").is_file():
        print(
            f"plan_figures: {args.run} holds no run (results.jsonl and env.json)", file=sys.stderr
        )
        return 2
    print(json.dumps(figures(args.run), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
