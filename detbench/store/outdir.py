"""The one check of a folder a command is about to write into (``--out``, ``merge``'s OUT).

A command writes into a folder that does not exist yet, or an empty one, and nowhere else: a
folder that holds a user's own files (a ``report.md``, a ``plots/`` of theirs) or the results of
another run is refused in one line, with nothing in it changed. The one way back into a run's
folder is ``--resume DIR``, which never passes through here; where the folder holds a run that
stopped before its end, the refusal names that command. A run stopped before its first record
measured nothing: its folder is free for a new run as well (``measured_nothing``). ``run``,
``attribute``, ``gpu-check``, ``audit``, ``merge`` and ``submit`` all call ``refuse_used``.
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
    """Raise ``OutDirError`` unless ``out`` is new or an empty folder. ``flag``: how the user
    named the folder (``--out``, ``OUT``); ``inside``: entries of ``out`` that the command itself
    reads (the runs ``merge`` joins where they live inside OUT), which do not count."""
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
    """Whether ``out`` holds nothing but a run stopped before its first record: its env.json (a
    run's, neither finished nor merged), an empty results file and paired-timing file, its
    workers' logs and the first replicate's reference outputs. Nothing of value is there, so a
    new run may start in it: the logs are appended to, the rest written afresh."""
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
