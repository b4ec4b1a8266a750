"""The report of ``detbench exec``: a page about one command, from its ``exec.json``
(``analysis.exec_verdict``). No suite words and no plot: one command is one point."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from detbench.analysis import exec_verdict as ev
from detbench.analysis.stats import within_noise
from detbench.core import settings as st
from detbench.report.render import Block, Bullets, Code, Heading, Para, Table
from detbench.run.execdoc import CUDNN_FLAGS
from detbench.run.execplan import EXEC_FILE
from detbench.run.execrun import census_failure, run_name
from detbench.run.execwait import stuck_words
from detbench.worker.evidence import counts_text

#: The columns of the table of modes.
HEADER = [
    "mode",
    "verdict",
    "compared in each run",
    "where the replicates first part",
    "throughput vs baseline",
    "steps/s vs baseline",
]
#: Where the seeding recipe is (the ``recipes`` suite).
RECIPE = "docs/suites.md#recipes"
#: How a mode flag's name reads to a user.
FLAG_API = {
    "benchmark": "torch.backends.cudnn.benchmark",
    "cudnn_deterministic": "torch.backends.cudnn.deterministic",
    "cudnn_enabled": "torch.backends.cudnn.enabled",
    "deterministic_algorithms": "torch.use_deterministic_algorithms",
}


def load(d: Path) -> dict[str, Any] | None:
    p = Path(d) / EXEC_FILE
    return json.loads(p.read_text()) if p.exists() else None


def fmt_interval(r: ev.Interval | None) -> str:
    """``1.06x [1.01, 1.12]``, with as many decimals (2 to 4) as show whether it holds 1."""
    if r is None:
        return "–"
    holds = within_noise(r[1], r[2])
    for nd in (2, 3, 4):
        if within_noise(round(r[1], nd), round(r[2], nd)) == holds:
            break
    return f"{r[0]:.{nd}f}x [{r[1]:.{nd}f}, {r[2]:.{nd}f}]"


def aa_reading(body: Any, steps: Any) -> str:
    """The A/A copy's verdict: whether an interval of its costs excludes 1 (a false cost)."""
    false = [name for name, _ in ev.false_costs(body, steps)]
    if not false:
        return "A/A copy: no false cost"
    return f"A/A copy: a false cost in {' and '.join(false)} (its interval excludes 1)"


def aa_warning(doc: dict[str, Any]) -> str | None:
    """What an A/A copy with a false cost means for the run's costs, or None."""
    base = ev.modes_of(doc)[0]
    false = [f"{n} {fmt_interval(r)}" for n, r in ev.false_costs(*ev.mode_costs(doc, base, 1))]
    if not false:
        return None
    return (
        f"the A/A copy, the baseline against itself, shows a cost that is not there "
        f"({'; '.join(false)}): in this run a cost of that size may be noise too. One A/A "
        "interval in 20 excludes 1 at a true 95%; more rounds (--replicates) narrow them all."
    )


def verdict_text(v: ev.ModeVerdict) -> str:
    """``reproducible (3 runs)``, with what decided where text alone differed."""
    if v.copy:
        return aa_reading(v.throughput, v.steps)
    if v.verdict == "one run":
        return "one run: no verdict"
    out = f"{v.verdict} ({len(v.runs)} runs)"
    if v.verdict == "reproducible" and v.text_parting and v.basis != "text":
        out += f"; its {v.basis} agree, other text differs (below)"
    return out


def compared_text(v: ev.ModeVerdict) -> str:
    """What one run left to compare, and what decided."""
    said = counts_text(v.counts)
    if v.basis and v.basis != "text":
        return f"{said}; the verdict rests on the {v.basis}"
    return said


def mode_rows(doc: dict[str, Any]) -> list[list[str | Code]]:
    """One row per mode (and the A/A copy): verdict, what was compared, parting, costs."""
    base = ev.modes_of(doc)[0]
    rows: list[list[str | Code]] = []
    for v in ev.verdicts(doc):
        is_base = v.mode == base and not v.copy
        rows.append(
            [
                v.mode + (" (copy 1)" if v.copy else ""),
                verdict_text(v),
                compared_text(v) if not v.copy else "–",
                "–" if v.parting is None else where_text(v.parting),
                "1x: the baseline" if is_base else fmt_interval(v.throughput),
                "1x: the baseline" if is_base else fmt_interval(v.steps),
            ]
        )
    return rows


