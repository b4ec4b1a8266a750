"""The GPU's SM clock, power draw and throttling across one timing pass: ``timing["gpu_clocks"]``
(fields in docs/report-and-results.md). An idle GPU ramps its clock up, one under sustained work
sits at its power cap at a lower clock. NVML is read at the three points ``ClockWatch`` names,
never while steps run; at ``stop`` also the driver's own sample buffers (no thread of ours wakes
up inside a sample) and the throttle-time counters.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from detbench.store.gpustate import SLOWDOWN_VIOLATIONS, VIOLATION_POLICIES, reasons_from_mask
from detbench.worker import nvml as nv


class ClockWatch:
    """NVML read at ``start`` (before the warm-up), ``mark`` (the first sample) and ``stop``."""

    def __init__(self, device: Any) -> None:
        self.nvml, self.handle, self.reason = nv.device_handle(device)
        self.unavailable: dict[str, str] = {}
        self._reads: dict[str, dict[str, Any]] = {}
        self._us: dict[str, int] = {}

    def _read(self, when: str) -> None:
        if self.nvml is None:
            return
        nvml, h, miss = self.nvml, self.handle, self.unavailable
        sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        now: dict[str, Any] = {
            "sm": nv.read(lambda: int(nvml.nvmlDeviceGetClockInfo(h, sm)), miss, "sm_clock"),
            # NVML reports milliwatts.
            "power": nv.read(lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, miss, "power"),
        }
        if when != "start":
            get: Any = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )
            now["reasons"] = nv.read(lambda: reasons_from_mask(int(get(h))), miss, "reasons")
            now["violation_ns"] = {
                name: nv.read(
                    lambda p=VIOLATION_POLICIES[name]: int(
                        nvml.nvmlDeviceGetViolationStatus(h, p).violationTime
                    ),
                    miss,
                    f"violation.{name}",
                )
                for name in SLOWDOWN_VIOLATIONS
            }
        self._reads[when] = now
        self._us[when] = int(time.time() * 1e6)  # NVML's sample timestamps

    def start(self) -> None:
        self._read("start")

    def mark(self) -> None:
        self._read("mark")

    def stop(self) -> dict[str, Any]:
        if self.nvml is None:
            return {"status": "unsupported", "reason": self.reason}
        self._read("stop")
        start, mark, stop = (self._reads.get(k, {}) for k in ("start", "mark", "stop"))
        nvml, h, miss = self.nvml, self.handle, self.unavailable
        since, until = self._us.get("mark", self._us["stop"]), self._us["stop"]

        def series(key: str, kind: str, scale: float) -> dict[str, Any]:
            got = [v * scale for v in nv.samples(nvml, h, kind, since, until)]
            return {
                "warmup_start": start.get(key),
                "sampling_start": mark.get(key),
                "end": stop.get(key),
                "min": min(got) if got else None,
                "median": statistics.median(got) if got else None,
                "max": max(got) if got else None,
                "samples": len(got),
            }

        held: dict[str, float] = {}
        for name in SLOWDOWN_VIOLATIONS:
            a = (mark.get("violation_ns") or {}).get(name)
            b = (stop.get("violation_ns") or {}).get(name)
            if a is not None and b is not None:
                held[name] = (b - a) / 1e9
        sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        out = {
            "status": "ok",
            "source": "nvml",
            "sm_clock_mhz": series("sm", "NVML_PROCESSOR_CLK_SAMPLES", 1.0),
            "power_w": series("power", "NVML_TOTAL_POWER_SAMPLES", 1e-3),
            "max_sm_clock_mhz": nv.read(
                lambda: int(nvml.nvmlDeviceGetMaxClockInfo(h, sm)), miss, "max_sm_clock"
            ),
            "power_limit_w": nv.read(
                lambda: nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0, miss, "power_limit"
            ),
            "throttle_reasons": sorted(
                set(mark.get("reasons") or []) | set(stop.get("reasons") or [])
            ),
            "throttled_seconds": held,
        }
        if miss:
            out["unavailable"] = dict(miss)
        return out
