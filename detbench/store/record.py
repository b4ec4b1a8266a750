"""The constructors of a record, one for each kind: ``measured`` (a worker's), ``lost`` (a
workload a worker took down with it) and ``merged`` (a shard's or a machine's, in a merged set).
Nobody else builds a record's dict; each returns one that ``schema.problem`` accepts.
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from detbench.core.modes import Mode, record_fields
from detbench.store.schema import ALWAYS, SCHEMA_VERSION, Status, check


def _blank() -> dict[str, Any]:
    """Every field of a version-4 record, None."""
    return dict.fromkeys(ALWAYS)


def measured(
    *,
    suite: str,
    workload: str,
    params: Mapping[str, Any],
    mode: Mode,
    settings: Mapping[str, Any],
    replicate: int,
    seed: int,
    device: str,
    profile: str,
    num_threads: int,
    batch_size: int | None,
    fingerprint_method: str,
) -> dict[str, Any]:
    """A worker's record of one workload before its passes: status ``ok``, nothing measured.
    ``settings``: every setting's column as read back after applying ``mode``."""
    rec = _blank()
    rec.update(
        {
            "schema_version": SCHEMA_VERSION,
            "suite": suite,
            "workload": workload,
            "params": dict(params),
            **record_fields(mode),
            **settings,
            "settings_changed": [],
            "batch_size": batch_size,
            "replicate": replicate,
            "seed": seed,
            "device": device,
            "profile": profile,
            "num_threads": num_threads,
            "status": Status.OK,
            "fingerprint_method": fingerprint_method,
            "phases": {},
        }
    )
    return check(rec)


#: What a runner knows of a workload its worker took down with it, beside its replicate.
RUNNER_KNOWS = ("mode_position", "seed", "device", "device_name", "profile", "node", "job", "utc")


def lost(
    key: str,
    mode: Mode,
    status: str,
    message: str,
    exit_code: int | None,
    *,
    replicate: int,
    **known: Any,
) -> dict[str, Any]:
    """The record of workload ``key`` ("suite/name") that a worker took down with it (``crashed``
    or ``timeout``); ``known``: ``RUNNER_KNOWS``. The rest is None: the worker never said."""
    suite, name = key.split("/", 1)
    unknown = sorted(set(known) - set(RUNNER_KNOWS))
    if unknown:
        raise TypeError(f"lost(): not what a runner knows of a lost workload: {unknown}")
    rec = _blank()
    rec.update(schema_version=SCHEMA_VERSION, suite=suite, workload=name, **record_fields(mode))
    rec.update(known, replicate=replicate)
    rec.update(status=status, message=message, exit_code=exit_code)
    return check(rec)


def merged(
    rec: Mapping[str, Any], *, shard: str | None = None, machine: str | None = None
) -> dict[str, Any]:
    """A copy of ``rec`` that names its ``shard`` ("K/N") or ``machine`` in a merged set."""
    if (shard is None) == (machine is None):
        raise TypeError("merged(): give a shard or a machine")
    where = {"shard": shard} if shard is not None else {"machine": machine}
    return check({**rec, **where})


#: A frame of a traceback as Python prints it: its file, line and function.
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M)


def _library_dirs() -> tuple[Path, ...]:
    """Where code that is not the user's lives: detbench, Python's library and packages."""
    paths = sysconfig.get_paths()
    dirs = [Path(__file__).resolve().parents[1]]
    dirs += [Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    return tuple(dict.fromkeys(dirs))


def user_frame(traceback_text: object) -> str | None:
    """``FILE:LINE (in FUNC)`` of the deepest user frame of a failure's traceback, or None."""
    if not isinstance(traceback_text, str):
        return None
    library = _library_dirs()
    found = None
    for m in _FRAME.finditer(traceback_text):
        name = m["file"]
        if name.startswith("<"):  # <frozen runpy>, <string>
            continue
        path = Path(name).resolve()
        if not any(path.is_relative_to(d) for d in library):
            found = f"{name}:{m['line']} (in {m['func']})"
    return found
