"""What runs in a user's unchanged script's own interpreter under ``detbench exec`` and ``detbench
locate -- COMMAND``: ``run.execrun.SITECUSTOMIZE``, imported before the script's first line, calls
``boot`` when ``EXEC_JOB_ENV`` names a job: it flushes stdout at each line (through a pipe, a
script's step lines would otherwise reach the runner all at once at its exit), applies the job's
mode, watches the script (``locate.watched``), counts or records its ops where the job asks, and
at exit writes ``boot-PID.json`` into the job's folder.

A process the script starts (a DataLoader worker under ``spawn``, a subprocess) is booted alike,
its report marked not ``main``. A forked worker inherits the state and writes nothing (it leaves
through ``os._exit``).
"""

from __future__ import annotations

import atexit
import contextlib
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


def boot() -> None:
    """The module docstring's boot, once per interpreter."""
    if _state:
        return
    t0 = time.time()
    job: dict[str, Any] = json.loads(Path(os.environ[EXEC_JOB_ENV]).read_text())
    main = os.environ.get(EXEC_ROOT_ENV) is None
    if main:
        os.environ[EXEC_ROOT_ENV] = str(os.getpid())
    _line_buffered()
    mode = Mode(**job["mode"])
    ws = WorkerSettings.start(mode, loaded_only=True)
    _state.update(
        folder=Path(job["folder"]),
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
    census = Census(job.get("script")) if job.get("census") and main else None
    if census is not None:
        census.start()
    recorder = start_recorder(job.get("script")) if job.get("record") and main else None
    _state.update(census=census, recorder=recorder, ready=time.time())
    atexit.register(_at_exit)


def _line_buffered() -> None:
    """stdout flushed at each line (module docstring)."""
    out = sys.stdout
    if out is None or getattr(out, "line_buffering", True) or not hasattr(out, "reconfigure"):
        return
    with contextlib.suppress(OSError, ValueError):  # else it keeps its buffering
        out.reconfigure(line_buffering=True)


def chain(ours: str) -> None:
    """Run the ``sitecustomize`` that ours hides (the next one on ``sys.path``), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(ours))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(ours):
        return
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def tensor_digest(t: Any) -> tuple[str, str, list[int]]:
    """(sha256 hex of dtype, shape and bytes, dtype, shape) of a tensor, or of a number's repr."""
    import torch

    if not isinstance(t, torch.Tensor):
        return hashlib.sha256(repr(t).encode()).hexdigest(), type(t).__name__, []
    c = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{c.dtype}{list(c.shape)}".encode())
    if c.numel():
        h.update(c.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest(), str(c.dtype).replace("torch.", ""), list(c.shape)


def fingerprint(name: str, tensor: Any) -> str:
    """``detbench.fingerprint``: hand ``tensor`` to ``detbench exec``'s comparison as ``name#0``,
    ``name#1``, ...; returns its digest (and writes nothing outside ``detbench exec``)."""
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


def kept_changes(changes: list[dict[str, Any]], netted: list[str]) -> list[dict[str, Any]]:
    """The writes to report: those to a setting the script ended with changed, and writes of
    the level already there (a write undone before the end is no change: accelerate's
    patch_environment sets CUBLAS_WORKSPACE_CONFIG and puts it back)."""
    return [c for c in changes if c["setting"] in netted or c.get("same")]


def _at_exit() -> None:
    # No collection from here: one while the interpreter lives is the likely path by which a
    # torchrun rank hung at exit (gloo joined a thread waiting for the GIL; docs/measured.md).
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
