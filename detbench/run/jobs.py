"""What a run's worker is given: its job (a JSON object, the first line of its stdin) and its
environment. A verdict worker of (mode, replicate) and a timing worker of the paired phase take
the same job, each adding what is its own (``runner.Runner.spawn``, ``paired.PairedPhase``)."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any

from detbench.core.modes import Mode
from detbench.run.config import TARGET_REL, RunConfig
from detbench.run.supervise import gpu_visible
from detbench.worker.protocol import PACKAGE_ROOT, fresh_compile_caches


def worker_job(
    c: RunConfig,
    sources: list[str],
    threads: int | None,
    mode: Mode,
    replicate: int,
    lane: str,
    keys: list[str],
) -> dict[str, Any]:
    """The job of a worker of (``mode``, ``replicate``) on device ``lane`` for ``keys``;
    ``threads``: its share of torch's threads (None: torch's own count)."""
    return {
        "mode": asdict(mode),
        "replicate": replicate,
        "seed": c.seed,
        "device": c.device,
        "device_name": lane,
        "num_threads": threads,
        "profile": c.profile,
        "sources": sources,
        "workloads": keys,
        "fingerprint_steps": c.setting("fingerprint_steps"),
        "warmup_steps": c.setting("warmup_steps"),
        "budget": c.setting("budget"),
        "block_seconds": c.setting("block_seconds"),
        "rounds": c.setting("rounds"),
        "target_rel": TARGET_REL[c.device],
        "fingerprint": c.fingerprint,
        # A verdict worker times nothing: the paired phase times this run's costs, or
        # (VERDICTS_ONLY) nothing does.
        "paired_timing": c.paired,
        "timeout": c.timeout,
        "launched_at": time.time(),
    }


def worker_environment(c: RunConfig, mode: Mode, lane: str) -> tuple[dict[str, str], str]:
    """A worker's environment (the mode's, its GPU, this checkout on ``PYTHONPATH``) and its
    fresh compile caches' directory (``protocol.fresh_compile_caches``), for the runner to
    remove at the end of the run."""
    env = mode.environment(os.environ)
    if c.devices and c.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = gpu_visible(lane, os.environ)
    caches = fresh_compile_caches(env)
    # The worker imports detbench from this checkout, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    return env, caches


def pair_job(c: RunConfig, job: dict[str, Any]) -> dict[str, Any]:
    """A paired group's worker's job: a verdict worker's ``job``, since it makes the verdicts
    too (the first replicate counts FLOPs and keeps the reference outputs)."""
    return {
        **job,
        "count_flops": int(job["replicate"]) == 0,
        "cudnn_log": c.cudnn_log,
        "reference_dir": str(c.out / ".reference"),
    }
