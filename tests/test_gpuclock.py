"""The GPU's clock across a record's warm-up and samples (``worker/gpuclock``): ``unsupported``
with the reason on this machine, and, with NVML's answers injected as the timing tests inject a
clock, exactly the figures those answers give. What a real GPU's NVML answers waits for a GPU
(docs/measured.md)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import torch

from detbench.worker.gpuclock import ClockWatch


class FakeNvml:
    """NVML's answers for one GPU: an SM clock that reads 1980 MHz, then 1755, then 1305 (start,
    mark, stop), power 120 W, 650 W, 697 W, the power cap's throttle bit at the end, 0.25 s more
    of power-cap violation between mark and stop, and a sample buffer holding one sample before
    the sampling began and two inside it."""

    NVML_CLOCK_SM = 1

    def __init__(self) -> None:
        self.clocks = iter([1980, 1755, 1305])
        self.power = iter([120_000, 650_000, 697_000])  # mW
        self.reasons = iter([0x0, 0x4])  # at mark, at stop
        self.violation = iter([10_000_000_000, 10_250_000_000])  # ns, power, at mark and stop

    def nvmlDeviceGetClockInfo(self, handle: Any, kind: int) -> int:
        return next(self.clocks)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return next(self.power)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return next(self.reasons)

    def nvmlDeviceGetViolationStatus(self, handle: Any, policy: int) -> Any:
        if policy != 0:  # only the power counter is supported on this "GPU"
            raise RuntimeError("NVMLError_NotSupported")
        return SimpleNamespace(violationTime=next(self.violation))

    def nvmlDeviceGetSamples(self, handle: Any, kind: int, since: int) -> tuple[int, list[Any]]:
        values = {5: [1900, 1400, 1300], 0: [300_000, 690_000, 700_000]}[kind]  # MHz; mW
        stamps = [since - 5, since + 1, since + 2]  # the first before the sampling began
        samples = [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v))
                   for t, v in zip(stamps, values, strict=True)]  # fmt: skip
        return 1, samples  # 1: unsigned int values

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, kind: int) -> int:
        return 1980

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return 700_000


def test_the_clock_fields_read_what_nvml_answers() -> None:
    watch = ClockWatch(None)
    watch.nvml, watch.handle, watch.reason = FakeNvml(), object(), None
    watch.start()
    watch.mark()
    time.sleep(0.001)  # the buffer's samples fall between mark and stop
    got = watch.stop()
    assert got["status"] == "ok" and got["source"] == "nvml"
    assert got["sm_clock_mhz"] == {
        "warmup_start": 1980, "sampling_start": 1755, "end": 1305,
        "min": 1300.0, "median": 1350.0, "max": 1400.0, "samples": 2,
    }  # fmt: skip
    assert got["power_w"] == {
        "warmup_start": 120.0, "sampling_start": 650.0, "end": 697.0,
        "min": 690.0, "median": 695.0, "max": 700.0, "samples": 2,
    }  # fmt: skip
    assert got["throttle_reasons"] == ["sw_power_cap"]
    assert got["throttled_seconds"] == {"power": 0.25}
    assert (got["max_sm_clock_mhz"], got["power_limit_w"]) == (1980, 700.0)
    # The counters this GPU does not keep are named, not raised.
    assert set(got["unavailable"]) == {"violation.thermal", "violation.board_limit",
                                       "violation.reliability"}  # fmt: skip


def test_the_clock_fields_are_unsupported_here_with_the_reason() -> None:
    # This machine: a CPU, and no nvidia-ml-py. Each watch says why there is no clock.
    def watched(device: torch.device | None) -> dict[str, Any]:
        w = ClockWatch(device)
        w.start()
        w.mark()
        return w.stop()

    assert watched(torch.device("cpu")) == {
        "status": "unsupported",
        "reason": "the device is not a CUDA GPU: NVML reads NVIDIA GPUs only",
    }
    assert watched(None) == {
        "status": "unsupported",
        "reason": "no device was named: the timing ran on the host's clock",
    }
    if not torch.cuda.is_available():  # as a GPU worker on a host without NVML would read it
        cuda = ClockWatch(torch.device("cuda")).stop()
        assert cuda["status"] == "unsupported"
        assert cuda["reason"] == "nvidia-ml-py (pynvml) is not installed" or cuda[
            "reason"
        ].startswith("NVML: "), cuda
