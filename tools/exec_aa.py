"""The A/A check of ``detbench exec`` over many runs: how often the A/A copy's 95% interval
excludes 1, and whether each verdict is the one known for its script (``--truth``: a list of
scripts, their commands and their verdicts in each mode, established by a separate check).

    python tools/exec_aa.py DIR [DIR ...]         # exec folders already run
    python tools/exec_aa.py --run N --out BASE    # each script of the corpus N times
    python tools/exec_aa.py --run 3 --out BASE --truth tests/heldout_scripts/truth.json

For each folder: both verdicts, the A/A copy's throughput and steps-a-second intervals (the
report's own estimator, ``analysis.exec_verdict.mode_costs``) and whether each excludes 1, and the
cost of the second mode; then the false share over all. ``--run`` runs ``detbench exec`` with its
defaults, one script after the other, N rounds of the corpus, into ``BASE/SCRIPT-I``, each in a
fresh copy of the scripts' folder (``BASE/work-SCRIPT-I``), in the environment of a user's
shell: without ``PYTHONUNBUFFERED`` and ``PYTHONDONTWRITEBYTECODE``, with no GPU
(``CUDA_VISIBLE_DEVICES=""``). The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from detbench.analysis.exec_verdict import mode_costs  # noqa: E402
from detbench.analysis.exec_verdict import verdicts as mode_verdicts  # noqa: E402
from detbench.analysis.stats import within_noise  # noqa: E402
from detbench.report.execsection import fmt_interval, load  # noqa: E402

SCRIPTS = ROOT / "docs" / "examples" / "scripts"
#: What each script of the corpus is known to do on a CPU, by a separate check
#: (tools/exec_truth.py: two plain runs, every tensor and labelled result compared).
TRUTH = SCRIPTS / "truth.json"


def corpus(truth: Path, only: list[str]) -> list[dict]:
    """The scripts of ``truth`` (``only``: those named), less those whose libraries are absent."""
    out = []
    for entry in json.loads(truth.read_text()):
        if only and entry["script"] not in only:
            continue
        missing = [m for m in entry.get("libraries") or [] if importlib.util.find_spec(m) is None]
        if missing:
            print(f"{entry['script']}: left out, {', '.join(missing)} not installed")
            continue
        out.append(entry)
    return out


def run(n: int, base: Path, entries: list[dict], folder: Path) -> list[Path]:
    """Each script ``n`` times through ``detbench exec`` with its defaults, each time in a
    fresh copy of its folder's scripts (what a user's folder holds before a first run)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    out = []
    for i in range(1, n + 1):
        for entry in entries:
            name = Path(entry["script"]).stem
            d, work = base / f"{name}-{i}", base / f"work-{name}-{i}"
            work.mkdir(parents=True)
            for py in folder.glob("*.py"):
                shutil.copy2(py, work / py.name)
            user = [sys.executable if a == "python" else a for a in entry["command"]]
            command = [sys.executable, "-m", "detbench", "exec", "--out", str(d), "--", *user]
            t0 = time.monotonic()
            proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
            took = time.monotonic() - t0
            (base / f"{d.name}.log").write_text(proc.stderr + proc.stdout)
            print(f"{d.name}: exit {proc.returncode}, {took:.0f} s", flush=True)
            out.append(d)
    return out


def verdicts(doc: dict) -> dict[str, str]:
    """Per mode, its verdict in the report's words."""
    return {v.mode: v.verdict for v in mode_verdicts(doc) if not v.copy}


def excludes_1(r: tuple[float, float, float] | None) -> bool | None:
    return None if r is None else not within_noise(r[1], r[2])


def report(dirs: list[Path], truth: dict[str, dict]) -> None:
    counted = false = right = read = 0
    widths: list[float] = []
    for d in dirs:
        doc = load(d)
        if doc is None:
            print(f"{d}: no exec.json, not an exec run: left out")
            continue
        read += 1
        base = doc["config"]["modes"][0]["name"]
        other = doc["config"]["modes"][1]["name"] if len(doc["config"]["modes"]) > 1 else None
        seen = verdicts(doc)
        known = truth.get(doc["name"])
        ok = known is None or all(known.get(m) == v for m, v in seen.items())
        right += ok
        aa = mode_costs(doc, base, 1)
        flags = [excludes_1(r) for r in aa]
        counted += sum(f is not None for f in flags)
        widths += [max(r[0] - r[1], r[2] - r[0]) / r[0] for r in aa if r is not None]
        false += sum(bool(f) for f in flags)
        cost = mode_costs(doc, other)[0] if other else None
        said = [f"{m}: {v}" for m, v in seen.items()]
        print(
            f"{d.name}: {' / '.join(said)}{'' if ok else ' (NOT as known)'}; "
            f"A/A throughput {fmt_interval(aa[0])}{' FALSE' if flags[0] else ''}, "
            f"steps/s {fmt_interval(aa[1])}{' FALSE' if flags[1] else ''}; "
            f"{other} {fmt_interval(cost)}"
        )
    share = f"{false / counted:.1%}" if counted else "-"
    print(f"verdicts as known: {right} of {read}")
    print(f"A/A intervals that exclude 1: {false} of {counted} ({share})")
    if widths:
        print(f"median half-width of the A/A intervals: {statistics.median(widths):.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--run", type=int, metavar="N", help="run each script N times first")
    ap.add_argument("--out", type=Path, help="where --run puts its folders")
    ap.add_argument("--truth", type=Path, default=TRUTH, help=f"the known verdicts ({TRUTH})")
    ap.add_argument("--only", action="append", default=[], help="only this script (repeatable)")
    a = ap.parse_args()
    dirs = list(a.dirs)
    entries = corpus(a.truth, a.only)
    if a.run:
        if a.out is None:
            ap.error("--run needs --out")
        a.out.mkdir(parents=True, exist_ok=True)
        dirs += run(a.run, a.out, entries, a.truth.parent)
    if not dirs:
        ap.error("give exec folders, or --run N --out BASE")
    report(dirs, {e["script"]: e for e in json.loads(a.truth.read_text())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
