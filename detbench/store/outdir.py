"""The one check of a folder a command is about to write into (``--out``, ``merge``'s OUT): a new
or empty folder, or one whose run measured nothing (``measured_nothing``); anything else is
refused in one line, nothing changed. The way back into a run is ``--resume DIR``, which the
refusal of an interrupted run names and which never passes through here.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from detbench.core.errors import DetbenchError
from detbench.store.paired import PAIRED_FILE
from detbench.store.results import ENV_FILE, RESULTS_FILE

#: How many of a folder's entries a refusal names.
SHOWN = 3
#: A run's folders beside its files: its workers' logs, and the first replicate's outputs that
#: the later replicates are compared with.
LOGS, REFERENCE = "logs", ".reference"


class OutDirError(DetbenchError):
    """A folder a command must not write into."""


def refuse_used(out: Path, flag: str = "--out", *, inside: Collection[str] = ()) -> None:
    """Raise ``OutDirError`` unless ``out`` is new or empty. ``flag``: how the user named it;
    ``inside``: entries the command itself reads (runs ``merge`` joins inside OUT), not counted."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OutDirError(
            f"{out} is a file, not a folder: give {flag} a new folder (nothing was changed)"
        )
    entries = sorted(p for p in out.iterdir() if p.name not in inside)
    if not entries or measured_nothing(out):
        return
    if (out / RESULTS_FILE).exists() or (out / ENV_FILE).exists():
        raise OutDirError(_held_run(out, flag))
    shown = [p.name + ("/" if p.is_dir() else "") for p in entries[:SHOWN]]
    more = len(entries) - len(shown)
    if more:
        shown.append(f"{more} more")
    listing = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
    raise OutDirError(
        f"{out} is not empty (it holds {listing}): give {flag} a new or empty folder (nothing "
        "was changed)"
    )


def measured_nothing(out: Path) -> bool:
    """Whether ``out`` holds nothing but a run stopped before its first record (env.json, empty
    results files, logs, reference outputs), so a new run may start in it."""
    names = {p.name for p in out.iterdir()}
    env = _env(out)
    return (
        ENV_FILE in names
        and names <= {ENV_FILE, RESULTS_FILE, PAIRED_FILE, LOGS, REFERENCE}
        and bool(env.get("options") and env.get("started_utc"))
        and not env.get("finished_utc")
        and not env.get("merged_utc")
        and _records(out) == 0
        and _records(out, PAIRED_FILE) == 0
    )


def _held_run(out: Path, flag: str) -> str:
    """The refusal of a folder that holds a detbench run: an unfinished one is resumed."""
    env = _env(out)
    records = _records(out)
    count = f"{records} record{'' if records == 1 else 's'}"
    unchanged = f"give a new {flag} (nothing was changed)"
    if env.get("merged_utc"):
        return f"{out} holds merged detbench results ({count}): {unchanged}"
    if env.get("finished_utc"):
        return f"{out} holds a finished detbench run ({count}): {unchanged}"
    if env.get("options") and env.get("started_utc"):
        command = "attribute" if env.get("study") else "run"
        return (
            f"{out} holds an interrupted detbench run ({count}): give a new {flag}, or continue "
            f"that run with: detbench {command} --resume {out}"
        )
    return f"{out} holds the results of a detbench run ({count}): {unchanged}"


def _env(out: Path) -> dict[str, Any]:
    try:
        doc = json.loads((out / ENV_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _records(out: Path, name: str = RESULTS_FILE) -> int:
    try:
        with (out / name).open(encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0
