"""What a run's worker is given: its job (a JSON object, the first line of its stdin) and its
environment."""

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
    """The job of a worker of (``mode``, ``replicate``) on device ``lane`` for ``keys``."""
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
        "paired_timing": c.paired,  # a verdict worker times nothing itself
        "timeout": c.timeout,
        "launched_at": time.time(),
    }


def worker_environment(c: RunConfig, mode: Mode, lane: str) -> tuple[dict[str, str], str]:
    """A worker's environment (the mode's, its GPU, this checkout first on ``PYTHONPATH``) and
    its fresh compile caches' directory, for the runner to remove at the end of the run."""
    env = mode.environment(os.environ)
    if c.devices and c.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = gpu_visible(lane, os.environ)
    caches = fresh_compile_caches(env)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    return env, caches


def pair_job(c: RunConfig, job: dict[str, Any]) -> dict[str, Any]:
    """A paired group's worker's job: a verdict worker's ``job``, as it makes the verdicts too."""
    return {
        **job,
        "count_flops": int(job["replicate"]) == 0,
        "cudnn_log": c.cudnn_log,
        "reference_dir": str(c.out / ".reference"),
    }
