"""What ``detbench locate`` found, in words: the text it prints, the lines ``detbench audit`` adds,
and the report's "Located" section for a run made with ``--locate``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from detbench import analysis
from detbench.core.workload import load_file, registry
from detbench.locate.stages import locate
from detbench.store.results import load_env, load_results, write_text_atomic

#: The columns of the report's table.
HEADER = [
    "workload [mode]",
    "culprit (phase)",
    "module",
    "line",
    "difference",
    "documented / fixed",
]
#: The file a run made with ``--locate`` keeps the located culprits in.
LOCATED_FILE = "located.json"


def shown(path: str) -> str:
    """A path relative to the current directory when it is inside it."""
    if not path:
        return "(no line of user code)"
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def size_words(c: dict[str, Any]) -> str:
    if c.get("max_abs_diff") is None:
        return c.get("diff_note") or "size not measured"
    bound = "at least " if c.get("diff_is_lower_bound") else ""
    return (
        f"max abs diff {bound}{c['max_abs_diff']:.3g} ({c['differing_elements']} of "
        f"{c['elements']} elements differ)"
    )


def module_words(c: dict[str, Any]) -> str:
    if c.get("module") is None:
        return "outside any nn.Module"
    if c["module"] == "":
        return f"module (root {c.get('module_type')})"
    return f"module {c['module']} ({c.get('module_type')})"


def culprit_lines(c: dict[str, Any], indent: str = "    ") -> list[str]:
    """One culprit in a few lines of text."""
    how = f" (backward of {c['forward_op']}, node {c['node']})" if c.get("forward_op") else ""
    steps = ", ".join(str(s) for s in c.get("steps", []))
    lines = [
        f"{c['op']} in the {c['phase']} pass{how}, {module_words(c)}",
        f"  at {shown(c['file'])}:{c['line']}  {c.get('code', '')}".rstrip(),
        f"  step{'s' if len(c.get('steps', [])) > 1 else ''} {steps}: {size_words(c)}",
    ]
    if c.get("reads_uninitialized_from"):
        lines.append(f"  reads memory left uninitialized by {c['reads_uninitialized_from']}")
    kind = {
        "deterministic": "deterministic algorithms make it deterministic",
        "raises": "it raises under deterministic algorithms",
    }.get(str(c.get("documented_kind")), "")
    lines.append(
        f"  documented by torch as nondeterministic ({kind}): {c['documented_as']}"
        if c.get("documented")
        else "  not in the list of ops torch documents as nondeterministic"
    )
    if c.get("deterministic_mode_note"):
        fixed = c.get("fixed_by_deterministic_mode")
        verdict = {True: "fixes it", False: "does not fix it", None: "unknown"}[fixed]
        lines.append(f"  the deterministic mode {verdict}: {c['deterministic_mode_note']}")
    return [indent + line for line in lines]


def parting(loc: dict[str, Any]) -> str:
    """How the fresh processes of a locate that is not reproducible differed, in one sentence:
    at the culprits, at the op where they part, or at no op (only the step's outputs differ)."""
    p = loc["processes"]
    same_outputs = loc.get("outputs_reproducible") is not False
    outputs = "the step's outputs " + ("were the same" if same_outputs else "differ too")
    if loc.get("outputs_reproducible") is None:  # a script's (locate -- COMMAND): ops only
        same_outputs, outputs = False, "compare what the runs leave with detbench exec"
    first = loc.get("first_difference")
    split = loc.get("parted_at")
    if loc["culprits"]:
        n = len(loc["culprits"])
        rounded = ": the difference was rounded away" if same_outputs else ""
        return (
            f"{p} fresh processes parted at {n} op{'s' if n > 1 else ''} that gave other bits "
            f"from equal inputs (below); {outputs}{rounded}"
        )
    if first:
        return (
            f"the bits of {p} fresh processes part at {first['op']} at {shown(first['file'])}:"
            f"{first['line']} (step {first['step']}), whose inputs already differed: no op with "
            "equal inputs gave other outputs, so the difference arose where the recorder cannot "
            f"see (see `detbench locate --help`); {outputs}"
        )
    if split:
        return (
            f"{p} fresh processes called different ops from op {split['index']} on "
            f"({split['op']} at {shown(split['file'])}:{split['line']}), with the same bits in "
            f"every op before it; {outputs}"
        )
    return (
        f"the step's outputs differed in {p} fresh processes, yet each of the {loc['ops']} ops "
        "the recorder saw gave the same bits in every one: the difference arose outside torch's "
        "dispatcher (see `detbench locate --help`), so no op can be named"
    )


def to_text(located: list[dict[str, Any]]) -> str:
    """What ``detbench locate`` prints for people."""
    out: list[str] = []
    for loc in located:
        head = f"{loc['workload']} on {loc['device']}, mode {loc['mode']} (torch {loc['torch']})"
        out.append(head)
        if loc.get("error"):
            out.append(f"  could not be recorded: {loc['error']}")
        elif loc["reproducible"]:
            also = (
                "" if loc.get("outputs_reproducible") is None else ", and so did the step's outputs"
            )
            out.append(
                f"  reproducible: all {loc['ops']} ops gave the same bits in "
                f"{loc['processes']} fresh processes{also}"
            )
        else:
            n = len(loc["culprits"])
            out.append(f"  NOT reproducible: {parting(loc)}")
            if n:
                out.append(f"  {n} culprit{'s' if n > 1 else ''} (inputs equal, outputs not):")
                for i, c in enumerate(loc["culprits"], 1):
                    lines = culprit_lines(c)
                    out.append(f"  {i}. " + lines[0].lstrip())
                    out += lines[1:]
                out.append(
                    f"  {loc['carried']} later ops only carried the difference (their inputs "
                    "already differed)"
                )
            if loc.get("parted_at") and (n or loc.get("first_difference")):
                p = loc["parted_at"]
                out.append(
                    f"  the runs called different ops from op {p['index']} on ({p['op']} at "
                    f"{shown(p['file'])}:{p['line']}): compared up to there"
                )
        if loc.get("sampled_tensors"):
            out.append(
                f"  {loc['sampled_tensors']} large tensors were digested on a strided sample"
            )
        out += [f"  note: {n}" for n in loc.get("notes", [])]
        out.append("")
    return "\n".join(out)


def to_json(located: list[dict[str, Any]]) -> str:
    """``--json``: one object for one workload, a list of them for several."""
    doc: Any = located[0] if len(located) == 1 else located
    return json.dumps(doc, indent=2, default=str)


# --- after a run (run --locate) -----------------------------------------------------------------


def load(run_dir: Path) -> list[dict[str, Any]]:
    """What ``run --locate`` found for the run in ``run_dir`` ([] when it was not asked)."""
    path = run_dir / LOCATED_FILE
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("located", []))


def locate_run(run_dir: Path, stream: Any) -> list[dict[str, Any]]:
    """``run --locate``: locate each nondeterministic (workload, mode), kept in ``located.json``."""
    v = analysis.verdicts(load_results(run_dir))
    bad = v[v["verdict"] == "nondeterministic"]
    options = load_env(run_dir).get("options") or {}
    for src in options.get("sources") or []:
        load_file(src)
    known = registry()
    todo: dict[tuple[str, str], list[str]] = {}
    for r in bad.to_dict("records"):
        key = f"{r['suite']}/{r['workload']}"
        w = known.get(key)
        if w is None or not w.source:
            continue
        todo.setdefault((w.source, str(r["mode"])), []).append(key)
    found: list[dict[str, Any]] = []
    device, profile = options.get("device"), options.get("profile")
    for (source, mode), keys in todo.items():
        print(f"detbench: locating {', '.join(keys)} in {mode}", file=stream)
        located = locate(source, device, mode, profile=profile, stream=stream, only=keys)
        found += [loc.to_json() for loc in located]
    write_text_atomic(run_dir / LOCATED_FILE, json.dumps({"located": found}, indent=1, default=str))
    return found
