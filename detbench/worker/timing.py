"""Adaptive timing of a warmed-up step: samples until the median step time is known well enough.

``time_step`` replaces ``torch.utils.benchmark.Timer.blocked_autorange`` (its block-size rule makes
every GPU block 80-800 ms, so a 1 s budget gave 2-12 samples). The policy, and why:

* **Warm-up until steady, outside every sample** (``detbench.worker.warmup``): at the thread
  count that is timed, a step timed alone, then groups of samples until the median of a group
  stops moving from the group before it, with a ceiling of the budget in wall time and at least
  ``warmup_steps`` steps unless the ceiling comes first. cuDNN autotuning (``cudnn.benchmark``),
  allocator growth, lazy initialisation, compilation and a GPU clock still ramping up land
  there, never in a sample. ``Timing.warmup`` says what it did (steps, seconds, settled or not).
* **A sample is one block of ``number_per_block`` consecutive steps**, and its value is the
  block's time divided by the step count (seconds per step, as ``Measurement.times`` gives).
  Blocks rather than single steps because a step can be far shorter than what the clock can
  resolve cheaply: a perf_counter read costs ~0.1 µs and a CUDA event pair a few µs of launch.
* **Block size from the warmed step.** The block gets ``max(1, floor(budget / 50 / step))``
  steps, ``step`` the median of the warm-up's last group: a sample lasts about 1/50
  of the budget (2 ms at the quick profile's 0.1 s, 20 ms at 1 s), which is >= 1e4 clock reads
  for any budget >= 0.1 s, so clock overhead is negligible, while the budget still holds ~50
  samples: enough for the rule below to reach a narrow interval (at n = 50 the 95 % interval of
  the median runs from about the 36th to the 64th percentile of the samples). A step longer than
  budget / 50 gets one step per sample and fewer samples.
* **Stopping rule.** After each check, the distribution-free 95 % confidence interval of the
  median is the pair of order statistics ``(x_(j), x_(n+1-j))`` with ``j`` the largest rank with
  ``P(B <= j - 1) <= 0.025`` for ``B ~ Binomial(n, 1/2)`` (the number of samples below the true
  median); coverage is then >= 95 % whatever the distribution of the samples (no normality:
  step times are skewed, with long right tails). Such an interval exists only from n = 6 on
  (at n = 5 even ``[min, max]`` covers only 93.75 %), so the floor is
  ``max(min_samples, 6)``: every record carries an interval. Sampling stops at the first check
  where ``max(median - low, high - median) <= target_rel * median`` and the floor is reached;
  or, the target unmet, when ``budget`` seconds of wall time have been spent sampling and,
  on a GPU, the ceiling past it is spent too or the target is out of reach
  (``reached_target`` is then False, and the record keeps its interval). The floor is not
  cut by the budget: a step longer than ``budget / 6`` still gets 6 samples (the
  built-in profiles: steps over 17 ms at the quick 0.1 s budget).
* **How often the rule is checked.** Elsewhere than CUDA, after every sample: the check is a
  sort of n floats plus a cached rank lookup (microseconds, outside the samples), so the run
  stops at the first sample that meets the target. Past 100 samples (only when the block size
  was misjudged from a slow first step) it runs every ``n // 100`` samples so that sorting
  cannot eat the budget; the budget itself is checked after every sample. On CUDA, once per
  batch of up to 8 samples, because reading CUDA events needs a host synchronisation and a
  synchronisation inside the run of samples would drain the GPU's queue; a batch may therefore
  add up to 7 samples past the first one that met the target (more samples, never fewer), and
  is cut short to fit what is left of the budget.
* **Clocks** (``detbench.worker.samplers``). On CUDA (``device.type == "cuda"``) each sample
  is bracketed by a pair of ``torch.cuda.Event(enable_timing=True)`` recorded on the device's
  current stream: the time is the GPU's between the two events, with no host synchronisation
  inside a sample, and one ``torch.cuda.synchronize(device)`` per batch (the workload's device,
  not the current one). Elsewhere ``time.perf_counter`` is read before and after each block;
  when ``device`` is None and CUDA is initialised, the current CUDA device is synchronised
  before each read (as torch's own timer does), decided once and not per read. An injected
  ``clock`` replaces both (tests: exact numbers); it reads "injected" in the record.
* **Garbage collection is off inside a sample** (as ``timeit`` and hence torch's Timer do): a
  collection triggered by the harness's own allocations is not the step's cost.
* ``num_threads`` (default: torch's current count) is set for warm-up and sampling and restored.
* **Past the budget on a GPU** (``detbench.worker.budget``): a record short of its target
  samples on towards ``sampling_ceiling`` (300 samples' worth of seconds, at most 10x the
  budget: 3 s at full) while ``in_reach`` projects the target within 2 ceilings. Estimates, not
  measurements: replayed on each record's own samples of the H100's and the H200's core
  matrices (results/20261126-060355-cuda-full-h100-partial and
  results/20261126-040517-cuda-full-h200-partial; docs/measured.md, "Finished studies whose
  tools were retired"), 67% (H100, 246 records) and 60% (H200, 279) of the records with
  5-100 ms steps reach +-1%, against 48% and 44% under the budget alone, for +50.5 s (736
  records) and +62.2 s (824) of sampling: short of the 90% aimed at (the RNN steps scatter by
  2-5%; see ``budget``'s docstring). The run's estimate:
  ``budget.expected_sampling_seconds(step_seconds, budget, device_type)``.
* **Sustained clocks on CUDA** (``detbench.worker.sustain``, ``clocks="sustained"``, ``time_step``'s
  default; a run's workers hold only with ``--clocks sustained``): after the samples, NVML says
  whether the power or thermal limit acted on the load; where it did, the samples are dropped, the
  load held until the clock settles at the limit and the samples taken again over at least 1 s.
  ``Timing.clock_mode`` and ``Timing.hold`` say what happened; ``clocks="burst"`` skips it.
* **The GPU's clock beside every pass** (``detbench.worker.gpuclock``): NVML's SM clock, power
  draw and throttling, read before the warm-up, when sampling begins and when it ends (never
  inside a sample), in ``Timing.gpu_clocks``; ``unsupported`` with the reason where NVML cannot
  say (a CPU, an injected clock, no driver).

Median and IQR are computed as ``torch.utils.benchmark.Measurement`` computes them (linear
interpolation between order statistics, ``torch.quantile``'s rule), without building a tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from detbench.worker.budget import in_reach, sampling_ceiling
from detbench.worker.gpuclock import ClockWatch
from detbench.worker.ranks import median_ci
from detbench.worker.samplers import Clock, ClockSampler, CudaEventSampler, host_clock
from detbench.worker.sustain import (
    CAPPED_SPAN_SECONDS,
    CLOCK_MODES,
    DEFAULT_CLOCKS,
    NvmlReader,
    Reading,
    settle_pass,
    unsupported_hold,
)
from detbench.worker.warmup import Sampler, Warmup, warm_up

#: The fewest samples with a 95 % interval of the median (the floor of every record).
MIN_CI_SAMPLES = 6
#: The rule is checked after every sample up to this many samples, then every n // this.
EVERY_SAMPLE_UNTIL = 100


@dataclass(frozen=True)
class Timing:
    """Raw samples (seconds per step, one per block of ``number_per_block`` steps), their
    summary, and how far the stopping rule got: the 95 % interval of the median
    ``[ci_low, ci_high]`` (seconds per step) and its half-width relative to the median."""

    samples: tuple[float, ...]
    number_per_block: int
    median: float
    iqr: float
    warmup_steps: int  # the least the warm-up was asked for; what it ran is ``warmup.steps``
    budget: float
    num_threads: int
    ci_low: float
    ci_high: float
    ci_rel: float
    target_rel: float
    reached_target: bool
    clock: str
    min_samples: int  # the floor applied: max(min_samples asked for, MIN_CI_SAMPLES)
    warmup: Warmup | None = None  # what the warm-up did; None: no warm-up record
    gpu_clocks: dict[str, Any] | None = None  # ``gpuclock.ClockWatch.stop()``
    ceiling: float | None = None  # the most seconds of sampling allowed (``sampling_ceiling``)
    clock_mode: str | None = None  # "sustained" or "burst" (``--clocks``)
    hold: dict[str, Any] | None = None  # what ``sustain`` did, or why it did nothing

    @property
    def min_run_time(self) -> float:
        """The budget, under the name older records and readers use."""
        return self.budget

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": list(self.samples),
            "number_per_block": self.number_per_block,
            "median": self.median,
            "iqr": self.iqr,
            "warmup_steps": self.warmup_steps,
            "min_run_time": self.budget,
            "num_threads": self.num_threads,
            "budget": self.budget,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "ci_rel": self.ci_rel,
            "target_rel": self.target_rel,
            "reached_target": self.reached_target,
            "clock": self.clock,
            "min_samples": self.min_samples,
            "warmup": None if self.warmup is None else self.warmup.to_json(),
            "gpu_clocks": self.gpu_clocks,
            "ceiling": self.ceiling,
            "clock_mode": self.clock_mode,
            "hold": self.hold,
        }


def quantile(sorted_samples: tuple[float, ...] | list[float], q: float) -> float:
    """``torch.quantile(x, q)`` (linear interpolation) on already sorted floats, with torch's
    two-sided lerp so results agree with ``Measurement`` to the last bit."""
    n = len(sorted_samples)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    w = pos - lo
    a, b = sorted_samples[lo], sorted_samples[hi]
    return a + w * (b - a) if w < 0.5 else b - (b - a) * (1.0 - w)


def summarise(samples: tuple[float, ...] | list[float]) -> tuple[float, float]:
    """(median, IQR) as ``torch.utils.benchmark.Measurement`` gives them."""
    s = sorted(samples)
    return quantile(s, 0.5), quantile(s, 0.75) - quantile(s, 0.25)


def relative_half_width(median: float, ci: tuple[float, float]) -> float:
    """max(median - low, high - median) / median; 0 for an all-zero interval."""
    half = max(median - ci[0], ci[1] - median)
    if median > 0:
        return half / median
    return 0.0 if half == 0 else math.inf


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def time_step(
    step: Callable[[], Any],
    *,
    warmup_steps: int,
    budget: float,
    target_rel: float,
    min_samples: int = 5,
    device: torch.device | None = None,
    clock: Clock | None = None,
    num_threads: int | None = None,
    ceiling_device: str | None = None,
    clocks: str = DEFAULT_CLOCKS,
    probe: NvmlReader | None = None,
) -> Timing:
    """Warm up ``step`` until its step time settles (at least ``warmup_steps`` steps unless the
    warm-up's ceiling comes first), then sample it until the 95 % interval of its median step
    time is within ``+-target_rel`` of the median (at least ``max(min_samples, 6)`` samples,
    ``budget`` seconds of sampling, then on up to ``sampling_ceiling`` while the target is in
    reach, unless the floor needs more). ``ceiling_device``: the device type whose ceiling
    applies (None: ``device``'s; tests name "cuda" with an injected clock). ``clocks``:
    "sustained" holds the load where the power controller acts (``detbench.worker.sustain``),
    "burst" does not; ``probe``: NVML's readings for the hold (None: the device's own, on
    CUDA). See the module docstring for every choice."""
    _check_arguments(budget, target_rel, min_samples, warmup_steps, clocks)
    threads = num_threads if num_threads is not None else torch.get_num_threads()
    dev = torch.device(device) if device is not None else None
    sampler, on_device = _sampler_for(dev, clock)
    watch = ClockWatch(dev if clock is None else None)
    if probe is None and clocks == "sustained" and clock is None and dev is not None:
        probe = NvmlReader(dev)
    kind = ceiling_device or (dev.type if dev is not None and clock is None else None)
    with torch_threads(threads), on_device:
        first = probe.start() if probe is not None and clocks == "sustained" else None
        watch.start()
        warm = warm_up(step, sampler, warmup_steps, budget, target_rel)
        watch.mark()
        per_step = warm.medians[-1]
        ceiling = sampling_ceiling(warm.number_per_block * per_step, budget, kind)
        samples, number, _ = _sample(
            step, sampler, warm.number_per_block, per_step, budget, target_rel, min_samples, ceiling
        )
        if first is None or probe is None:
            held = unsupported_hold(clocks, probe, dev, clock)
        else:
            samples, number, held = _held_pass(
                probe,
                first,
                watch,
                step,
                sampler,
                samples,
                number,
                per_step,
                budget,
                target_rel,
                min_samples,
                ceiling,
            )
        gpu_clocks = watch.stop()
    return Timing(
        **summary_of(samples, target_rel),
        number_per_block=number,
        warmup_steps=warmup_steps,
        budget=budget,
        num_threads=threads,
        target_rel=target_rel,
        clock=sampler.name,
        min_samples=max(min_samples, MIN_CI_SAMPLES),
        warmup=warm,
        gpu_clocks=gpu_clocks,
        ceiling=ceiling,
        clock_mode=clocks,
        hold=held,
    )


def summary_of(samples: list[float], target_rel: float) -> dict[str, Any]:
    """The ``Timing`` fields computed from its samples: the samples, their median and IQR, the
    95 % interval of the median and whether it met ``target_rel`` (the rule's answer, after any
    held pass's samples too)."""
    median, iqr = summarise(samples)
    ci = median_ci(samples)
    assert ci is not None  # len(samples) >= MIN_CI_SAMPLES
    rel = relative_half_width(median, ci)
    return {
        "samples": tuple(samples),
        "median": median,
        "iqr": iqr,
        "ci_low": ci[0],
        "ci_high": ci[1],
        "ci_rel": rel,
        "reached_target": rel <= target_rel,
    }


def _held_pass(
    probe: NvmlReader,
    first: Reading,
    watch: ClockWatch,
    step: Callable[[], Any],
    sampler: ClockSampler | CudaEventSampler,
    samples: list[float],
    number: int,
    per_step: float,
    budget: float,
    target_rel: float,
    min_samples: int,
    ceiling: float,
) -> tuple[list[float], int, dict[str, Any]]:
    """After the first pass's samples, with sustained clocks (``detbench.worker.sustain``): where
    the power or thermal limit acted, the samples dropped, the load held and the samples taken
    again over at least ``CAPPED_SPAN_SECONDS``. (samples, steps per sample, the ``hold``)."""

    def resample() -> tuple[list[float], int]:
        watch.mark()  # the counted samples begin here
        got = _sample(
            step,
            sampler,
            number,
            per_step,
            max(budget, CAPPED_SPAN_SECONDS),
            target_rel,
            min_samples,
            max(ceiling, CAPPED_SPAN_SECONDS),
            CAPPED_SPAN_SECONDS,
        )
        return got[0], got[1]

    return settle_pass(probe, first, sampler, step, number, number * per_step, samples, resample)


def _check_arguments(
    budget: float, target_rel: float, min_samples: int, warmup_steps: int, clocks: str
) -> None:
    """``time_step``'s arguments, checked before anything runs: a ``ValueError`` naming them."""
    if budget < 0 or target_rel <= 0 or min_samples < 1 or warmup_steps < 0:
        raise ValueError(
            f"need budget >= 0, target_rel > 0, min_samples >= 1 and warmup_steps >= 0; got "
            f"{budget}, {target_rel}, {min_samples}, {warmup_steps}"
        )
    if clocks not in CLOCK_MODES:
        raise ValueError(f"clocks must be one of {', '.join(CLOCK_MODES)}; got {clocks!r}")


def _sampler_for(
    dev: torch.device | None, clock: Clock | None
) -> tuple[ClockSampler | CudaEventSampler, AbstractContextManager[Any]]:
    """The sampler that times ``time_step``'s blocks (``detbench.worker.samplers``), and the
    context it runs in: an injected ``clock``; CUDA events on a CUDA device, whose events and
    streams are the workload's device's; else the host clock."""
    if clock is not None:
        return ClockSampler(clock, "injected"), nullcontext()
    if dev is not None and dev.type == "cuda":
        return CudaEventSampler(dev), torch.cuda.device(dev)
    return ClockSampler(host_clock(dev), "perf_counter"), nullcontext()


def _sample(
    step: Callable[[], Any],
    sampler: ClockSampler | CudaEventSampler | Sampler,
    number: int,
    per_step: float,
    budget: float,
    target_rel: float,
    min_samples: int,
    ceiling: float | None = None,
    min_seconds: float = 0.0,
) -> tuple[list[float], int, bool]:
    """(samples, steps per sample, whether the target was reached): the loop of the rule, with
    ``number`` steps per sample of about ``per_step`` seconds each (from the warm-up), sampling
    for ``budget`` seconds, then on towards ``ceiling`` (default: the budget) while the target
    is in reach (``in_reach``); the target counts only once ``min_seconds`` have been sampled
    (a held pass's span)."""
    expected = max(number * per_step, 1e-9)  # seconds per sample, to size CUDA batches
    floor = max(min_samples, MIN_CI_SAMPLES)
    top = budget if ceiling is None else max(budget, ceiling)
    samples: list[float] = []
    start = sampler.now()
    spent = 0.0
    limit = budget
    while True:
        # A batch never plans past the limit (unless the floor still needs samples).
        room = max(1, math.floor((limit - spent) / expected))
        k = max(1, min(sampler.batch, max(room, floor - len(samples))))
        samples.extend(sampler.samples(step, number, k))
        spent = sampler.now() - start
        n = len(samples)
        if n < floor:
            continue
        # A check sorts n samples; past EVERY_SAMPLE_UNTIL samples (a block size misjudged from
        # a slow first step) it runs every n // EVERY_SAMPLE_UNTIL samples, so checks cannot eat
        # the budget, at the price of at most 1 % more samples than the rule needed.
        due = n < EVERY_SAMPLE_UNTIL or n % (n // EVERY_SAMPLE_UNTIL) == 0 or k > 1
        if due or spent >= limit:
            ci = median_ci(samples)
            rel = math.inf if ci is None else relative_half_width(summarise(samples)[0], ci)
            if rel <= target_rel and spent >= min_seconds:
                return samples, number, True
            if spent >= budget:
                # Past the budget: on towards the ceiling while the target is in reach.
                if spent >= top or not in_reach(rel, target_rel, n, spent, top):
                    return samples, number, False
                limit = top
