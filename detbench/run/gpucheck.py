"""``detbench gpu-check``: the smoke test to run first on a new GPU host.

One small workload of each suite, in the default mode and the fully deterministic one, two fresh
processes each, at the quick sizes; then what worked, in plain words. Exit status 0 when every
check passed, 1 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detbench.core.modes import get_mode
from detbench.run.api import run_benchmark
from detbench.run.config import RunConfig
from detbench.store.paired import copy0_lines, joined
from detbench.store.results import iter_records, load_env
from detbench.store.schema import Status

#: One small workload per suite, each a GPU path of its own.
WORKLOADS = (
    "conv/conv2d_resnet50_stem",
    "rnn/lstm_2layer",
    "batchnorm/batchnorm2d_train_resnet50_stage1",
    "bmm/bmm_attention_scores_fp16",
    "ops/index_add_",
    "recipes/dataloader__global_seeds_only",
    "training/resnet18_cifar",
)
MODES = ("default", "cudnn-det+det-algos")
REPLICATES = 2


@dataclass(frozen=True)
class GpuCheck:
    ok: bool
    text: str

    def line(self) -> str:
        return ("  ok    " if self.ok else "  FAIL  ") + self.text


def checks(records: Sequence[Mapping[str, Any]], env: dict[str, Any]) -> list[GpuCheck]:
    """What worked, in plain words, from the check run's ``timed_records`` and env.json."""
    out: list[GpuCheck] = []
    worker = env.get("worker") or {}
    if worker.get("device") == "cuda":
        facts = (
            f"CUDA device: {worker.get('gpu_name')} (compute capability "
            f"{worker.get('gpu_capability')}, {worker.get('sm_count')} SMs), CUDA build "
            f"{worker.get('cuda_build') or worker.get('cuda_runtime')}, cuDNN "
            f"{worker.get('cudnn_version')}"
        )
        out.append(GpuCheck(True, facts))
    else:
        device = worker.get("device")
        out.append(GpuCheck(device is not None, f"device: {device} (not a GPU: a rehearsal)"))
    by_key: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in records:
        by_key.setdefault((f"{r['suite']}/{r['workload']}", r["mode"]), []).append(r)
    for (key, mode), recs in sorted(by_key.items()):
        statuses = sorted({r["status"] for r in recs})
        if statuses == [Status.UNSUPPORTED]:
            note = "unsupported (no deterministic kernel), recorded as data"
            out.append(GpuCheck(True, f"{key} [{mode}]: {note}"))
            continue
        if statuses != [Status.OK]:
            first = next(r for r in recs if r["status"] != Status.OK)
            why = f"{first['status']}: {(first['message'] or '')[:160]}"
            out.append(GpuCheck(False, f"{key} [{mode}]: {why}"))
            continue
        prints = {r["fingerprint"] for r in recs}
        verdict = "reproducible" if len(prints) == 1 else f"{len(prints)} different results"
        method = {str(r.get("fingerprint_method")) for r in recs}
        deterministic = get_mode(mode).deterministic_algorithms
        timed_as = {str(r["timed_as"]) for r in recs if r.get("timed_as")}
        if len(timed_as) == 1 and all(r.get("timed_as") for r in recs):
            # On this device the mode runs what another mode's worker timed: nothing to time.
            timing, timed = f"timed as {timed_as.pop()} (the same computation here)", True
        else:
            timings = [r.get("timing") or {} for r in recs]
            samples = min(len(t.get("samples") or []) for t in timings)
            reached = sum(bool(t.get("reached_target")) for t in timings)
            ci = max(float(t.get("ci_rel") or 0.0) for t in timings)
            timed = samples >= 5
            timing = (
                f"timing {samples}+ samples, interval +-{100 * ci:.1f}%, target reached in "
                f"{reached}/{len(recs)}"
            )
        # A difference fails the deterministic mode; in the default mode it is a finding.
        out.append(
            GpuCheck(
                (len(prints) == 1 or not deterministic) and timed,
                f"{key} [{mode}]: {verdict} over {len(recs)} fresh processes; {timing}; "
                f"fingerprint {'/'.join(sorted(method))}",
            )
        )
    expected = len(WORKLOADS) * len(MODES) * REPLICATES
    out.append(GpuCheck(len(records) == expected, f"{len(records)} of {expected} records written"))
    return out


def engines_check(records: Sequence[Mapping[str, Any]], device: str) -> GpuCheck:
    """``--cudnn-log``: every conv record that ran names its cuDNN engines (on a CPU: why not)."""
    ran = [r for r in records if r["status"] == Status.OK]
    if device != "cuda":
        why = {
            str((r.get("cudnn_engines") or {}).get("unsupported"))
            for r in ran
            if isinstance(r.get("cudnn_engines"), Mapping)
        }
        said = sum(isinstance(r.get("cudnn_engines"), Mapping) for r in ran)
        return GpuCheck(
            said == len(ran) and len(why) == 1,
            f"cuDNN's log: {said} of {len(ran)} records that ran say why they name no "
            f"engine: {'; '.join(sorted(why))}",
        )
    conv = [r for r in ran if r["suite"] == "conv"]
    named = [r for r in conv if isinstance(r.get("cudnn_engines"), list) and r["cudnn_engines"]]
    ops = sorted({e["op"] for r in named for e in r["cudnn_engines"]})
    return GpuCheck(
        bool(conv) and len(named) == len(conv),
        f"cuDNN's log: {len(named)} of {len(conv)} conv records name the engines "
        f"their convolutions ran ({', '.join(ops) or 'none'})",
    )


def run_check(device: str, out: Path, cudnn_log: bool = False) -> tuple[list[GpuCheck], Path]:
    """Run the check's workloads and judge them; ``cudnn_log``: with ``engines_check`` too."""
    config = RunConfig(
        out=out,
        modes=[get_mode(m) for m in MODES],
        replicates=REPLICATES,
        profile="quick",
        device=device,
        only=list(WORKLOADS),
        suites=sorted({k.split("/")[0] for k in WORKLOADS}),
        timeout=300.0,
        cudnn_log=cudnn_log,
    )
    run_benchmark(config)
    records = timed_records(out)
    found = checks(records, load_env(out))
    return ([*found, engines_check(records, device)] if cudnn_log else found), out


def timed_records(out: Path) -> list[dict[str, Any]]:
    """The run's records, each joined with its copy-0 timing from ``paired.jsonl``."""
    found = copy0_lines(out)
    return [joined(r, found) for r in iter_records(out)]
