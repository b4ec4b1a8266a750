"""The GPU's state as the driver sees it: model, driver, clocks, power, temperature, throttling.
The runner takes a ``snapshot()`` before and after a run (env.json's ``gpu_state``), and
``throttled()`` says whether the GPU slowed itself down in between.

Sources, in order: NVML (``pynvml``, with cumulative throttle-time counters), one ``nvidia-smi``
call, else nothing with the reason. A field the driver lacks is None, its error under
``unavailable``. Neither creates a CUDA context. Both list every GPU of the host, whatever
``CUDA_VISIBLE_DEVICES`` says, so each GPU carries its ``uuid`` (the worker's ``gpu_uuid``).
"""

from __future__ import annotations

import contextlib
import csv
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from detbench.store.results import utc_now

#: The bits of NVML's ``nvmlClocksEventReasons`` (nvml.h; nvidia-smi prints the same bitmask).
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that mean the GPU slowed itself down (power, heat, a hardware brake). Idle, the
#: application clocks a user set, sync boost and the display clock are not a throttle of the run.
SLOWDOWN_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
#: NVML's ``nvmlPerfPolicyType_t``: cumulative time (ns) the clocks were held down, per cause.
VIOLATION_POLICIES = {
    "power": 0,
    "thermal": 1,
    "sync_boost": 2,
    "board_limit": 3,
    "low_utilization": 4,
    "reliability": 5,
    "total_app_clocks": 10,
    "total_base_clocks": 11,
}
#: The counters that are a throttle of the run. The "total" ones and low utilisation also grow
#: while the GPU idles (between workers, during start-up), so they say nothing about the run.
SLOWDOWN_VIOLATIONS = ("power", "thermal", "board_limit", "reliability")

#: A snapshot's fields and the nvidia-smi query field of each, in the order they are asked for.
SMI_FIELDS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "driver": "driver_version",
    "sm_clock_mhz": "clocks.sm",
    "mem_clock_mhz": "clocks.mem",
    "max_sm_clock_mhz": "clocks.max.sm",
    "power_limit_w": "power.limit",
    "power_draw_w": "power.draw",
    "temperature_c": "temperature.gpu",
    "throttle_reasons": "clocks_throttle_reasons.active",
    "mig_mode": "mig.mode.current",
}
#: Newer drivers' name for the throttle reasons, asked for when the old name is refused.
SMI_RENAMED = {"clocks_throttle_reasons.active": "clocks_event_reasons.active"}
#: What nvidia-smi prints where it has no value (some in brackets).
SMI_NO_VALUE = ("N/A", "Not Supported", "Unknown Error", "Insufficient Permissions", "Unknown")
SMI_TIMEOUT = 10.0  # seconds: nvidia-smi on a wedged GPU can hang


def reasons_from_mask(mask: int) -> list[str]:
    """The names of the bits set in an NVML clock-event-reasons bitmask."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(REASON_BITS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_gpu(nvml: Any, index: int, driver: str | None) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu: dict[str, Any] = {"index": index, "driver": driver, "violation_ns": {}}
    unavailable: dict[str, str] = {}

    def read(field: str, get: Callable[[], Any]) -> None:
        try:
            gpu[field] = get()
        except Exception as exc:  # NVMLError_NotSupported and friends: recorded, not raised
            gpu[field] = None
            unavailable[field] = f"{type(exc).__name__}: {exc}"

    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    read("name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
    read("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    read("sm_clock_mhz", lambda: int(nvml.nvmlDeviceGetClockInfo(handle, sm)))
    read("mem_clock_mhz", lambda: int(nvml.nvmlDeviceGetClockInfo(handle, mem)))
    read("max_sm_clock_mhz", lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, sm)))
    # NVML reports milliwatts.
    read("power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0)
    read("power_draw_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    temp_gpu = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    read("temperature_c", lambda: int(nvml.nvmlDeviceGetTemperature(handle, temp_gpu)))
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    read("throttle_reasons", lambda: reasons_from_mask(int(reasons(handle))))  # type: ignore[misc]
    read("mig_mode", lambda: "Enabled" if nvml.nvmlDeviceGetMigMode(handle)[0] else "Disabled")
    for name, policy in VIOLATION_POLICIES.items():
        try:
            status = nvml.nvmlDeviceGetViolationStatus(handle, policy)
            gpu["violation_ns"][name] = int(status.violationTime)
        except Exception as exc:
            unavailable[f"violation_ns.{name}"] = f"{type(exc).__name__}: {exc}"
    if unavailable:
        gpu["unavailable"] = unavailable
    return gpu


def open_nvml() -> tuple[Any, str | None]:
    """The pynvml module with NVML initialised (each ``nvmlInit`` wants its ``nvmlShutdown``), or
    None and why not. Nothing here creates a CUDA context."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound on a host without the driver
        return None, f"NVML: {type(exc).__name__}: {exc}"[:200]
    return pynvml, None


