"""A user's script, unchanged, inside ``detbench exec`` and ``detbench locate -- COMMAND``: what
runs in the script's own interpreter.

The runner (``detbench.run.execrun``) starts the command with a folder of its own first on
``PYTHONPATH``; that folder holds a ``sitecustomize.py`` (``run.execrun.SITECUSTOMIZE``), which
Python imports at start-up, before the script's first line. When ``EXEC_JOB_ENV`` names a job, it
calls ``boot``, which, in this order:

0. flushes stdout at each line, as on a terminal (``_line_buffered``): through a pipe, a
   script's step lines would otherwise reach the runner all at once at its exit;
1. puts the interpreter in the job's mode (``worker.applied.WorkerSettings.start``: the four
   flags, then the ``--set`` settings; ``CUBLAS_WORKSPACE_CONFIG`` is in the environment the
   runner gave), and reads every setting back;
2. watches what the script does to that state (``locate.watched``): the settings it changes
   itself, its seeding calls and its DataLoaders, each with the user's line;
3. where the job asks ``census``, counts the ops that can race (``locate.census``); where it asks
   ``record``, records every op, as ``detbench locate`` does for a workload (``locate.record``);
4. at exit (``atexit``), writes ``boot-PID.json`` into the job's folder: the mode as applied,
   the settings as they were at the end and which of them the script changed, where, and the
   rest.

A process the script starts (a DataLoader worker under ``spawn``, a subprocess) imports the same
``sitecustomize`` and is put in the same mode; its report is its own ``boot-PID.json``, marked
not ``main``. A forked worker inherits the state and writes nothing (it leaves through
``os._exit``).
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from detbench.core.modes import Mode
from detbench.locate.census import Census, start_recorder, stop_recorder
from detbench.locate.watched import Watch, watch_seeding
from detbench.worker.applied import WorkerSettings, changed, read_all
from detbench.worker.protocol import EXEC_JOB_ENV, EXEC_ROOT_ENV

#: The report each booted process writes at exit, in the job's folder.
REPORT = "boot-{pid}.json"
#: The file that ``fingerprint`` appends to, in the job's folder.
FINGERPRINTS = "fingerprints.jsonl"

_state: dict[str, Any] = {}


def _job() -> dict[str, Any]:
    with open(os.environ[EXEC_JOB_ENV]) as f:
        job: dict[str, Any] = json.load(f)
    return job


def boot() -> None:
    """Steps 1-4 of the module docstring, once per interpreter."""
    if _state:
        return
    t0 = time.time()
    job = _job()
    folder = Path(job["folder"])
    main = os.environ.get(EXEC_ROOT_ENV) is None
    if main:
        os.environ[EXEC_ROOT_ENV] = str(os.getpid())
    _line_buffered()
    mode = Mode(**job["mode"])
    ws = WorkerSettings.start(mode, loaded_only=True)
    _state.update(
        folder=folder,
        main=main,
        mode=mode.name,
        applied=dict(ws.applied),
        problems=dict(ws.problems),
        changes=[],
        seeds=[],
        dataloaders=[],
        fingerprints={},
        boot_started=t0,
    )
    Watch(_state["changes"]).install()
    watch_seeding(_state["seeds"], _state["dataloaders"])
    census = None
    if job.get("census") and main:
        census = Census(job.get("script"))
        census.start()
    recorder = None
    if job.get("record") and main:
        recorder = start_recorder(job.get("script"))
    _state.update(census=census, recorder=recorder, ready=time.time())
    atexit.register(_at_exit)


def _line_buffered() -> None:
    """Step 0 of the module docstring: stdout written out at every newline."""
    out = sys.stdout
    if out is None or getattr(out, "line_buffering", True) or not hasattr(out, "reconfigure"):
        return
    try:
        out.reconfigure(line_buffering=True)
    except (OSError, ValueError):  # a stream that cannot be reconfigured keeps its buffering
        return


def chain(ours: str) -> None:
    """Run the ``sitecustomize`` that ours hides (the next one on ``sys.path``), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(ours))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(ours):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


# --- fingerprints ------------------------------------------------------------------------------


def tensor_digest(t: Any) -> tuple[str, str, list[int]]:
    """(sha256 hex of dtype, shape and bytes, dtype, shape) of a tensor, or of a number's repr."""
    import torch

    if not isinstance(t, torch.Tensor):
        text = repr(t)
        return hashlib.sha256(text.encode()).hexdigest(), type(t).__name__, []
    c = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{c.dtype}{list(c.shape)}".encode())
    if c.numel():
        h.update(c.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest(), str(c.dtype).replace("torch.", ""), list(c.shape)


def fingerprint(name: str, tensor: Any) -> str:
    """``detbench.fingerprint``: hand ``tensor`` to ``detbench exec``'s comparison under ``name``
    (each call of a name is numbered: ``name#0``, ``name#1``, ...) in the job's
    ``fingerprints.jsonl``; returns its digest. Outside ``detbench exec`` it writes nothing."""
    digest, dtype, shape = tensor_digest(tensor)
    if not os.environ.get(EXEC_JOB_ENV):
        return digest
    if not _state:
        boot()
    index = _state["fingerprints"].get(name, 0)
    _state["fingerprints"][name] = index + 1
    line = {"name": name, "index": index, "digest": digest, "dtype": dtype, "shape": shape}
    with open(Path(_state["folder"]) / FINGERPRINTS, "a") as f:
        f.write(json.dumps(line) + "\n")
    return digest


# --- at exit -----------------------------------------------------------------------------------


def kept_changes(changes: list[dict[str, Any]], netted: list[str]) -> list[dict[str, Any]]:
    """The writes to report: those to a setting the script ended with changed, and writes of
    the level already there."""
    return [c for c in changes if c["setting"] in netted or c.get("same")]


def _at_exit() -> None:
    # No collection of the script's objects from here: a plain run frees them in the
    # interpreter's teardown, and one while it lives is the likely path by which a torchrun
    # rank hung at exit (DDP's gloo group joined a thread that waited for the GIL; measured.md).
    gc.disable()
    import torch

    final = read_all(loaded_only=True)
    netted = changed(_state["applied"], final)
    out: dict[str, Any] = {
        "device": "cuda" if torch.cuda.is_initialized() else "cpu",
        "pid": os.getpid(),
        "main": _state["main"],
        "mode": _state["mode"],
        "applied": _state["applied"],
        "problems": _state["problems"],
        "final": final,
        "changed": netted,
        # a write undone before the end is no change (accelerate's patch_environment sets
        # CUBLAS_WORKSPACE_CONFIG and puts it back): only what the script ended with counts, and
        # a write of the level already there ("same")
        "changes": kept_changes(_state["changes"], netted),
        "seeds": _state["seeds"],
        "dataloaders": _state["dataloaders"],
        "boot_started": _state["boot_started"],
        "ready": _state["ready"],
        "exit": time.time(),
    }
    census, recorder = _state.get("census"), _state.get("recorder")
    if census is not None:
        out["census"] = census.stop()
    if recorder is not None:
        out["recording"] = stop_recorder(recorder)
    path = Path(_state["folder"]) / REPORT.format(pid=os.getpid())
    path.write_text(json.dumps(out, default=str))
