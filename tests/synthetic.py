"""Result sets with known fingerprints and known timing samples, written as a run would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from detbench.core.modes import get_mode
from detbench.core.settings import SETTINGS
from detbench.store.record import measured
from detbench.store.results import ResultWriter, write_json_atomic
from detbench.store.schema import SCHEMA_2_FIELDS, SCHEMA_3_FIELDS, SCHEMA_4_FIELDS, check
from detbench.worker.applied import columns


def record(
    workload: str,
    mode: str,
    rep: int,
    fingerprint: str | None,
    samples: list[float],
    status: str = "ok",
    suite: str = "s",
    timing: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A record as a worker writes it: made by ``store.record.measured`` (the mode's base, its
    flags and every setting's column as a worker reads them back where every setting applies;
    ``device``, ``seed``, ``profile`` and ``fingerprint_method`` may be given), then filled as
    the passes fill it. ``timing`` adds keys to its timing dict (schema 2's adaptive timing:
    ``ci_rel``, ``reached_target``, ...), ``extra`` adds or replaces fields. Checked as a
    writer checks it (``schema.check``)."""
    m = get_mode(mode)
    levels = {
        s.name: m.overrides.get(s.name, s.torch_default) for s in SETTINGS if s.scope == "process"
    }
    made: dict[str, Any] = {
        "device": "cuda",
        "seed": 0,
        "profile": "full",
        "fingerprint_method": "device",
    }
    made.update({k: extra.pop(k) for k in list(made) if k in extra})
    rec = measured(
        suite=suite,
        workload=workload,
        params={"n": 1},
        mode=m,
        settings=columns(levels, m),
        replicate=rep,
        num_threads=8,
        batch_size=None,
        **made,
    )
    median = float(np.median(samples)) if samples else None
    iqr = float(np.subtract(*np.percentile(samples, [75, 25]))) if samples else None
    rec.update(
        {
            "status": status,
            "fingerprint": fingerprint,
            "message": None if status == "ok" else "no deterministic implementation",
            "items_per_step": 10.0,
            "seconds_per_step": median,
            "items_per_second": None if median is None else 10.0 / median,
            "timing": None
            if not samples
            else {
                "samples": samples,
                "median": median,
                "iqr": iqr,
                "number_per_block": 1,
                **(timing or {}),
            },
            "device_name": f"{rec['device']}:0",
            "utc": "2026-11-23T00:00:00Z",
            **extra,
        }
    )
    return check(rec)


