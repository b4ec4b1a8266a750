"""The one verdict pass pipeline: build, fingerprint pass, FLOP count, the batch-invariance
pass, then, whatever happened, the peak memory, the settings read back and the clean-up. Every
outcome is a record, never an exception (``measure.classify``).

A run's worker (``run_workload``), a torchrun rank (``distributed.rank``) and locate's recording
process (``locate.worker``) run these passes; what differs between them is a hook (``Hooks``),
never a copy of a pass.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from detbench.core.modes import DEFAULT_MODE, Mode
from detbench.core.workload import Context, Workload
from detbench.store.results import utc_now
from detbench.store.schema import Status
from detbench.worker import cudnnlog
from detbench.worker import fingerprint as fp
from detbench.worker.applied import WorkerSettings, read_all
from detbench.worker.devenv import fp32_precision
from detbench.worker.measure import (
    AFTER_FINGERPRINT,
    build_pass,
    classify,
    compile_stats,
    context,
    count_pass,
    finish_pass,
    invariance_pass,
    is_device_error,
    new_record,
    reference_path,
    release,
    sync,
)
from detbench.worker.memory import PeakWatch, describe_memory, memory_figures
from detbench.worker.ops import OpsSeen, attn_implementation


@dataclass
class Hooks:
    """Where a caller changes the passes (see the module docstring); the defaults are a worker's."""

    #: A progress line at each phase and fingerprint step.
    say: Callable[[str], None] | None = None
    #: The context fingerprint step ``i`` runs in (its outputs are digested outside it).
    around_step: Callable[[int], AbstractContextManager[Any]] = contextlib.nullcontext
    #: Called with each fingerprint step's index and outputs.
    after_step: Callable[[int, list[Any]], None] | None = None
    #: Called with the record after the fingerprint pass.
    after_fingerprint: Callable[[dict[str, Any]], None] | None = None
    #: Added to the mode's name in the reference's file name.
    reference: str = ""
    #: The number of fingerprint steps (None: the workload's own, else the job's).
    steps: int | None = None
    #: Whether the first fingerprint step runs under ``OpsSeen``.
    watch_ops: bool = True
    #: Whether a workload that declares batch sizes gets its batch-invariance pass.
    invariance: bool = True
    #: Whether a failure is followed by a synchronisation, to learn whether the CUDA context
    #: survived (not in a rank: a peer's failure leaves its collectives waiting).
    check_device: bool = True
    #: (status, message) of an exception.
    classify: Callable[[BaseException], tuple[str, str]] = classify
    #: Called with the built step after the fingerprint and FLOP passes, where no
    #: batch-invariance pass rebuilds it: a paired timing worker times the verdict's own step.
    keep: Callable[[Any], None] | None = None
    #: Called with the record and the exception, once the failure is in the record.
    on_failure: Callable[[dict[str, Any], BaseException], None] | None = None


def fingerprint_pass(
    w: Workload,
    ctx: Context,
    job: Mapping[str, Any],
    mode: Mode,
    step: Any,
    rec: dict[str, Any],
    hooks: Hooks | None = None,
) -> None:
    """Run the fingerprint steps; the record's fields are set last, so a failure leaves none."""
    hooks = hooks or Hooks()
    method = rec["fingerprint_method"]
    both = job.get("fingerprint") == "both"
    digests: list[str] = []
    sha_digests: list[str] = []
    losses: list[float] = []
    outputs: Any = None
    # The first step under OpsSeen: which ops the settings act on it calls (not when compiled:
    # that step is the compilation, which a function mode would change).
    compiled = mode.overrides.get("execution") == "compile"
    watch = OpsSeen() if hooks.watch_ops and not compiled else None
    steps = hooks.steps if hooks.steps is not None else w.steps(ctx, int(job["fingerprint_steps"]))
    for i in range(steps):
        if hooks.say is not None:
            hooks.say(f"{w.key}: fingerprint step {i}")
        t0 = time.perf_counter()
        watching = watch if (watch is not None and i == 0) else contextlib.nullcontext()
        with hooks.around_step(i), watching:
            outputs = fp.step_outputs(step())
        if i == 0:  # with execution=compile, the compilation happens here
            sync(ctx.device)
            rec["first_step_seconds"] = time.perf_counter() - t0
            rec["ops_called"] = None if watch is None else watch.called
            rec["attn_implementation"] = attn_implementation(
                ctx.notes.get("attn_implementation"), rec["ops_called"]
            )
        if hooks.after_step is not None:
            hooks.after_step(i, outputs)
        digests.append(fp.step_digest(outputs, method))
        if both:
            sha_digests.append(fp.step_digest(outputs, "sha256"))
        if w.loss_output is not None:
            losses.append(float(outputs[w.loss_output].item()))
    rec["step_fingerprints"] = digests
    if w.loss_output is not None:
        rec["losses"] = losses
    rec["fingerprint"] = fp.combine(digests)
    if both:
        rec["step_fingerprints_sha256"] = sha_digests
        rec["fingerprint_sha256"] = fp.combine(sha_digests)
    if job.get("reference_dir"):
        _against_references(w, job, mode, outputs, rec, hooks.reference)


