"""The GPU's state (NVML or nvidia-smi, or the reason there is none) and the device facts a worker
reports."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from typing import Any

import pytest
import torch

from detbench.store import gpustate
from detbench.store.gpustate import parse_smi_csv, reasons_from_mask, snapshot, throttled
from detbench.worker.devenv import GPU_ENV_VARS, cublas_version, device_env

from .conftest import requires_cuda

# An example of ``nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,
# clocks.max.sm,power.limit,power.draw,temperature.gpu,clocks_throttle_reasons.active,
# mig.mode.current --format=csv,noheader,nounits`` output, written by hand in the format the
# nvidia-smi documentation gives (comma and space between fields, "[N/A]" where a value is
# missing, the reasons as a hexadecimal bitmask). Not captured from a real GPU.
SMI_EXAMPLE = (
    "0, NVIDIA H100 80GB HBM3, GPU-3c9a1f0e-2b4d-4c6a-8e1f-0123456789ab, 550.54.15, 1980, 2619, "
    "1980, 700.00, 312.45, 51, 0x0000000000000004, Disabled\n"
    "1, NVIDIA H100 80GB HBM3, GPU-7d2e5a10-9c8b-4f3e-a1d2-fedcba987654, 550.54.15, 345, 2619, "
    "1980, 700.00, 71.02, 33, 0x0000000000000001, [N/A]\n"
)


def test_nvidia_smi_csv_is_parsed() -> None:
    first, second = parse_smi_csv(SMI_EXAMPLE)
    assert first == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-3c9a1f0e-2b4d-4c6a-8e1f-0123456789ab",
        "driver": "550.54.15",
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "max_sm_clock_mhz": 1980,
        "power_limit_w": 700.0,
        "power_draw_w": 312.45,
        "temperature_c": 51,
        "throttle_reasons": ["sw_power_cap"],
        "mig_mode": "Disabled",
        "violation_ns": {},
    }
    assert second["sm_clock_mhz"] == 345 and second["throttle_reasons"] == ["gpu_idle"]
    assert second["mig_mode"] is None  # "[N/A]"


def test_a_line_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="gave 3 columns, expected 12"):
        parse_smi_csv("0, NVIDIA H100, GPU-1\n")


def test_reason_bits() -> None:
    assert reasons_from_mask(0) == []
    assert reasons_from_mask(0x44) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert reasons_from_mask(0x1 | 0x2000) == ["gpu_idle", "unknown_0x2000"]


def test_absence_is_recorded_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # A host without NVML's Python binding and without nvidia-smi (a CPU host, like this one).
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monkeypatch.setenv("PATH", "")
    snap = snapshot()
    assert snap["source"] is None and snap["gpus"] is None
    assert snap["reason"] == "nvidia-ml-py (pynvml) is not installed; nvidia-smi is not on PATH"


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None or importlib.util.find_spec("pynvml") is not None,
    reason="this host has nvidia-smi or NVML",
)
def test_this_host_records_no_gpu_state() -> None:
    snap = snapshot()
    assert snap["source"] is None and snap["gpus"] is None
    assert "nvidia-smi is not on PATH" in snap["reason"]


def _gpu(index: int = 0, **kw: Any) -> dict[str, Any]:
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{index}",
            "throttle_reasons": [], "violation_ns": {}, **kw}  # fmt: skip


def test_throttled_reads_the_counters_and_the_reasons() -> None:
    # Power-capped for 2.5 s; idle time (low utilisation) and idle or application-clock reasons
    # are not a throttle of the run.
    before = [
        _gpu(violation_ns={"power": 10**9, "low_utilization": 0}, throttle_reasons=["gpu_idle"])
    ]
    after = [
        _gpu(
            violation_ns={"power": 35 * 10**8, "low_utilization": 9 * 10**9},
            throttle_reasons=["sw_thermal_slowdown", "applications_clocks_setting"],
        )
    ]
    lines = throttled({"source": "nvml", "before": before, "after": after})
    assert lines == [
        "GPU 0 (NVIDIA H100 80GB HBM3) held its clocks down during the run: power 2.5 s",
        "GPU 0 (NVIDIA H100 80GB HBM3) was throttled when the run ended: sw_thermal_slowdown",
    ]


def test_no_throttle_and_unknown_say_nothing() -> None:
    idle = [_gpu(violation_ns={"power": 5}, throttle_reasons=["gpu_idle"])]
    assert throttled({"source": "nvml", "before": idle, "after": idle}) == []
    assert throttled({"source": None, "reason": "no NVML", "before": None, "after": None}) == []
    assert throttled(None) == []
    # nvidia-smi has no counters: only the reasons it saw count.
    smi = [_gpu(throttle_reasons=["hw_slowdown"])]
    assert throttled({"source": "nvidia-smi", "before": smi, "after": [_gpu()]}) == [
        "GPU 0 (NVIDIA H100 80GB HBM3) was throttled when the run started: hw_slowdown"
    ]


def test_throttled_can_look_at_the_runs_gpu_only() -> None:
    state = {"source": "nvml", "before": [_gpu(0), _gpu(1)],
             "after": [_gpu(0), _gpu(1, throttle_reasons=["sw_power_cap"])]}  # fmt: skip
    assert len(throttled(state)) == 1
    assert throttled(state, uuid="GPU-0") == []
    assert len(throttled(state, uuid="GPU-1")) == 1


def test_cpu_device_facts() -> None:
    env = device_env(torch.device("cpu"))
    assert env["cuda_build"] == torch.version.cuda and "cuda_runtime" not in env
    assert set(GPU_ENV_VARS) <= set(env)
    assert env["fp32"] == {"matmul_fp32": "ieee", "conv_fp32": "ieee"}
    assert "sm_count" not in env  # GPU facts only on a GPU


# --- on the GPU --------------------------------------------------------------------------------


@requires_cuda
def test_snapshot_on_a_gpu_host() -> None:
    snap = snapshot()
    assert snap["source"] in ("nvml", "nvidia-smi"), snap["reason"]
    gpu = snap["gpus"][0]
    assert gpu["name"] and gpu["uuid"].startswith("GPU-") and gpu["driver"]
    assert gpu["sm_clock_mhz"] > 0 and gpu["max_sm_clock_mhz"] >= gpu["sm_clock_mhz"]
    assert isinstance(gpu["throttle_reasons"], list)


@requires_cuda
def test_gpu_device_facts() -> None:
    device = torch.device("cuda")
    env = device_env(device)
    props = torch.cuda.get_device_properties(device)
    assert env["sm_count"] == props.multi_processor_count > 0
    assert env["cuda_build"] == torch.version.cuda
    version = cublas_version()
    assert env["cublas_version"] == version and version is not None
    assert int(version.split(".")[0]) >= 11
    snap = gpustate.snapshot()
    if snap["source"] is not None and env["mig_mode"] != "Enabled":
        # The worker's GPU is one of the host's, under the same UUID (a MIG instance has its
        # own), and its MIG mode is the one that GPU reports.
        (gpu,) = [g for g in snap["gpus"] if g["uuid"] == env["gpu_uuid"]]
        assert env["mig_mode"] == gpu["mig_mode"]


class NotSupported(Exception):
    """What nvidia-ml-py raises for a query the GPU does not support (NVMLError_NotSupported)."""


class NvmlStandIn:
    """A stand-in for nvidia-ml-py's functions (same names and units: milliwatts, MHz, a
    reasons bitmask, violation times in ns), to check the reading of each field and that an
    unsupported one is recorded rather than raised."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA A100-SXM4-40GB"  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "GPU-5e6f"

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return {1: 1410, 2: 1215}[clock]

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return 1410

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return 400_000

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        raise NotSupported("Not Supported")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 44

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return 0x4

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetViolationStatus(self, h: int, policy: int) -> Any:
        if policy == 11:
            raise NotSupported("Not Supported")
        return type("ViolationTime", (), {"referenceTime": 0, "violationTime": 1000 * policy})


def test_nvml_fields_units_and_absences() -> None:
    gpu = gpustate._nvml_gpu(NvmlStandIn(), 0, "535.104.05")
    assert gpu["name"] == "NVIDIA A100-SXM4-40GB" and gpu["driver"] == "535.104.05"
    assert (gpu["sm_clock_mhz"], gpu["mem_clock_mhz"], gpu["max_sm_clock_mhz"]) == (
        1410,
        1215,
        1410,
    )
    assert gpu["power_limit_w"] == 400.0 and gpu["temperature_c"] == 44
    assert gpu["throttle_reasons"] == ["sw_power_cap"] and gpu["mig_mode"] == "Enabled"
    assert gpu["power_draw_w"] is None
    assert gpu["unavailable"] == {
        "power_draw_w": "NotSupported: Not Supported",
        "violation_ns.total_base_clocks": "NotSupported: Not Supported",
    }
    assert gpu["violation_ns"]["thermal"] == 1000 and "total_base_clocks" not in gpu["violation_ns"]