def as_version_1(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` as detbench 0.1 wrote it (schema 1): without the fields later versions added."""
    later = {*SCHEMA_2_FIELDS, *SCHEMA_3_FIELDS, *SCHEMA_4_FIELDS, "base_mode", "batch_size"}
    later.discard("cublas_workspace_config")  # schema 1 recorded the variable already
    return {**{k: v for k, v in rec.items() if k not in later}, "schema_version": 1}


def env(gpu: str | None = "GPU model A", torch: str = "2.11.0", driver: str = "570.1",
        cuda: str = "12.8", cudnn: int = 91000, profile: str = "full",
        worker: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """An env.json as a run writes it, with the facts a comparison looks at; ``worker`` adds
    worker facts (``sm_count``, ``gpu_uuid``, ...), ``extra`` top-level keys (``gpu_state``,
    ``mode_order``, ...)."""
    doc: dict[str, Any] = {
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
    doc["worker"].update(worker or {})
    doc.update(extra)
    return doc


def gpu(sm_clock: float = 1980, max_sm_clock: float = 1980, power_limit: float = 700.0,
        power_draw: float = 80.0, temperature: float = 35, reasons: tuple[str, ...] = (),
        uuid: str = "GPU-0000", name: str = "GPU model A", index: int = 0
        ) -> dict[str, Any]:  # fmt: skip
    """One GPU in a ``gpu_state`` snapshot, with the keys ``detbench.store.gpustate`` records."""
    return {
        "index": index, "name": name, "uuid": uuid, "driver": "570.1", "sm_clock_mhz": sm_clock,
        "mem_clock_mhz": 2619, "max_sm_clock_mhz": max_sm_clock, "power_limit_w": power_limit,
        "power_draw_w": power_draw, "temperature_c": temperature,
        "throttle_reasons": list(reasons), "violation_ns": {},
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


MIB = 1 << 20
TF32 = {"matmul_fp32": "tf32", "conv_fp32": "tf32"}
#: cuDNN off: convolutions fall back to full fp32 while matmuls stay in TF32.
NO_CUDNN = {"matmul_fp32": "tf32", "conv_fp32": "ieee"}
#: The adaptive stopping rule of every record of ``gpu_run``.
RULE = {"target_rel": 0.01, "budget": 2.0, "min_samples": 5, "warmup_steps": 5,
        "clock": "cuda-event"}  # fmt: skip


def gpu_run() -> list[dict[str, Any]]:
    """Three replicates of two workloads of suite ``s`` on a GPU, in schema 2, with every number
    known:

    - seconds per step (constant samples): ``conv`` 0.010 by default, 0.020, 0.020, 0.040 in
      replicates 0-2 under det-algos, 0.010 under no-cudnn; ``mm`` 0.004 by default, 0.004,
      0.008, 0.004 under det-algos, 0.004 under no-cudnn. Within each replicate det-algos's
      geometric mean relative throughput is sqrt(0.5 x 1) = 0.707, sqrt(0.5 x 0.5) = 0.5 and
      sqrt(0.25 x 1) = 0.5; pooled (ratio of medians) sqrt(0.5 x 1) = 0.707.
    - peak memory (median over replicates): ``conv`` 100 MiB by default, 150 MiB det-algos
      (1.50x), 250 MiB no-cudnn (2.50x); ``mm`` 1 GiB by default, 1.5 GiB det-algos (1.50x).
    - precision: TF32 everywhere except convolutions under no-cudnn (full fp32).
    - timing: target +-1%, budget 2 s; two records hit the budget first (``conv`` det-algos
      replicate 2 and ``mm`` no-cudnn replicate 1, ci_rel 0.025); the others reached it with
      ci_rel 0.004 (default), 0.008 (det-algos) and 0.006 (no-cudnn).
    """
    secs = {
        ("conv", "default"): [0.010] * 3, ("conv", "det-algos"): [0.020, 0.020, 0.040],
        ("conv", "no-cudnn"): [0.010] * 3, ("mm", "default"): [0.004] * 3,
        ("mm", "det-algos"): [0.004, 0.008, 0.004], ("mm", "no-cudnn"): [0.004] * 3,
    }  # fmt: skip
    peak = {
        ("conv", "default"): [100, 100, 120], ("conv", "det-algos"): [150, 140, 160],
        ("conv", "no-cudnn"): [250, 250, 250], ("mm", "default"): [1024, 1024, 1024],
        ("mm", "det-algos"): [1536, 1536, 1536], ("mm", "no-cudnn"): [1024, 1024, 1024],
    }  # fmt: skip
    ci = {"default": 0.004, "det-algos": 0.008, "no-cudnn": 0.006}
    missed = {("conv", "det-algos", 2), ("mm", "no-cudnn", 1)}
    out = []
    for r in range(3):
        for (w, mode), s in secs.items():
            late = (w, mode, r) in missed
            timing = {**RULE, "ci_rel": 0.025 if late else ci[mode], "reached_target": not late}
            out.append(record(
                w, mode, r, f"{w}-{mode}", [s[r]] * 5, timing=timing,
                peak_memory_bytes=peak[(w, mode)][r] * MIB,
                precision=NO_CUDNN if mode == "no-cudnn" else TF32, fingerprint_method="device",
            ))  # fmt: skip
    return out


def paired_line(
    workload: str,
    mode: str,
    rep: int,
    samples: list[float],
    copy: int = 0,
    suite: str = "s",
    start: float = 1000.0,
    rounds: list[int] | None = None,
) -> dict[str, Any]:
    """A line of ``paired.jsonl`` as the paired phase writes it (``store.paired.line``): one
    sample per round (rounds 0.. unless given), blocks 0.5 s apart from ``start``, and the
    Timing JSON's median and IQR of the samples."""
    from detbench.store.paired import line

    n = len(samples)
    median = float(np.median(samples))
    return line(
        suite=suite,
        workload=workload,
        mode=mode,
        replicate=rep,
        copy=copy,
        samples=samples,
        rounds=list(range(n)) if rounds is None else rounds,
        positions=[copy] * n,
        block_start=[start + 0.5 * i for i in range(n)],
        workers=3,
        number_per_block=4,
        timing={
            "samples": samples,
            "median": median,
            "iqr": float(np.subtract(*np.percentile(samples, [75, 25]))),
            "number_per_block": 4,
            "clock": "perf_counter",
        },
        device="cpu",
        device_name="cpu:0",
    )


def paired_run(directory: Path, logs: dict[str, list[list[float]]], base: float = 0.01) -> Path:
    """A run of the paired design on a CPU: workload ``w``, modes ``default`` and ``det-algos``
    (verdict records with no timing, ``timing_design`` "paired") and their lines, plus copy 1 of
    ``default``. ``logs[label]``: per replicate, the log per-round ratio of that side's
    throughput to copy 0 of default (``label`` "det-algos" or "copy1"); default's copy 0 takes
    ``base`` seconds a step in every round."""
    from detbench.store.paired import PairedWriter

    reps = len(next(iter(logs.values())))
    records, lines = [], []
    for r in range(reps):
        n = len(logs[next(iter(logs))][r])
        lines.append(paired_line("w", "default", r, [base] * n))
        for label, per_rep in logs.items():
            secs = [base / float(np.exp(x)) for x in per_rep[r]]
            mode, copy = ("default", 1) if label == "copy1" else (label, 0)
            lines.append(paired_line("w", mode, r, secs, copy=copy))
        for mode in ("default", "det-algos"):
            rec = record("w", mode, r, "x", [], device="cpu", timing_design="paired")
            rec.update(flops_per_step=100.0)
            records.append(rec)
    doc = env(gpu=None, profile="quick")
    doc["options"].update(timing="paired", rounds=len(logs[next(iter(logs))][0]))
    write_run(directory, records, doc)
    with PairedWriter(directory) as w:
        w.append_all(lines)
    return directory