def where_text(p: dict[str, Any]) -> str:
    """Where two replicates first part, in words."""
    w = p.get("where") or {}
    diff = p.get("max_abs_diff")
    size = f"; max |diff| {diff:.3g}" if isinstance(diff, float | int) else ""
    rounds = p.get("rounds") or [0, 1]
    intro = f"rounds {rounds[0] + 1} and {rounds[1] + 1} part at "
    kind = p.get("kind")
    if kind in ("line", "result") and w.get("stream"):
        step = f" (step {w['step']})" if w.get("step") is not None else ""
        at = f"{intro}{w.get('stream')} line {w.get('line_no')}{step}"
        if kind == "result":  # the numbers, then the line they are read from
            return f"{at}, {w['label']} {p.get('a')} vs {p.get('b')}: {w.get('text')!r}"
        return f"{at}: {p.get('a')!r} vs {p.get('b')!r}{size}"
    if kind in ("line", "result", "value") and w.get("file"):
        key = w.get("key") or w.get("label") or f"line {w.get('line_no')}"
        return f"{intro}{w.get('file')}, {key}: {p.get('a')!r} vs {p.get('b')!r}"
    if kind == "tensor":
        return f"{intro}{w.get('file')}, tensor {w.get('tensor') or p['item']}{size}"
    if kind == "scalar":
        return (
            f"{intro}{w.get('file')}, {w.get('tag')!r} at step {w.get('step')}: "
            f"{p.get('a')} vs {p.get('b')}"
        )
    if kind == "fingerprint":
        return f"{intro}detbench.fingerprint {w.get('name')!r} call {w.get('index')}"
    return f"{intro}{p.get('item')}{size}"


def _reach(ch: dict[str, Any], device: str) -> str:
    """What a setting the script changed does on ``device``, and to the records."""
    name = ch["setting"]
    if name in st.MODE_FLAGS:
        if name in CUDNN_FLAGS and device != "cuda":
            return (
                "a cuDNN flag acts on nothing on a CPU, where the script ran, so these runs "
                "measured the modes asked for; on a GPU every mode would run with it"
            )
        return (
            "every mode ran with it, so the mode measured was not the one asked for: those "
            "records count toward no verdict and no cost"
        )
    s = st.BY_NAME.get(name)
    if s is not None and device not in s.devices:
        return (
            f"it acts only on {', '.join(s.devices)}, so on this CPU it changed nothing; on a "
            "GPU every mode would run with it, the script's own choice"
        )
    if name == "float32_matmul_precision" and device != "cuda":
        return (
            "on a GPU every mode's fp32 matmuls would run in TF32 ('high') or bf16 ('medium'); "
            "on a CPU oneDNN may run them in bf16 at 'medium'. Every mode ran with it: the "
            "script's own choice, measured as part of it"
        )
    return "every mode ran with it: the script's own choice, measured as part of it"


def changes_lines(doc: dict[str, Any]) -> list[str]:
    """The flags and settings the script set itself, once per (setting, line)."""
    device = ev.device(doc)
    out = []
    for ch in ev.seen(doc, "changes"):
        via = ch.get("via") or FLAG_API.get(ch["setting"], ch["setting"])
        code = f" ({ch['code']})" if ch.get("code") else ""
        if ch.get("same"):
            out.append(
                f"{Path(ch['file']).name}:{ch['line']}{code} sets {ch['setting']} to "
                f"{ch['to']} through {via}, the level it had already: no change here"
            )
            continue
        out.append(
            f"{Path(ch['file']).name}:{ch['line']}{code} sets {ch['setting']} from "
            f"{ch['from']} to {ch['to']} through {via}, after the mode was applied: "
            + _reach(ch, device)
        )
    return out


