"""``detbench exec`` on the corpus of real training scripts (docs/examples/scripts, issue 47),
against what a separate, plain checker found of each (``truth.json``, made by
tools/exec_truth.py: two plain runs in fresh folders, every checkpoint tensor, TensorBoard scalar
and labelled printed result compared, with deterministic algorithms turned on from outside for
det-algos).

Each script runs unchanged through ``detbench exec`` in a fresh copy of its folder, on this CPU
(``CUDA_VISIBLE_DEVICES=""``), in both modes, with 2 rounds (the verdicts need two runs of each
mode; 3 rounds are the A/A check's, in tools/exec_aa.py). The races are genuine: each racing
script's op sums on 2 threads in an order their timing sets, so those scripts run alone (serial),
as locate's race tests do. A short op races only while both threads truly run at once: with the
two threads on one core (``taskset -c 0``), lightning_race.py's 8192 lookups of 8 floats
(0.2 ms) gave the same bits in 95 of 100 calls, and in CI, beside the other tests' processes,
two whole runs of it once agreed. A script whose library is not
installed skips. Whole scripts take 5-15 s a run here: slow tests.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, detbench_cli

SCRIPTS = ROOT / "docs" / "examples" / "scripts"
TRUTH = json.loads((SCRIPTS / "truth.json").read_text())
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
#: Run alone (serial): a racing script, whose truth holds where its two threads run side by
#: side; and the DDP script under torchrun, one of whose ranks can deadlock as its script ends on
#: a loaded machine (docs/measured.md, "A DDP rank left behind": plainly, beside two busy
#: processes, 5 of 20 runs ended in an abort, none of 30 alone), where exec kills a stuck run,
#: the untimed first one too, and runs it once more.
CASES = [
    pytest.param(
        e,
        id=e["script"],
        marks=[pytest.mark.serial]
        if e.get("racing_line") or "torch.distributed.run" in e["command"]
        else [],
    )
    for e in TRUTH
]


@pytest.mark.slow
@pytest.mark.parametrize("entry", CASES)
def test_exec_says_what_the_separate_checker_found(entry: dict[str, Any], tmp_path: Path) -> None:
    for lib in entry.get("libraries") or []:
        if importlib.util.find_spec(lib) is None:
            pytest.skip(f"{lib} is not installed")
    work = tmp_path / "work"
    work.mkdir()
    for py in SCRIPTS.glob("*.py"):
        shutil.copy2(py, work / py.name)
    command = [sys.executable if a == "python" else a for a in entry["command"]]
    out = tmp_path / "run"
    proc = detbench_cli(
        "exec",
        "--mode",
        "default",
        "--mode",
        "det-algos",
        "--replicates",
        "2",
        "--out",
        str(out),
        "--",
        *command,
        cwd=work,
        env=CPU_ONLY,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout
    for mode in ("default", "det-algos"):
        assert f"{mode}: {entry[mode]} (2 runs)" in said, said
    if entry.get("racing_line"):
        assert "can race: index_put (accumulate=True)" in said
        assert entry["racing_line"] in said, said
    for where in (entry.get("settings_lines") or {}).values():
        assert any(ln.startswith(f"warning: {where} ") for ln in said.splitlines()), said
    if entry.get("seeded"):  # a seeded script is never called unseeded
        assert "no seeding call" not in said and "never seeded" not in said
    elif entry["default"] == entry["det-algos"] == "not reproducible":
        assert "points to: " in said
    # the folder: the scripts as they were, and what one run of the script leaves
    assert sorted(p.name for p in work.glob("*.py")) == sorted(p.name for p in SCRIPTS.glob("*.py"))
    doc = json.loads((out / "exec.json").read_text())
    last = max(doc["runs"].values(), key=lambda f: f["start_unix"])
    for name in last["created"]:
        assert (work / name).is_file() or Path("/" + name).is_file(), name