def _against_references(
    w: Workload, job: Mapping[str, Any], mode: Mode, outputs: Any, rec: dict[str, Any], mine: str
) -> None:
    """The last step's outputs against the first replicate's and the default mode's; ``mine``:
    what a rank adds to the reference's name."""
    ref = reference_path(Path(job["reference_dir"]), w.key, mode.name + mine)
    replicate = int(job["replicate"])
    diff = fp.diff_against_reference(ref, rec["fingerprint"], outputs, replicate)
    if diff is None:  # the first replicate to get here: the others compare with it
        fp.save_reference(ref, rec["fingerprint"], outputs, replicate)
        rec["diff_reference"] = "self"
    else:
        rec["max_abs_diff"] = diff.pop("max_abs_diff")
        rec["diff_reference"] = diff
    # How far from the default mode's outputs (its first replicate's, where saved already): what
    # turning a setting on changes in the results, not only whether it changes the bits.
    base = reference_path(Path(job["reference_dir"]), w.key, DEFAULT_MODE.name + mine)
    if mode.name != DEFAULT_MODE.name and base.is_file():
        vs = fp.diff_against_reference(base, rec["fingerprint"], outputs)
        rec["max_abs_diff_vs_default"] = None if vs is None else vs["max_abs_diff"]


@dataclass
class Passes:
    """Every pass of one workload ``w`` into its record ``rec`` (``run``)."""

    w: Workload
    ctx: Context
    job: Mapping[str, Any]
    mode: Mode
    ws: Any
    rec: dict[str, Any]
    hooks: Hooks = field(default_factory=Hooks)
    #: The phase running now, or the one that failed.
    phase: str = "build"
    step: Any = None

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Time phase ``name`` into the record's ``phases``, also when it fails."""
        self.phase = name
        if self.hooks.say is not None and name != "fingerprint":
            self.hooks.say(f"{self.w.key}: {name}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.rec["phases"][name] = time.perf_counter() - t0

    def run(self) -> bool:
        """Every pass, then the clean-up; whether the CUDA context is lost (``device_lost``)."""
        device = self.ctx.device
        watch = PeakWatch(device)
        lost, oom_figures = False, None
        try:
            watch.start()
            self._passes()
            # Last: an asynchronous error of this workload's kernels surfaces here, charged to it.
            sync(device)
        except Exception as exc:  # a failing workload is data, never the end of the run
            lost, oom_figures = self._failed(exc)
        finally:
            finish_pass(self.rec, self.ws, watch)
            lost = self._cleanup(lost)
        if oom_figures is not None:  # an oom's figures join the record's peaks under ``memory``
            self.rec["memory"] = {**(self.rec["memory"] or {}), **oom_figures}
        self.rec["precision"] = fp32_precision(device)  # torch's flags as the workload left them
        return lost

    def _passes(self) -> None:
        w, ctx, job, rec, hooks = self.w, self.ctx, self.job, self.rec, self.hooks
        with self._phase("build"):
            rec["items_per_step"] = w.items(ctx)
            rec["bytes_per_step"] = w.bytes(ctx)
            rec["seeding"] = w.seeding
            self.step = build_pass(w, ctx, self.ws, self.mode, rec)
        before = compile_stats()
        with self._phase("fingerprint"):
            fingerprint_pass(w, ctx, job, self.mode, self.step, rec, hooks)
        if hooks.after_fingerprint is not None:
            hooks.after_fingerprint(rec)
        if self.mode.overrides.get("execution") == "compile":
            rec["compile_seconds"] = rec.get("first_step_seconds")
            after = compile_stats()
            if before is not None and after is not None:  # this workload's own compilation
                rec["compile_stats"] = {k: after[k] - before[k] for k in after}
        with self._phase("count"):
            count_pass(w, ctx, self.step, rec, bool(job.get("count_flops", True)))
        if job.get("paired_timing", True):  # the paired phase times it, beside the other modes
            rec["timing_design"] = "paired"
        rebuilds = hooks.invariance and w.batch_sizes is not None
        if hooks.keep is not None and not rebuilds:
            hooks.keep(self.step)
        if rebuilds:
            with self._phase("invariance"):
                self.step = None  # the timed build goes before one is built at every size
                invariance_pass(w, ctx, self.mode, rec)

    def _failed(self, exc: BaseException) -> tuple[bool, dict[str, Any] | None]:
        """``exc`` into the record: (device_lost, an out-of-memory's figures or None)."""
        rec, device = self.rec, self.ctx.device
        status, message = self.hooks.classify(exc)
        lost = is_device_error(exc)
        if device.type == "cuda" and not lost and self.hooks.check_device:
            try:  # an error that broke the context shows here, if it did not say so itself
                torch.cuda.synchronize(device)
            except Exception as sync_exc:
                lost = True
                message += f" [then the device failed: {type(sync_exc).__name__}: {sync_exc}]"
        oom_figures = None
        if status == Status.OOM:
            oom_figures = memory_figures(device)
            message += f" [{describe_memory(oom_figures)}]"
        rec.update(status=status, message=f"{self.phase}: {message}")
        rec["traceback"] = traceback.format_exc(limit=-8)
        if self.phase not in AFTER_FINGERPRINT:  # a pass that failed has no fingerprint
            rec["fingerprint"] = rec["step_fingerprints"] = None
        rec["timing"] = rec["seconds_per_step"] = rec["items_per_second"] = None
        rec["flops_per_second"] = rec["bytes_per_second"] = None
        rec["device_lost"] = lost
        if self.hooks.on_failure is not None:
            self.hooks.on_failure(rec, exc)
        return lost, oom_figures

    def _cleanup(self, lost: bool) -> bool:
        """Free this workload's tensors before the next is built (``measure.release``)."""
        t0 = time.perf_counter()
        self.step = None
        freed = release(self.mode, self.ctx.device, empty_cache=not lost)
        self.rec["phases"]["cleanup"] = time.perf_counter() - t0
        return lost or not freed


def run_workload(
    w: Workload,
    job: dict[str, Any],
    mode: Mode,
    ws: WorkerSettings | None = None,
    launch: Callable[..., None] | None = None,
    keep: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Every pass of one workload in a run's worker: (record, device_lost: a CUDA error left
    this process's context untrustworthy). ``ws`` None reads the settings as they are; ``launch``
    starts a distributed workload's ranks (a layer above); ``keep``: ``Hooks.keep``."""
    if ws is None:
        ws = WorkerSettings(mode, {}, read_all())
    ctx = context(w, job)
    rec = new_record(w, ctx, job, mode, ws, torch.get_num_threads())
    engines = cudnnlog.LogWatch(job, rec, w.distributed)  # --cudnn-log: the log's size now
    if w.distributed:  # its passes run in the ranks of a torchrun launch, not here
        if launch is None:
            raise RuntimeError(f"{w.key}: a distributed workload needs a launcher (launch=...)")
        launch(w, ctx, job, mode, ws, rec)
        rec["utc"] = utc_now()
        return rec, False
    hooks = Hooks(after_fingerprint=engines.record, keep=keep)
    device_lost = Passes(w, ctx, job, mode, ws, rec, hooks).run()
    rec["utc"] = utc_now()
    return rec, device_lost
