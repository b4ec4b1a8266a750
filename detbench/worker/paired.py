"""A timing worker's side of paired timing: one workload built and warmed up, then timed one
block at a time, each block when the runner asks for it (``detbench.run.paired``; why costs are
timed in turns, docs/running.md "Costs side by side").

The worker applied its mode once, before any CUDA work, and toggles no setting (cuDNN's plan
cache does not key on ``benchmark``). The workload is built as the verdict worker built it
(``build_pass``), and its first step's digest goes back for ``same_bits``. A block holds
``floor(block_seconds / step)`` steps, at least one, so every mode's block lasts about as long;
one block is one sample, after ``warmup.turn_steps`` untimed steps. NVML is read when the
warm-up starts, at the first block and after the last, never between blocks of a round.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from detbench.core.modes import Mode
from detbench.core.workload import Context, Workload
from detbench.worker import fingerprint as fp
from detbench.worker import warmup
from detbench.worker.applied import WorkerSettings
from detbench.worker.gpuclock import ClockWatch
from detbench.worker.hostload import Probe
from detbench.worker.measure import build_pass, classify, context, new_record, release, sync
from detbench.worker.memory import PeakWatch, footprint_bytes, free_bytes
from detbench.worker.samplers import ClockSampler, CudaEventSampler, host_clock
from detbench.worker.timing import MIN_CI_SAMPLES, Timing, summary_of, torch_threads
from detbench.worker.warmup import block_steps, warm_up


@dataclass
class PairedTiming:
    """One workload of a timing worker, from its build to its last block (``finish``)."""

    w: Workload
    ctx: Context
    mode: Mode
    job: dict[str, Any]
    step: Any = None
    sampler: Any = None
    number: int = 1
    samples: list[float] = field(default_factory=list)
    warm: Any = None
    watch: Any = None
    threads: int = 1
    #: The host's load from the first block to ``finish`` (``hostload.Probe``): the other
    #: workers of the group are the run's own, anything else is foreign.
    load: Any = None
    #: A clock the ranks of a distributed workload read alike (``distributed.rank``), so a block
    #: is the slowest rank's; None: the device's own sampler.
    clock: Any = None

    @classmethod
    def prepare(
        cls,
        w: Workload,
        job: dict[str, Any],
        mode: Mode,
        ws: WorkerSettings,
        ctx: Context | None = None,
        clock: Any = None,
    ) -> tuple[PairedTiming | None, dict[str, Any]]:
        """Build ``w``, digest its first step, warm it up and size its block: (the timing, or None
        where it failed; the ``prepared`` message's fields). ``ctx``: a rank's context."""
        ctx = ctx or context(w, job)
        device = ctx.device
        self = cls(w, ctx, mode, job, threads=torch.get_num_threads(), clock=clock)
        # build_pass reads the settings back into it: a changed setting is caught as in a verdict
        rec = new_record(w, ctx, job, mode, ws, self.threads)
        t0 = time.perf_counter()
        watch = PeakWatch(device)
        try:
            watch.start()
            self.step = build_pass(w, ctx, ws, mode, rec)
            outputs = fp.step_outputs(self.step())
            sync(device)
            digest = fp.step_digest(outputs, rec["fingerprint_method"])
            del outputs
            self._warm_up()
        except Exception as exc:  # a workload that cannot be timed is data, not the worker's end
            status, message = classify(exc)
            self.free()
            return None, {"status": status, "message": message}
        _, memory = watch.stop()
        return self, self._prepared(digest, rec["settings_changed"], memory, t0)

    @classmethod
    def from_verdict(
        cls,
        w: Workload,
        job: dict[str, Any],
        mode: Mode,
        step: Any,
        rec: dict[str, Any],
        ctx: Context | None = None,
        clock: Any = None,
    ) -> tuple[PairedTiming | None, dict[str, Any]]:
        """Time the step this worker's verdict pass built (``passes.Hooks.keep``): no second
        build; the digest is the verdict's own first step, so ``same_bits`` holds by
        construction."""
        threads = int(rec.get("num_threads") or torch.get_num_threads())
        ctx = ctx or context(w, job)
        self = cls(w, ctx, mode, job, step=step, threads=threads, clock=clock)
        t0 = time.perf_counter()
        try:
            self._warm_up()
        except Exception as exc:
            status, message = classify(exc)
            self.free()
            return None, {"status": status, "message": message}
        digest = (rec.get("step_fingerprints") or [None])[0]
        return self, self._prepared(digest, rec["settings_changed"], rec.get("memory"), t0)

    def _prepared(
        self, digest: Any, changed: Any, memory: dict[str, Any] | None, t0: float
    ) -> dict[str, Any]:
        """The ``prepared`` message's fields, with the memory the runner sizes the group by."""
        return {
            "status": "ok",
            "first_step_digest": digest,
            "number_per_block": self.number,
            "step_seconds": self.warm.medians[-1],
            "settings_changed": changed,
            "prepare_seconds": time.perf_counter() - t0,
            "footprint_bytes": footprint_bytes(self.ctx.device, memory),
            "free_bytes": free_bytes(self.ctx.device),
        }

    def _warm_up(self) -> None:
        dev = self.ctx.device
        if self.clock is not None:
            ranks = self.ctx.world_size
            self.sampler = ClockSampler(self.clock, f"perf_counter, latest of {ranks} ranks")
        elif dev.type == "cuda":
            self.sampler = CudaEventSampler(dev)
        else:
            self.sampler = ClockSampler(host_clock(dev), "perf_counter")
        self.watch = ClockWatch(dev)
        # Half the seconds the rounds sample (at most the budget): the warm-up leaves behind the
        # one-offs; a slower drift is shared by both sides of a ratio.
        job, block = self.job, float(self.job["block_seconds"])
        budget = min(float(job["budget"]), int(job.get("rounds") or 10) * block / 2)
        steps, target = int(job["warmup_steps"]), float(job["target_rel"])
        with self._on_device():
            self.watch.start()
            self.warm = warm_up(self.step, self.sampler, steps, budget, target)
            self.watch.mark()
        self.number = block_steps(self.warm.medians[-1], block)

    def _on_device(self) -> contextlib.AbstractContextManager[Any]:
        if self.ctx.device.type == "cuda":
            return torch.cuda.device(self.ctx.device)
        return contextlib.nullcontext()

    @property
    def turn_steps(self) -> int:
        """The untimed steps before each of this workload's blocks (``warmup.turn_steps``)."""
        return warmup.turn_steps(self.warm.medians[-1], self.number)

    def block(self) -> dict[str, Any]:
        """Time one block: the ``block`` message's fields."""
        if self.load is None:
            self.load = Probe(self.ctx.device.type, self.job.get("run_pid"))
            self.load.start()
        with torch_threads(self.threads), self._on_device():
            # Untimed steps first: they pay the turn's cold start (``warmup.LONG_STEP_SECONDS``)
            for _ in range(self.turn_steps):
                self.step()
            sync(self.ctx.device)
            start = time.time()
            seconds = self.sampler.samples(self.step, self.number, 1)[0]
        self.samples.append(seconds)
        return {"seconds": seconds, "start": start}

    def reference(self, seconds: float) -> dict[str, Any]:
        """Time the step with a reference timer between two turns (``--reference-check``):
        ``Timer.blocked_autorange`` for about ``seconds`` on a CPU, the median of 8 CUDA-event
        blocks after an untimed one on a GPU. The ``reference`` message's fields."""
        with torch_threads(self.threads), self._on_device():
            if self.ctx.device.type == "cuda":
                sampler = CudaEventSampler(self.ctx.device)
                sampler.samples(self.step, self.number, 1)
                got = sorted(sampler.samples(self.step, self.number, 8))
                median = (got[3] + got[4]) / 2
                return {"seconds": median, "timer": "cuda events", "blocks": len(got)}
            from torch.utils.benchmark import Timer  # only when a reference is asked for

            # At the worker's threads: the Timer's default is one thread.
            timer = Timer(stmt="step()", globals={"step": self.step}, num_threads=self.threads)
            m = timer.blocked_autorange(min_run_time=seconds)
            return {
                "seconds": float(m.median),
                "timer": "torch.utils.benchmark blocked_autorange",
                "blocks": len(m.times),
            }

    def finish(self) -> dict[str, Any]:
        """The samples' ``Timing``, then the workload freed: the ``timed`` message's fields."""
        gpu_clocks = self.watch.stop() if self.watch is not None else None
        out: dict[str, Any] = {"samples": len(self.samples)}
        if self.load is not None:  # how busy the host was while the rounds ran
            out["host_load"] = self.load.stop()
        if len(self.samples) >= MIN_CI_SAMPLES:
            target = float(self.job["target_rel"])
            timing = Timing(
                **summary_of(self.samples, target),
                number_per_block=self.number,
                warmup_steps=int(self.job["warmup_steps"]),
                budget=float(self.job["budget"]),
                num_threads=self.threads,
                target_rel=target,
                clock=self.sampler.name,
                min_samples=MIN_CI_SAMPLES,
                warmup=self.warm,
                gpu_clocks=gpu_clocks,
                clock_mode="paired",
                turn_steps=self.turn_steps,
            )
            out["timing"] = timing.to_json()
        else:
            out["gpu_clocks"] = gpu_clocks
        self.free()
        return out

    def free(self) -> None:
        """Free this workload's tensors before the next is built."""
        self.step = None
        release(self.mode, self.ctx.device)
