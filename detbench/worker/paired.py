"""A timing worker's side of paired timing: one workload built and warmed up, then timed one
block at a time, each block when the runner asks for it.

Why: a cost is the ratio of two modes' step times. Timed in their own workers minutes apart, the
two medians come from different clock, power and host states, and the ratio carries that drift
(on a quiet 2-core CPU, the same computation in two workers differed by 50%, median). So every
mode of a replicate has a worker alive at once, and the runner has them take turns, one block
each, in an order shuffled anew each round (``detbench.run.paired``): each mode is then timed a
few hundred milliseconds from the others, under the same conditions, and a cost is estimated
from the rounds' ratios (``detbench.analysis.paired_costs``).

What a block is, and what it is not:

* **The mode's own fresh process.** The worker applied its mode once, before any CUDA work, as a
  verdict worker does; no setting is toggled inside it. (cuDNN's convolution plan cache keys on
  ``deterministic`` and ``allow_tf32`` but not on ``benchmark``: flipping ``cudnn.benchmark``
  inside one process would time the plan the other setting chose.)
* **The computation the verdict proves.** The workload is built exactly as the verdict worker
  built it (``build_pass``: seeded, the mode's execution), and the first step's digest is sent
  back, so the runner can say whether the timed process computed the verdict's first step bit
  for bit (``same_bits`` in ``paired.jsonl``).
* **Warmed up as any timing pass** (``warmup.warm_up``); then the block holds
  ``floor(block_seconds / step)`` steps, at least one, so each mode's block lasts about as long
  as the others' and a round about ``workers * block_seconds``.
* **One block, one sample**, after one untimed step (``warmup.TURN_STEPS``: the worker before
  this one ran other code on the cores and the GPU; none before a block that is one step of 0.1
  s or more, ``warmup.turn_steps``), timed by the pass's own samplers (CUDA
  events on a GPU, one host synchronisation at the block's end, before the next worker's
  turn; ``perf_counter`` on a CPU); garbage collection off inside it. NVML is read when the
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
    #: A clock the ranks of a distributed workload read alike (the latest of their
    #: ``perf_counter``s: ``distributed.rank``), so every rank warms up and times the same steps
    #: and a block is the slowest rank's; None: the device's own sampler.
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
        """Build ``w``, run its first step (digested), warm it up and size its block: (the
        timing, or None where it failed; the ``prepared`` message's fields). ``ctx``: a rank's
        context (None: the job's), ``clock``: the ranks' shared clock."""
        ctx = ctx or context(w, job)
        device = ctx.device
        self = cls(w, ctx, mode, job, threads=torch.get_num_threads(), clock=clock)
        # The verdict worker's record of the same build: build_pass reads the settings back into
        # it, so a workload that changes a setting is caught here as there.
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
        """Time the step this worker's verdict pass built and fingerprinted (``passes.Hooks.keep``):
        no second build, no second first step; warmed up from where the fingerprint steps left
        it. The digest is the verdict's own first step (``same_bits`` is then true by
        construction: one process computed both). ``ctx``, ``clock``: as ``prepare``'s."""
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
        """The ``prepared`` message's fields: the block's size, and the memory the runner sizes
        the group with (``run.paired``: a group too big for the device is split)."""
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
        # The warm-up's ceiling: half the seconds the rounds sample (at most the budget). Its
        # work is to leave behind the one-offs (autotuning, allocator growth, lazy set-up):
        # the slower drift a longer warm-up would wait out is shared by both sides of a ratio.
        rounds = int(self.job.get("rounds") or 10)
        budget = min(float(self.job["budget"]), rounds * float(self.job["block_seconds"]) / 2)
        with self._on_device():
            self.watch.start()
            self.warm = warm_up(
                self.step,
                self.sampler,
                int(self.job["warmup_steps"]),
                budget,
                float(self.job["target_rel"]),
            )
            self.watch.mark()
        self.number = block_steps(self.warm.medians[-1], float(self.job["block_seconds"]))

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
            # An untimed step first: the worker before this one ran other code on these cores
            # (and on the GPU), so the first step of a turn pays for caches, TLBs and sleeping
            # threads that a block of short steps would otherwise carry.
            for _ in range(self.turn_steps):
                self.step()
            sync(self.ctx.device)
            start = time.time()
            seconds = self.sampler.samples(self.step, self.number, 1)[0]
        self.samples.append(seconds)
        return {"seconds": seconds, "start": start}

    def reference(self, seconds: float) -> dict[str, Any]:
        """Time the step with a reference timer, in this process as it is between two of its
        turns: ``torch.utils.benchmark.Timer.blocked_autorange`` for about ``seconds`` on a CPU
        (its median per step), CUDA events around ``number_per_block`` steps' blocks on a GPU
        (``samplers.CudaEventSampler``, 8 blocks after one untimed block). The ``reference``
        message's fields; the samples of the rounds are untouched. ``--reference-check``
        alternates it with the rounds, so a drift of the machine is shared by both."""
        with torch_threads(self.threads), self._on_device():
            if self.ctx.device.type == "cuda":
                sampler = CudaEventSampler(self.ctx.device)
                sampler.samples(self.step, self.number, 1)
                got = sorted(sampler.samples(self.step, self.number, 8))
                median = (got[3] + got[4]) / 2
                return {"seconds": median, "timer": "cuda events", "blocks": len(got)}
            from torch.utils.benchmark import Timer  # only when a reference is asked for

            step = self.step
            # At the worker's threads: the Timer's default is one thread.
            timer = Timer(stmt="step()", globals={"step": step}, num_threads=self.threads)
            m = timer.blocked_autorange(min_run_time=seconds)
            return {
                "seconds": float(m.median),
                "timer": "torch.utils.benchmark blocked_autorange",
                "blocks": len(m.times),
            }

    def finish(self) -> dict[str, Any]:
        """The samples' summary as a ``Timing`` (the timing pass's JSON), then the workload
        freed: the ``timed`` message's fields."""
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
