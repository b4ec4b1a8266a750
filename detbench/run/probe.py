"""Which ops each workload really calls, seen by running one step of it: what ``detbench
attribute`` asks before it chooses its variants, instead of trusting declarations alone.

One child process (``worker/protocol.py``; torch's defaults) builds each workload as a worker
does and runs one step under ``worker.ops.OpsSeen``. A workload that fails here, or is
distributed (its step needs a ``torchrun`` launch), keeps its declarations only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detbench.core.workload import Context, Workload, load_file, registry
from detbench.worker.protocol import Channel, ChildFailed, run_child

#: Seconds the probe may take in all (one build and one step per workload).
TIMEOUT = 1800.0


@dataclass
class ProbedOps:
    """Per workload key, the watched ops its step called (``ops.WATCHED``); those not probed,
    with why."""

    calls: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def calling(self, op: str) -> list[str]:
        return [k for k, ops in self.calls.items() if op in ops]


def probe_ops(
    workloads: Sequence[Workload], sources: Sequence[str], device: str, profile: str, seed: int
) -> ProbedOps:
    """Which watched ops one step of each of ``workloads`` (defined in ``sources``) calls."""
    keys = [w.key for w in workloads if not w.distributed]
    if not keys:
        return ProbedOps()
    job = {
        "sources": [str(Path(s).resolve()) for s in sources],
        "keys": keys,
        "device": device,
        "profile": profile,
        "seed": seed,
    }
    with tempfile.TemporaryDirectory(prefix="detbench-ops-") as tmp:
        try:
            got = run_child(
                "detbench.run.probe:main",
                job,
                Path(tmp),
                "ops",
                timeout=TIMEOUT,
                label="the op probe",
            )
        except ChildFailed as exc:
            return ProbedOps(failed={k: str(exc) for k in keys})
    return ProbedOps(calls=got["calls"], failed=got["failed"])


def _probe_job(job: dict[str, Any]) -> dict[str, Any]:
    """The child: build each workload and run one step under ``OpsSeen``."""
    # imported here: the probe's child needs torch, its parent (the CLI) does not
    import torch

    from detbench.worker.fingerprint import step_outputs
    from detbench.worker.measure import build_step, classify, sync
    from detbench.worker.ops import OpsSeen

    for source in job["sources"]:
        load_file(source)
    known = registry()
    device = torch.device(job["device"])
    calls: dict[str, list[str]] = {}
    failed: dict[str, str] = {}
    for key in job["keys"]:
        w = known[key]
        ctx = Context(
            device=device, profile=job["profile"], seed=int(job["seed"]), batch_size=w.batch_size
        )
        try:
            step = build_step(w, ctx)
            with OpsSeen() as seen:
                step_outputs(step())
            sync(device)
            calls[key] = seen.called
        except Exception as exc:  # the run will record it; here it only costs the detection
            status, message = classify(exc)
            failed[key] = f"{status}: {message.splitlines()[0] if message else ''}"
        step = None
    return {"calls": calls, "failed": failed}


def main(job: dict[str, Any], out: Channel) -> int:
    """The child's side of ``probe_ops`` (kind ``detbench.run.probe:main``)."""
    return out.result(_probe_job(job))
