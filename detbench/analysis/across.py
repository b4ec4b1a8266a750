"""The cross-machine verdict (docs/across-machines.md): do two or more runs give the same bits for
the same workload in the same mode and settings? Only like is compared with like
(``analysis.comparable``): other runs are "not comparable", never "different". A workload
nondeterministic inside a run gets no cross-machine verdict, and one that differs only in modes with
cudnn.benchmark on is put down to the autotuner (``analysis.autotuner``). A merged multi-machine set
counts as one run per machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import autotuner, comparable
from detbench.analysis.cause import autotuned
from detbench.analysis.labels import counted, mode_key, mode_of
from detbench.store.identity import identity, text
from detbench.store.results import ENV_FILE, env_facts, load_env, load_results
from detbench.store.schema import Status

#: The facts of a run's environment that may explain other bits, with the words for them.
FACTS = {
    "device": "device",
    "gpu": "GPU",
    "sm_count": "SM count",
    "driver": "driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "torch": "torch",
    "cpu_capability": "CPU capability",
    "cpu": "CPU",
    "threads": "threads",
    "python": "Python",
}

#: The verdicts, in the order a summary counts them.
VERDICTS = (
    "same bits",
    "different bits",
    autotuner.AUTOTUNER,
    "nondeterministic within a run",
    "not comparable",
    "no verdict",
)


@dataclass
class Run:
    """One run: its name (the path, or ``DIR:machine`` in a merged set), records and env.json."""

    name: str
    df: pd.DataFrame
    env: dict[str, Any]
    path: Path | None = None

    @property
    def facts(self) -> dict[str, str | None]:
        facts = env_facts(self.env)
        sm = (self.env.get("worker") or {}).get("sm_count")
        return {
            k: (str(sm) if sm is not None else None) if k == "sm_count" else facts.get(k)
            for k in FACTS
        }


def machines(env: Mapping[str, Any]) -> dict[str, Any]:
    """The machines of a merged multi-machine set (name -> its env.json); {} for one run."""
    m = env.get("machines")
    return dict(m) if isinstance(m, dict) else {}


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    """The runs in ``paths``, in order; a multi-machine set gives one run per machine."""
    runs: list[Run] = []
    for p in paths:
        d = Path(p)
        df = load_results(d)
        env = load_env(d) if (d / ENV_FILE).exists() else {}
        set_of = machines(env)
        if not set_of or "machine" not in df.columns:
            runs.append(Run(str(p), df, env, d))
            continue
        for name in env.get("machine_order") or list(set_of):
            part = df[df["machine"] == name].reset_index(drop=True)
            runs.append(Run(f"{p}:{name}", part, dict(set_of[name]), d))
    return runs


@dataclass
class Side:
    """One run's records of one (suite, workload, mode)."""

    run: str
    state: str  # reproducible | single | nondeterministic | the status it failed with
    fingerprints: list[str] = field(default_factory=list)
    #: The workload it ran (``store.identity``).
    inputs: dict[str, str] = field(default_factory=dict)
    #: Distinct fingerprints by digest method (``--fingerprint both``: both methods).
    digests: dict[str, list[str]] = field(default_factory=dict)
    #: By digest method, the first ok record's step digests.
    steps: dict[str, list[str]] = field(default_factory=dict)
    #: cudnn.benchmark was on (the records' read-back).
    benchmark: bool = False

    @property
    def ran(self) -> bool:
        return self.state in ("reproducible", "single", "nondeterministic")

    @property
    def n_steps(self) -> int | None:
        """The steps its fingerprint pass hashed (None: no step digests recorded)."""
        counts = {len(s) for s in self.steps.values() if s}
        return min(counts) if counts else None


def _distinct(col: pd.Series) -> list[str]:
    return list(dict.fromkeys(str(x) for x in col))


def _list(x: Any) -> list[str]:
    return [str(d) for d in x] if isinstance(x, (list, tuple)) else []


def _side(run: Run, mode: str, g: pd.DataFrame) -> Side:
    ok = g[(g["status"] == Status.OK) & g["fingerprint"].notna()]
    prints = _distinct(ok["fingerprint"])
    first = ok.iloc[0] if len(ok) else g.iloc[0]
    method = text(first.get("fingerprint_method")) or "sha256"
    digests, steps = {method: prints}, {method: _list(first.get("step_fingerprints"))}
    if "fingerprint_sha256" in ok and ok["fingerprint_sha256"].notna().all() and len(ok):
        digests["sha256"] = _distinct(ok["fingerprint_sha256"])
        steps["sha256"] = _list(first.get("step_fingerprints_sha256"))
    if len(prints) > 1:
        state = "nondeterministic"
    elif len(ok) >= 2:
        state = "reproducible"
    elif len(ok) == 1:
        state = "single"
    else:
        bad = g[g["status"] != Status.OK]["status"]
        state = str(bad.mode().iloc[0]) if len(bad) else "no fingerprint"
    return Side(
        run.name, state, prints, identity(first, run.env), digests, steps, _autotuned(first, mode)
    )


def _autotuned(rec: pd.Series, mode: str) -> bool:
    """Whether cuDNN's autotuner ran, as the record read it back, else as the mode says."""
    bench, cudnn = rec.get("benchmark"), rec.get("cudnn_enabled")
    if isinstance(bench, (bool, np.bool_)):
        return bool(bench) and not (isinstance(cudnn, (bool, np.bool_)) and not cudnn)
    return autotuned(mode)


