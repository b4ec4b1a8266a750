"""``store.outdir``: the one check of a folder a command is about to write into, on the published
runs as they are (issue 28). The commands that call it are tested in test_cli and test_resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from detbench.store.outdir import OutDirError, refuse_used

from .conftest import ROOT

RESULTS = ROOT / "results"


def refusal(out: Path, flag: str = "--out", inside: tuple[str, ...] = ()) -> str:
    with pytest.raises(OutDirError) as info:
        refuse_used(out, flag, inside=inside)
    return str(info.value)


def records(run: Path) -> int:
    return len((run / "results.jsonl").read_text().splitlines())


def test_a_new_or_empty_folder_is_taken(tmp_path: Path) -> None:
    refuse_used(tmp_path / "new")
    refuse_used(tmp_path)  # empty
    (tmp_path / "parts").mkdir()
    refuse_used(tmp_path, inside={"parts"})  # what the command itself reads does not count


def test_a_published_run_is_refused_by_its_state() -> None:
    stopped = RESULTS / "20261124-084930-cuda-full-core-partial"  # stopped by a time limit
    assert refusal(stopped) == (
        f"{stopped} holds an interrupted detbench run ({records(stopped)} records): give a new "
        f"--out, or continue that run with: detbench run --resume {stopped}"
    )
    done = RESULTS / "20261124-085144-cuda-full-conv-rnn-training"
    assert refusal(done, "OUT") == (
        f"{done} holds a finished detbench run ({records(done)} records): give a new OUT "
        "(nothing was changed)"
    )


def test_an_unfinished_attribution_study_is_resumed_with_attribute(tmp_path: Path) -> None:
    study = shutil.copytree(RESULTS / "20261123-151301-cpu-quick-attribution-ops", tmp_path / "s")
    env = json.loads((study / "env.json").read_text())
    del env["finished_utc"]
    (study / "env.json").write_text(json.dumps(env))
    assert refusal(study).endswith(f"continue that run with: detbench attribute --resume {study}")


def test_other_files_are_named(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        (tmp_path / name).write_text("mine")
    assert refusal(tmp_path) == (
        f"{tmp_path} is not empty (it holds a.txt, b.txt, c.txt and 2 more): give --out a new or "
        "empty folder (nothing was changed)"
    )
    assert refusal(tmp_path / "a.txt") == (
        f"{tmp_path / 'a.txt'} is a file, not a folder: give --out a new folder (nothing was "
        "changed)"
    )
