"""One recording process of ``detbench locate``: a job of kind ``detbench.locate.worker:main`` for
the one child main (``detbench.worker.protocol``). It applies the job's mode before any CUDA work,
then for each workload seeds, builds and runs its steps under
:class:`detbench.locate.record.Recorder`, saving the outputs of the op indices the job names (stage
2 of ``locate.stages``); its ``result`` message holds every op stream, with the step outputs'
digests (taken outside the recorder, as the fingerprint sees them).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from detbench.core.modes import Mode
from detbench.core.workload import Context, load_file, registry
from detbench.locate.record import Recorder
from detbench.store.schema import Status
from detbench.worker.applied import WorkerSettings
from detbench.worker.measure import build_step, with_settings
from detbench.worker.passes import Hooks, fingerprint_pass
from detbench.worker.protocol import Channel


class _CompileWatch:
    """Notes where the workload calls ``torch.compile`` (run eagerly under the recorder)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._original = getattr(torch, "compile", None)

    def __enter__(self) -> _CompileWatch:
        original = self._original
        if original is None:
            return self
        calls = self.calls

        def compile(*args: Any, **kwargs: Any) -> Any:
            f = sys._getframe(1)
            calls.append({"file": f.f_code.co_filename, "line": f.f_lineno})
            return original(*args, **kwargs)

        torch.compile = compile
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._original is not None:
            torch.compile = self._original


def record_workload(
    w: Any,
    mode: Any,
    device: torch.device,
    steps: int,
    seed: int,
    profile: str,
    save: set[int],
    saved_dir: Path,
) -> dict[str, Any]:
    """One workload's op stream in this process: its build and ``steps`` fingerprint steps."""
    ctx = Context(device=device, profile=profile, seed=seed, batch_size=w.batch_size)
    rec = Recorder(user_file=w.source or None)
    rec.save = save
    result: dict[str, Any] = {"status": Status.OK, "error": None}

    @contextlib.contextmanager
    def recording(i: int) -> Iterator[None]:
        rec.step, rec.phase = i, "forward"
        with rec:
            yield
        rec.end_step()

    digests: dict[str, Any] = {"fingerprint_method": "sha256" if device.type == "cpu" else "device"}
    hooks = Hooks(around_step=recording, steps=steps, watch_ops=False)
    with _CompileWatch() as watch:
        rec.install()
        try:
            with rec:  # seeding is no ATen op: only the factory's ops are recorded
                step = build_step(w, ctx)
            rec.end_step()
            step = with_settings(step, mode, device)
            fingerprint_pass(w, ctx, {}, mode, step, digests, hooks)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:
            result.update(status=Status.ERROR, error=f"{rec.phase}: {type(exc).__name__}: {exc}")
            with contextlib.suppress(Exception):
                rec.end_step()
        finally:
            rec.remove()
    files = {}
    for i, tensors in rec.saved.items():
        path = saved_dir / f"{abs(hash((w.key, i))) % 10**12}-{i}.pt"
        torch.save(tensors, path)
        files[str(i)] = str(path)
    result.update(ops=rec.ops, notes=rec.notes, sampled=rec.hasher.sampled, compiled=watch.calls)
    result.update(saved=files, step_digests=digests.get("step_fingerprints", []))
    return result


def record(job: dict[str, Any]) -> dict[str, Any]:
    """Each workload the job names: its op stream under the job's mode."""
    mode = Mode(**job["mode"])
    ws = WorkerSettings.start(mode)  # flags and settings before any CUDA work
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.init()
    load_file(job["source"])
    workloads = registry()
    saved_dir = Path(job["out"]).with_suffix(".saved")
    saved_dir.mkdir(exist_ok=True)
    out: dict[str, Any] = {"torch": torch.__version__, "pid": os.getpid(), "workloads": {}}
    for key in job["keys"]:
        w = workloads[key]
        reason = ws.unsupported(w)
        if getattr(w, "distributed", False):
            reason = (
                "a distributed workload runs in torchrun's ranks: locate records one process "
                "(not supported yet)"
            )
        if reason is not None:
            out["workloads"][key] = {"status": Status.UNSUPPORTED, "error": reason, "ops": []}
            continue
        save = {int(i) for i in job.get("save", {}).get(key, [])}
        steps, seed = int(job["steps"][key]), int(job["seed"])
        out["workloads"][key] = record_workload(
            w, mode, device, steps, seed, job["profile"], save, saved_dir
        )
        ws.restore()
    return out


def main(job: dict[str, Any], out: Channel) -> int:
    """The child's side of ``locate.stages``: the recording, as its ``result`` message."""
    return out.result(record(job))