def census_rows(doc: dict[str, Any]) -> list[list[str | Code]]:
    census = (doc.get("census") or {}).get("boot") or {}
    return [
        [
            f"{e['op']}"
            + (f" (accumulate={e['accumulate']})" if e.get("accumulate") is not None else ""),
            e["phase"],
            str(e["count"]),
            str(e["steps"]),
            f"{Path(e['file']).name}:{e['line']}" if e.get("file") else "–",
            e.get("module") or "–",
        ]
        for e in census.get("census") or []
    ]


def hung_lines(doc: dict[str, Any]) -> list[str]:
    """A line per run killed past its limit and run once more (``ExecRunner.limit``)."""
    out = []
    for h in doc.get("hung") or []:
        name = run_name(h["round"], h["mode"], h.get("copy") or 0, h["key"])
        if h.get("stuck"):
            what = stuck_words(h["stuck"])
        else:
            why = "--timeout" if h["status"] == "timeout" else "hung"
            what = f"ran past {h['limit']:.0f} s ({why})"
        out.append(
            f"{name} {what} and was killed; it ran once more, and its output is in {h['folder']}"
        )
    return out


def census_failed(doc: dict[str, Any]) -> str | None:
    """Why the run that counts the ops that can race failed, or None."""
    census = doc.get("census")
    if not census or census.get("status") == "ok":
        return None
    return census_failure(census)


_ASIDE = re.compile(
    r"^(?P<src>.+?): (?P<what>[^:]+?)(?: \(\d+, first on line \d+\))?: (?P<why>.+)$"
)


def _set_aside(doc: dict[str, Any]) -> list[str]:
    """What was set aside, a line per kind with the places it came from."""
    kinds: dict[tuple[str, str], list[str]] = {}
    for f in ev.runs_ok(doc):
        for entry in f.get("set_aside") or []:
            m = _ASIDE.match(entry)
            src, what, why = (m["src"], m["what"], m["why"]) if m else ("", entry, "")
            places = kinds.setdefault((what, why), [])
            if src and src not in places:
                places.append(src)
    out = []
    for (what, why), places in kinds.items():
        shown = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
        out.append(f"{what}" + (f" ({shown})" if shown else "") + (f": {why}" if why else ""))
    return out


def _text_differed(doc: dict[str, Any]) -> list[str]:
    out = []
    for v in ev.verdicts(doc):
        p = v.text_parting
        if p is None or v.copy:
            continue
        out.append(
            f"{v.mode}: {p.get('differing')} of {p.get('compared')} items of other text differ; "
            f"the first: {where_text(p)}"
        )
    return out


def exec_blocks(doc: dict[str, Any]) -> list[Block]:
    """The first screen: the answer about the command."""
    c = doc["config"]
    device = ev.device(doc)
    n_modes = len(c["modes"])
    out: list[Block] = [
        Heading(1, f"detbench exec: {doc.get('name') or c['command'][0]} on {device.upper()}"),
        Para(
            f"{' '.join(c['command'])} (in {c['cwd']}): {n_modes} mode{'s' * (n_modes > 1)} x "
            f"{c['replicates']} rounds, each run a fresh process, and the baseline once more "
            "each round as its own A/A check."
        ),
        Table(HEADER, mode_rows(doc)),
    ]
    if warning := aa_warning(doc):
        out.append(Para(warning[0].upper() + warning[1:]))
    if changes := changes_lines(doc):
        out += [Para("The script sets these itself:", alert=True), Bullets(changes)]
    if hung := hung_lines(doc):
        out += [Para("Runs that did not end:", alert=True), Bullets(hung)]
    if why := ev.diagnoses(doc):
        out += [
            Para(f"Every mode's replicates differ. What that points to (see {RECIPE}):"),
            Bullets(why),
        ]
    if rows := census_rows(doc):
        out += [
            Para(
                "Ops the script calls that the installed torch documents as nondeterministic "
                "by default on their device, counted in an untimed run of the baseline, whether "
                "or not the runs above agreed:"
            ),
            Table(["op", "phase", "calls", "steps", "line", "module"], rows),
        ]
    elif failed := census_failed(doc):
        out.append(Para(f"The run that counts the ops that can race failed: {failed}."))
    elif doc.get("census"):
        out.append(Para("No op documented as nondeterministic on its device was called."))
    return out + detail_blocks(doc)


