"""The A/A check of ``detbench exec`` over many runs (issue 40): how often the A/A copy's 95%
interval excludes 1, and whether each verdict is the one known for its script.

    python tools/exec_aa.py DIR [DIR ...]         # exec folders already run
    python tools/exec_aa.py --run N --out BASE    # each script of docs/examples/scripts N times

For each folder: both verdicts, the A/A copy's throughput and steps-a-second intervals (the
report's own estimator, ``analysis.exec_verdict.mode_costs``) and whether each excludes 1, and the
cost of the second mode; then the false share over all. ``--run`` runs ``detbench exec`` with its
defaults from that folder, one script after the other, N rounds of the three, into
``BASE/SCRIPT-I``, in the environment of a user's shell: without ``PYTHONUNBUFFERED`` and
``PYTHONDONTWRITEBYTECODE``, with no GPU (``CUDA_VISIBLE_DEVICES=""``). The figures are printed;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from detbench.analysis.exec_verdict import mode_costs  # noqa: E402
from detbench.analysis.stats import within_noise  # noqa: E402
from detbench.report.execsection import fmt_interval, load  # noqa: E402

SCRIPTS = ROOT / "docs" / "examples" / "scripts"
#: What each script is known to do on a CPU (docs/examples/scripts/README.md): reproducible in
#: default, in det-algos.
KNOWN = {
    "embedding_race.py": (False, True),
    "cnn_dataloader.py": (True, True),
    "hf_tiny_lm.py": (True, True),
}


def run(n: int, base: Path) -> list[Path]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    out = []
    for i in range(1, n + 1):
        for script in KNOWN:
            d = base / f"{Path(script).stem}-{i}"
            command = [
                sys.executable,
                "-m",
                "detbench",
                "exec",
                "--out",
                str(d),
                "--",
                sys.executable,
                script,
                "--out",
                str(base / f"out-{d.name}"),
            ]
            t0 = time.monotonic()
            proc = subprocess.run(command, cwd=SCRIPTS, env=env, capture_output=True, text=True)
            took = time.monotonic() - t0
            (base / f"{d.name}.log").write_text(proc.stderr + proc.stdout)
            print(f"{d.name}: exit {proc.returncode}, {took:.0f} s", flush=True)
            out.append(d)
    return out


def verdicts(doc: dict) -> tuple[bool, ...]:
    """Per mode, whether its replicates left the same bits."""
    runs = [f for f in doc["runs"].values() if f.get("status") == "ok" and f["copy"] == 0]
    return tuple(
        len({f.get("digest") for f in runs if f["mode"] == m["name"]}) == 1
        for m in doc["config"]["modes"]
    )


def excludes_1(r: tuple[float, float, float] | None) -> bool | None:
    return None if r is None else not within_noise(r[1], r[2])


def report(dirs: list[Path]) -> None:
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
        known = KNOWN.get(doc["name"])
        ok = known is None or seen == known
        right += ok
        aa = mode_costs(doc, base, 1)
        flags = [excludes_1(r) for r in aa]
        counted += sum(f is not None for f in flags)
        widths += [max(r[0] - r[1], r[2] - r[0]) / r[0] for r in aa if r is not None]
        false += sum(bool(f) for f in flags)
        cost = mode_costs(doc, other)[0] if other else None
        said = ["reproducible" if v else "NOT reproducible" for v in seen]
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
    a = ap.parse_args()
    dirs = list(a.dirs)
    if a.run:
        if a.out is None:
            ap.error("--run needs --out")
        a.out.mkdir(parents=True, exist_ok=True)
        dirs += run(a.run, a.out)
    if not dirs:
        ap.error("give exec folders, or --run N --out BASE")
    report(dirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