def _nvml_snapshot() -> tuple[list[dict[str, Any]] | None, str | None]:
    """Every GPU as NVML sees it, or None and why NVML is not usable."""
    pynvml, reason = open_nvml()
    if pynvml is None:
        return None, reason
    try:
        try:
            driver: str | None = _text(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            driver = None
        return [_nvml_gpu(pynvml, i, driver) for i in range(pynvml.nvmlDeviceGetCount())], None
    except Exception as exc:
        return None, f"NVML: {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _smi_value(field: str, raw: str) -> Any:
    raw = raw.strip()
    if not raw or raw.strip("[]") in SMI_NO_VALUE:
        return None
    try:
        if field == "throttle_reasons":
            return reasons_from_mask(int(raw, 16))
        if field == "index" or field.endswith(("_mhz", "_c")):
            return int(float(raw))
        if field.endswith("_w"):
            return float(raw)
    except ValueError:
        return None
    return raw


def parse_smi_csv(text: str) -> list[dict[str, Any]]:
    """The GPUs of ``nvidia-smi --query-gpu`` CSV output, its columns in ``SMI_FIELDS`` order."""
    names = list(SMI_FIELDS)
    gpus = []
    for row in csv.reader(text.strip().splitlines(), skipinitialspace=True):
        if not row:
            continue
        if len(row) != len(names):
            raise ValueError(f"nvidia-smi gave {len(row)} columns, expected {len(names)}: {row}")
        gpu = {name: _smi_value(name, raw) for name, raw in zip(names, row, strict=True)}
        gpu["violation_ns"] = {}  # nvidia-smi has no cumulative throttle counters
        gpus.append(gpu)
    return gpus


def _smi_snapshot() -> tuple[list[dict[str, Any]] | None, str | None]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not on PATH"
    query = list(SMI_FIELDS.values())
    for attempt in range(2):
        try:
            proc = subprocess.run(
                [exe, "--query-gpu=" + ",".join(query), "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=SMI_TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"nvidia-smi: {type(exc).__name__}: {exc}"
        if proc.returncode == 0:
            try:
                return parse_smi_csv(proc.stdout), None
            except ValueError as exc:
                return None, f"nvidia-smi: {exc}"
        if attempt or "not a valid field" not in proc.stdout + proc.stderr:
            break  # only a refused field name is asked again, under its new name
        query = [SMI_RENAMED.get(q, q) for q in query]
    message = (proc.stderr or proc.stdout).strip().splitlines()
    return None, f"nvidia-smi exit {proc.returncode}: {message[0] if message else ''}"


def snapshot() -> dict[str, Any]:
    """``{"source", "reason", "utc", "gpus"}``: each GPU the fields of ``SMI_FIELDS``,
    ``violation_ns`` (NVML's throttle time per cause; empty from nvidia-smi) and
    ``unavailable`` (field -> why) where a field could not be read."""
    gpus, reason = _nvml_snapshot()
    source = "nvml" if gpus is not None else None
    if gpus is None:
        gpus, smi_reason = _smi_snapshot()
        source = "nvidia-smi" if gpus is not None else None
        reason = reason if gpus is not None else f"{reason}; {smi_reason}"
    return {"source": source, "reason": reason, "utc": utc_now(), "gpus": gpus}


def _label(gpu: Mapping[str, Any]) -> str:
    return f"GPU {gpu.get('index', '?')} ({gpu.get('name') or 'unknown model'})"


def throttled(gpu_state: Mapping[str, Any] | None, uuid: str | None = None) -> list[str]:
    """Lines saying a GPU (``uuid``: the run's only) throttled during the run: a
    ``SLOWDOWN_VIOLATIONS`` counter grew, or a ``SLOWDOWN_REASONS`` was active at either end."""
    if not gpu_state:
        return []
    before = {g.get("uuid") or g.get("index"): g for g in gpu_state.get("before") or []}
    lines = []
    for gpu in gpu_state.get("after") or []:
        key = gpu.get("uuid") or gpu.get("index")
        if uuid is not None and str(key).removeprefix("GPU-") != uuid.removeprefix("GPU-"):
            continue
        first = before.get(key) or {}
        grown = []
        for name in SLOWDOWN_VIOLATIONS:
            start = (first.get("violation_ns") or {}).get(name)
            end = (gpu.get("violation_ns") or {}).get(name)
            if start is not None and end is not None and end > start:
                grown.append(f"{name} {(end - start) / 1e9:.1f} s")
        if grown:
            lines.append(f"{_label(gpu)} held its clocks down during the run: {', '.join(grown)}")
        for when, snap in (("started", first), ("ended", gpu)):
            slow = [r for r in snap.get("throttle_reasons") or [] if r in SLOWDOWN_REASONS]
            if slow:
                lines.append(f"{_label(gpu)} was throttled when the run {when}: {', '.join(slow)}")
    return lines