def detail_blocks(doc: dict[str, Any]) -> list[Block]:
    """What was compared and set aside, the times, and how the runs were made."""
    out: list[Block] = [
        Heading(2, "What was compared"),
        Para(
            "Every run's printed lines, the files it wrote under the folder and under the "
            "folders its arguments name, and its detbench.fingerprint calls, bitwise. A verdict "
            "rests on the strongest evidence the runs leave: tensors (checkpoints, safetensors, "
            "fingerprints, values logged to TensorBoard by tag and step) and the numbers that "
            "lines, JSON keys and CSV columns label as results (loss, accuracy, perplexity, "
            "learning rate, ...); only a run with neither is judged on its text. Files whose "
            "names hold the run (TensorBoard's event files, Lightning's version_N) are matched "
            "by what they are."
        ),
    ]
    if differed := _text_differed(doc):
        out += [
            Para("Other text that differed between replicates whose verdict evidence agreed:"),
            Bullets(differed),
        ]
    if aside := _set_aside(doc):
        out += [Para("Set aside, never equal between runs:"), Bullets(aside)]
    if unreadable := sorted({u for f in ev.runs_ok(doc) for u in f.get("unreadable") or []}):
        more = f" and {len(unreadable) - 10} more" if len(unreadable) > 10 else ""
        out += [Para(f"Read as whole bytes{more}:"), Bullets(unreadable[:10])]
    rows: list[list[str | Code]] = []
    for v in ev.verdicts(doc):
        walls = sorted(f["wall"] for f in v.runs)
        starts = sorted(f["startup"] for f in v.runs if f.get("startup") is not None)
        rows.append(
            [
                v.mode + (" (copy 1)" if v.copy else ""),
                f"{walls[len(walls) // 2]:.2f} s",
                f"{starts[len(starts) // 2]:.2f} s" if starts else "–",
            ]
        )
    out += [
        Heading(2, "Times"),
        Table(["mode", "wall (median)", "start-up (median)"], rows),
        Para(
            "A cost is the geometric mean over rounds of the baseline's time over the mode's "
            "(the command's own time, its start-up apart: the interpreter, torch's import, the "
            "mode applied), paired by round, with a 95% t-interval over the rounds; steps/s the "
            "same over the steps a second the script printed. The rounds run in an order "
            "balanced over places in a round, after one untimed run of the baseline. The "
            "folder is left as the script leaves it after one run: each run started from the "
            "folder as it was, and the last run's files were put back where it wrote them."
        ),
    ]
    return out


def summary_text(d: Path) -> str:
    """The console's summary of an exec run."""
    doc = load(d)
    if doc is None:
        return ""
    lines = []
    for row in mode_rows(doc):
        lines.append(f"{row[0]}: {row[1]}; throughput {row[4]}; steps/s {row[5]}")
        if row[2] != "–":
            lines.append(f"    compared: {row[2]}")
        if row[3] != "–":
            lines.append(f"    {row[3]}")
    lines += [f"    other text: {t}" for t in _text_differed(doc)]
    if warning := aa_warning(doc):
        lines.append(f"warning: {warning}")
    lines += [f"warning: {x}" for x in changes_lines(doc)]
    lines += [f"warning: {x}" for x in hung_lines(doc)]
    lines += [f"points to: {x}" for x in ev.diagnoses(doc)]
    for r in census_rows(doc):
        lines.append(f"can race: {r[0]} ({r[1]}), {r[2]} calls in {r[3]} steps at {r[4]}")
    if failed := census_failed(doc):
        lines.append(f"can race: not counted, that run failed ({failed})")
    elif doc.get("census") and not census_rows(doc):
        lines.append("can race: no op that torch documents as nondeterministic on its device")
    return "\n".join(str(x) for x in lines)
