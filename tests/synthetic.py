"""Result sets with known fingerprints and known timing samples, written as a run would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from detbench.modes import get_mode
from detbench.results import ResultWriter, write_json_atomic


def record(workload: str, mode: str, rep: int, fingerprint: str | None, samples: list[float],
           status: str = "ok", suite: str = "s", **extra: Any) -> dict[str, Any]:  # fmt: skip
    m = get_mode(mode)
    median = float(np.median(samples)) if samples else None
    iqr = float(np.subtract(*np.percentile(samples, [75, 25]))) if samples else None
    return {
        "suite": suite, "workload": workload, "mode": mode, "benchmark": m.benchmark,
        "cudnn_deterministic": m.cudnn_deterministic,
        "deterministic_algorithms": m.deterministic_algorithms, "cudnn_enabled": m.cudnn_enabled,
        "replicate": rep, "status": status, "fingerprint": fingerprint,
        "message": None if status == "ok" else "no deterministic implementation",
        "items_per_step": 10.0,
        "seconds_per_step": median,
        "items_per_second": None if median is None else 10.0 / median,
        "max_abs_diff": None,
        "params": {"n": 1},
        "timing": None if not samples else {
            "samples": samples, "iqr": iqr, "number_per_block": 1,
        },
        **extra,
    }  # fmt: skip


def env(gpu: str | None = "GPU model A", torch: str = "2.11.0", driver: str = "570.1",
        cuda: str = "12.8", cudnn: int = 91000, profile: str = "full"
        ) -> dict[str, Any]:  # fmt: skip
    """An env.json as a run writes it, with the facts a comparison looks at."""
    return {
        "schema_version": 1,
        "started_utc": "2026-11-23T00:00:00Z",
        "finished_utc": "2026-11-23T00:10:00Z",
        "git": {"commit": "0" * 40, "dirty": False},
        "host": {"torch": torch, "torch_cuda": cuda, "python": "3.12.0", "driver": driver,
                 "cpu_model": "Test CPU", "collect_env": {}},
        "worker": {"device": "cuda" if gpu else "cpu", "gpu_name": gpu, "cuda_runtime": cuda,
                   "cudnn_version": cudnn, "num_threads": 8, "precision": {}},
        "options": {"profile": profile, "replicates": 3, "modes": ["default", "det-algos"],
                    "seed": 0, "fingerprint_steps": 3, "warmup_steps": 5, "min_run_time": 1.0},
        "run_stats": {"records": 0, "wall": 1.0},
    }  # fmt: skip


def write_run(directory: Path, records: list[dict[str, Any]],
              env_doc: dict[str, Any] | None = None) -> Path:  # fmt: skip
    with ResultWriter(directory) as w:
        for rec in records:
            w.append(rec)
    if env_doc is not None:
        write_json_atomic(directory / "env.json", env_doc)
    return directory


def fast_and_same(replicate: int) -> list[dict[str, Any]]:
    """Two workloads of suite ``s`` in one replicate: ``fast`` is nondeterministic by default
    and reproducible but exactly half as fast under deterministic algorithms; ``same`` is
    reproducible everywhere at the same speed in both modes."""
    r = replicate
    return [
        record("fast", "default", r, f"d{r}", [0.010] * 5),
        record("fast", "det-algos", r, "a", [0.020] * 5),
        record("same", "default", r, "x", [0.004] * 5),
        record("same", "det-algos", r, "x", [0.004] * 5),
    ]