def sides(run: Run) -> dict[tuple[str, str, str], Side]:
    """Each (suite, workload, mode) of ``run``: its own verdict, fingerprints and workload."""
    if run.df.empty:
        return {}
    df = counted(run.df)
    return {
        (str(suite), str(workload), str(mode)): _side(run, str(mode), g)
        for (suite, workload, mode), g in df.groupby(["suite", "workload", "mode"], sort=False)
    }


def _differs(
    groups: list[list[str]], facts: Mapping[str, Mapping[str, str | None]]
) -> dict[str, list[str]]:
    """Fact -> each group's value(s) ("?": not recorded; "a / b": the group's runs differ), for
    the facts whose recorded values differ between ``groups``."""
    out: dict[str, list[str]] = {}
    for k in FACTS:
        per = [" / ".join(dict.fromkeys(facts[r].get(k) or "?" for r in g)) for g in groups]
        known = {facts[r].get(k) for g in groups for r in g} - {None}
        if len(set(per)) > 1 and len(known) > 1:
            out[k] = per
    return out


def _comparable(ran: list[Side]) -> tuple[list[Side], str]:
    """The largest class of ``ran`` with the same workload (ties: the first run's class), and
    the digest method most of them have (sha256 on a tie: a --fingerprint both run has it)."""
    groups = comparable.classes([s.inputs for s in ran])
    largest = [ran[i] for i in max(groups, key=len)]

    def shared(m: str) -> tuple[int, bool]:
        return -sum(m in s.digests for s in largest), m != "sha256"

    methods = sorted({m for s in largest for m in s.digests}, key=shared)
    method = methods[0] if methods else "sha256"
    return [s for s in largest if method in s.digests], method


def _unlike(ref: Side, s: Side, method: str) -> str:
    """What keeps ``s`` from being compared with ``ref``, in words."""
    words = [comparable.not_comparable(ref.inputs, s.inputs, ref.run, s.run)]
    if method not in s.digests:
        words.append(
            f"digest method {method} ({ref.run}) vs {' + '.join(sorted(s.digests))} ({s.run})"
        )
    return "; ".join(w for w in words if w)


def _row(key: tuple[str, str, str], present: list[Side]) -> dict[str, Any]:
    suite, workload, mode = key
    m = mode_of(mode)
    return {
        "suite": suite,
        "workload": workload,
        "mode": mode,
        "base_mode": m.base_name if m else mode,
        "settings": m.overrides if m else {},
        "benchmark": any(s.benchmark for s in present),
        "device": " / ".join(dict.fromkeys(s.inputs.get("device") or "?" for s in present)),
        "runs": [s.run for s in present],
        "same_bits": None,
        "verdict": "no verdict",
        "groups": [],
        "fingerprints": [],
        "differs": {},
        "nondeterministic_in": [],
        "not_comparable": {},
        "not_run": {},
        "steps": {},
        "compared_steps": None,
        "cause": None,
        "machine_facts": {},
        "note": "",
    }


def verdict(
    key: tuple[str, str, str], present: list[Side], facts: Mapping[str, Mapping[str, str | None]]
) -> dict[str, Any]:
    """The verdict of one (suite, workload, mode), as the JSON of ``detbench compare --json``."""
    row = _row(key, present)
    ran = [s for s in present if s.ran]
    row["not_run"] = {s.run: s.state for s in present if not s.ran}
    if len(ran) < 2:
        why = ", ".join(f"{r} {st}" for r, st in row["not_run"].items())
        row["note"] = "ran in fewer than two runs" + (f": {why}" if why else "")
        return row
    best, method = _comparable(ran)
    row["not_comparable"] = {s.run: _unlike(best[0], s, method) for s in ran if s not in best}
    if len(best) < 2:
        row["verdict"] = "not comparable"
        row["note"] = "; ".join(row["not_comparable"].values())
        return row
    counts = {s.run: s.n_steps for s in best}
    common = None
    if len(set(counts.values())) > 1 and None not in counts.values():
        common = min(c for c in counts.values() if c is not None)
        row["steps"], row["compared_steps"] = counts, common
    nondet = [s for s in best if s.state == "nondeterministic"]
    row["nondeterministic_in"] = [s.run for s in nondet]
    groups: dict[str, list[str]] = {}
    for s in best:
        if s.state != "nondeterministic":
            bits = (
                s.digests[method][0]
                if common is None
                else comparable.prefix(s.steps[method], common)
            )
            groups.setdefault(bits, []).append(s.run)
    row["groups"], row["fingerprints"] = list(groups.values()), list(groups)
    if nondet:
        row["verdict"] = "nondeterministic within a run"
        row["note"] = (
            f"run to run within {', '.join(row['nondeterministic_in'])}: not a "
            "cross-machine difference"
        )
        return row
    row["same_bits"] = len(groups) == 1
    row["verdict"] = "same bits" if row["same_bits"] else "different bits"
    if not row["same_bits"]:
        row["differs"] = _differs(row["groups"], facts)
        if not row["differs"]:
            row["note"] = "no recorded fact of the environments differs between the groups"
    return row


def across(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """The verdict of every (suite, workload, mode) found in more than one of ``runs``."""
    per = [sides(r) for r in runs]
    facts = {r.name: r.facts for r in runs}
    keys = list(dict.fromkeys(k for s in per for k in s))
    order = {w: i for i, w in enumerate(dict.fromkeys((k[0], k[1]) for k in keys))}
    keys.sort(key=lambda k: (k[0], order[(k[0], k[1])], mode_key(k[2])))
    out = []
    for key in keys:
        present = [s[key] for s in per if key in s]
        if len(present) > 1:
            out.append(verdict(key, present, facts))
    autotuner.label(out)
    return out


def counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows have each verdict, in ``VERDICTS`` order."""
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
