"""Sustained clocks: a timing that is what a long run of the workload sees.

Under sustained matrix work a GPU sits at its power cap, at a lower clock than in a burst. On the
H100 (results/20261126-h100-experiments/sustained.json, NVML read beside each 0.1 s block) an
8192^3 bf16 GEMM ran its first 0.1 s at 1980 MHz (1.404 ms a step); by 0.2 s the software power
cap held the clock at 1380 MHz; NVML's power draw, an average over about 1 s, reached the 700 W
limit at 1.0 s; the clock then swung between 1095 and 1425 MHz with a period of about 1 s for
a few seconds and settled near 1365 MHz: 1.616 ms a step over the last 2 s of a 12 s hold, 15%
slower than the burst. A memory-bound 1 GiB scale drew 514 W, never met a limit, and did not
move (0.7128-0.7135 ms from the second block on). So the hold costs nothing where nothing acts,
and holds the load where the power controller acts:

1. **NvmlReader, overlapped with the samples.** The warm-up and the samples run as in burst mode.
   Then NVML says whether the power or thermal controller acted since the warm-up began
   (``acting``): a power or thermal throttle reason active now, the power and thermal
   throttle-time counters grown by ``ACT_SHARE`` of the load's seconds or more, or (where
   nvidia-ml-py has the field) the instant power at ``NEAR_CAP_SHARE`` of the enforced limit
   or more. A pass with less than ``PROBE_SECONDS`` of load is first extended to that with
   more samples (the controller took 0.1-0.2 s to act on the GEMM). Nothing acted: the samples
   stand (the clock never moved under them) and the hold cost only that extension.
2. **Hold, where the controller acts.** The samples so far are dropped (they were taken before
   the clocks settled), the load runs on in groups of samples, NVML read after each, until it
   has run ``HOLD_MIN_SECONDS`` since the warm-up began and the averaged power reads at least
   ``AT_CAP_SHARE`` of the limit (``hold_settled``: the power average's 1 s window is full of
   capped work), or until ``HOLD_CEILING_SECONDS`` (not settled; said so in the record).
3. **Samples of a held pass span at least ``CAPPED_SPAN_SECONDS``**, so that the controller's
   swings (about 1 s apart) are averaged rather than caught at one phase. On the recorded GEMM,
   blocks from 1.5 s to 2.5 s have a median 1.6% under the last 2 s; from 2.0 s to 3.0 s, 1.0%.

Where NVML cannot answer (no nvidia-ml-py, no driver, a CPU, an injected clock) nothing is held
and the record says why (``unsupported``); ``--clocks burst`` skips the probe and the hold (a
burst's figure: the clock a short job sees before the controller acts). On a CPU the option is
recorded and has no effect. The decisions (``acting``, ``hold_settled``) are pure functions of
``Reading``s, tested on the recorded H100 readings (tests/test_sustain.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from detbench.store.gpustate import SLOWDOWN_REASONS, VIOLATION_POLICIES, reasons_from_mask
from detbench.worker import nvml as nv

#: ``--clocks``: sustained (the default on CUDA) or burst.
CLOCK_MODES = ("sustained", "burst")
DEFAULT_CLOCKS = "sustained"
#: The least seconds of load (warm-up and samples) before the probe may say nothing acts.
PROBE_SECONDS = 0.25
#: The controller acted: the clock held down for this share of the load's seconds, or more.
ACT_SHARE = 0.1
#: ... or the instant power at this share of the enforced limit, or more.
NEAR_CAP_SHARE = 0.95
#: A held load runs at least this long from the warm-up's start ...
HOLD_MIN_SECONDS = 2.0
#: ... until NVML's averaged power reads this share of the enforced limit ...
AT_CAP_SHARE = 0.95
#: ... and at most this long, settled or not.
HOLD_CEILING_SECONDS = 3.0
#: The samples of a held pass span at least this many seconds.
CAPPED_SPAN_SECONDS = 1.0
#: Seconds of load between two NVML reads in the hold (a group of samples).
READ_EVERY_SECONDS = 0.05
#: The throttle-time counters that say power or heat held the clock down.
LIMIT_COUNTERS = ("power", "thermal")
#: NVML's field of the instant power draw (nvidia-ml-py's NVML_FI_DEV_POWER_INSTANT).
POWER_INSTANT_FIELD = "NVML_FI_DEV_POWER_INSTANT"


@dataclass(frozen=True)
class Reading:
    """One NVML reading: ``t`` seconds of load since the warm-up began; power in watts
    (``power_w``: NVML's power draw, averaged over about 1 s on recent GPUs; ``instant_w``:
    the instant draw, None where NVML has no such field); ``limited_s``: the power and thermal
    throttle-time counters summed, in seconds."""

    t: float
    sm_mhz: int | None = None
    power_w: float | None = None
    instant_w: float | None = None
    limit_w: float | None = None
    reasons: tuple[str, ...] = ()
    limited_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "sm_clock_mhz": self.sm_mhz,
            "power_w": self.power_w,
            "power_instant_w": self.instant_w,
            "power_limit_w": self.limit_w,
            "throttle_reasons": list(self.reasons),
        }


def acting(first: Reading, last: Reading) -> bool:
    """Whether the power or thermal controller acted on the load between two readings."""
    if any(r in SLOWDOWN_REASONS for r in last.reasons):
        return True
    load = last.t - first.t
    held = (
        None
        if first.limited_s is None or last.limited_s is None
        else last.limited_s - first.limited_s
    )
    if held is not None and load > 0 and held >= ACT_SHARE * load:
        return True
    if last.instant_w is not None and last.limit_w:
        return last.instant_w >= NEAR_CAP_SHARE * last.limit_w
    return False


def hold_settled(last: Reading) -> bool:
    """Whether a held load may be sampled: ``HOLD_MIN_SECONDS`` of load, and the averaged power
    at the cap (where NVML reads no power or limit, the least hold alone)."""
    if last.t < HOLD_MIN_SECONDS:
        return False
    if last.power_w is None or not last.limit_w:
        return True
    return last.power_w >= AT_CAP_SHARE * last.limit_w


class NvmlReader:
    """NVML read for the hold: the clock, the power (averaged and instant), the limit, the
    throttle reasons and counters. ``reason``: why it cannot read (then ``read`` is None)."""

    def __init__(self, device: Any) -> None:
        self.nvml, self.handle, self.reason = nv.device_handle(device)
        self.unavailable: dict[str, str] = {}
        self.t0 = time.perf_counter()

    def start(self) -> Reading | None:
        self.t0 = time.perf_counter()
        return self.read()

    def read(self) -> Reading | None:
        if self.nvml is None:
            return None
        nvml, h, miss = self.nvml, self.handle, self.unavailable
        t = time.perf_counter() - self.t0
        sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        get_reasons: Any = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        counters = [
            nv.read(
                lambda p=VIOLATION_POLICIES[name]: (
                    int(nvml.nvmlDeviceGetViolationStatus(h, p).violationTime) / 1e9
                ),
                miss,
                f"violation.{name}",
            )
            for name in LIMIT_COUNTERS
        ]
        known = [c for c in counters if c is not None]
        return Reading(
            t=t,
            sm_mhz=nv.read(lambda: int(nvml.nvmlDeviceGetClockInfo(h, sm)), miss, "sm_clock"),
            power_w=nv.read(lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, miss, "power"),
            instant_w=self._instant(),
            limit_w=nv.read(
                lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, miss, "power_limit"
            ),
            reasons=tuple(
                nv.read(lambda: reasons_from_mask(int(get_reasons(h))), miss, "reasons") or ()
            ),
            limited_s=sum(known) if known else None,
        )

    def _instant(self) -> float | None:
        """The instant power draw in watts, where nvidia-ml-py and the driver have the field."""
        nvml, miss = self.nvml, self.unavailable
        if POWER_INSTANT_FIELD in miss:
            return None
        field = getattr(nvml, POWER_INSTANT_FIELD, None)
        if field is None:
            miss[POWER_INSTANT_FIELD] = "this nvidia-ml-py has no such field"
            return None

        def get() -> float:
            value = nvml.nvmlDeviceGetFieldValues(self.handle, [field])[0]
            if int(getattr(value, "nvmlReturn", 0)) != 0:
                raise RuntimeError(f"NVML returned {value.nvmlReturn} for the field")
            return float(value.value.uiVal) / 1000.0  # milliwatts

        return nv.read(get, miss, POWER_INSTANT_FIELD)


def unsupported_hold(
    mode: str, probe: NvmlReader | None, device: Any, clock: Any
) -> dict[str, Any]:
    """The record's ``hold`` where nothing was held, and why."""
    if mode == "burst":
        return {"status": "burst", "reason": "--clocks burst: the load was not held"}
    if clock is not None:
        why = (
            "a clock given by the caller (a distributed rank's or a test's): the load was not held"
        )
    elif device is None or getattr(device, "type", None) != "cuda":
        why = "not a CUDA GPU: the clock mode has no effect here"
    else:
        why = f"{probe.reason if probe else 'no NVML'}; sampled as in burst mode"
    return {"status": "unsupported", "reason": why}


Group = Callable[[], float]  # runs one group of samples, returns their seconds of load


def hold(probe: NvmlReader, first: Reading, last: Reading, group: Group) -> tuple[Reading, bool]:
    """Run ``group`` after group until ``hold_settled`` or ``HOLD_CEILING_SECONDS`` of load:
    (the last reading, whether it settled)."""
    while True:
        if hold_settled(last):
            return last, True
        if last.t >= HOLD_CEILING_SECONDS:
            return last, False
        group()
        got = probe.read()
        if got is None:  # NVML stopped answering: the least hold decides
            return last, last.t >= HOLD_MIN_SECONDS
        last = got


def report(
    first: Reading,
    held: Reading,
    end: Reading,
    acted: bool,
    settled: bool,
    added: float,
    dropped: int,
) -> dict[str, Any]:
    """The record's ``hold``: what the probe and the hold did (``seconds``: the load it added
    before the counted samples; ``load_seconds``: the load from the warm-up's start to the
    first counted sample of a held pass, or to the probe), and NVML at the end of the pass."""
    limited = (
        None
        if first.limited_s is None or end.limited_s is None
        else end.limited_s - first.limited_s
    )
    return {
        "status": "ok",
        "acted": acted,
        "settled": settled,
        "seconds": added,
        "load_seconds": held.t,
        "dropped_samples": dropped,
        "limited_seconds": limited,
        "end": end.to_json(),
    }


def group_size(sample_seconds: float, batch: int) -> int:
    """Samples per group in the probe's extension and the hold: about ``READ_EVERY_SECONDS``."""
    if sample_seconds <= 0:
        return batch
    return max(1, min(batch, round(READ_EVERY_SECONDS / sample_seconds)))


def settle_pass(
    probe: NvmlReader,
    first: Reading,
    sampler: Any,
    step: Callable[[], Any],
    number: int,
    sample_seconds: float,
    samples: list[float],
    resample: Callable[[], tuple[list[float], int]],
) -> tuple[list[float], int, dict[str, Any]]:
    """After a pass's samples: probe (extending the load to ``PROBE_SECONDS``), and where the
    controller acted, drop the samples, hold the load and ``resample``. (samples, steps per
    sample, the record's ``hold``); see the module docstring."""
    start = sampler.now()
    k = group_size(sample_seconds, sampler.batch)
    samples = list(samples)
    last = probe.read()
    while last is not None and last.t < PROBE_SECONDS:
        samples.extend(sampler.samples(step, number, k))
        last = probe.read()
    if last is None:
        why = "NVML stopped answering; sampled as in burst mode"
        return samples, number, {"status": "unsupported", "reason": why}
    if not acting(first, last):
        return samples, number, report(first, last, last, False, True, sampler.now() - start, 0)
    dropped = len(samples)
    held, settled = hold(probe, first, last, lambda: sum(sampler.samples(step, number, k)))
    added = sampler.now() - start
    samples, number = resample()
    end = probe.read() or held
    return samples, number, report(first, held, end, True, settled, added, dropped)


def expected_hold_seconds(pass_seconds: float, acts: bool = False) -> float:
    """The seconds the probe and the hold are expected to add to a pass whose warm-up and
    samples take ``pass_seconds`` in burst mode, for the run's estimate: the probe's extension
    to ``PROBE_SECONDS`` where nothing acts; where the controller acts (``acts``), the load held
    to ``HOLD_MIN_SECONDS`` and samples spanning ``CAPPED_SPAN_SECONDS``."""
    if acts:
        return max(0.0, HOLD_MIN_SECONDS - pass_seconds) + CAPPED_SPAN_SECONDS
    return max(0.0, PROBE_SECONDS - pass_seconds)
