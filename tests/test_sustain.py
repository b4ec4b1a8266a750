"""Sustained clocks (``worker/sustain.py``) on the NVML readings and step times the H100 recorded
(results/20261126-h100-experiments/sustained.json: an 8192^3 bf16 GEMM and a 1 GiB fp32 scale,
each held 12 s, NVML read beside each 0.1 s block): the decisions as pure functions, then whole
timing passes on a virtual clock that replays those recordings. What a real GPU does with the
rule is not yet measured: the check written for it never ran on a GPU (docs/measured.md,
"Finished studies whose tools were retired")."""

from __future__ import annotations

import json
import statistics
from bisect import bisect_right
from pathlib import Path
from typing import Any

import pytest

from detbench.store.gpustate import reasons_from_mask
from detbench.worker.sustain import (
    AT_CAP_SHARE,
    CAPPED_SPAN_SECONDS,
    HOLD_CEILING_SECONDS,
    HOLD_MIN_SECONDS,
    PROBE_SECONDS,
    NvmlReader,
    Reading,
    acting,
    hold_settled,
)
from detbench.worker.timing import time_step

RECORDED = Path(__file__).resolve().parent.parent / "results/20261126-h100-experiments"
LIMIT_W = 700.0  # the H100's power limit (host.txt)


def kernel(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / "sustained.json").read_text())["kernels"][name]


def readings(name: str) -> list[Reading]:
    """The idle reading at t=0, then one reading a block, t from the first block."""
    k = kernel(name)
    t0 = k["blocks"][0]["t"]

    def reading(b: dict[str, Any], t: float) -> Reading:
        reasons = tuple(reasons_from_mask(b["throttle"]))
        return Reading(t, b["sm_mhz"], b["power_w"], None, LIMIT_W, reasons)

    return [reading(k["idle"], 0.0)] + [reading(b, b["t"] - t0) for b in k["blocks"][1:]]


def steady_ms(name: str) -> float:
    """The median block of the last 2 s of the 12 s hold: what a long run sees."""
    blocks = kernel(name)["blocks"]
    t0 = blocks[0]["t"]
    return statistics.median(b["ms"] for b in blocks if b["t"] - t0 >= 10.0)


def test_the_gemm_is_seen_capped_by_the_probe_and_the_scale_never() -> None:
    gemm, scale = readings("gemm_bf16_8192"), readings("scale_fp32_1gib")
    # The GEMM's first block (0.09 s) ran at 1980 MHz with no reason: too soon to say; by the
    # probe's 0.25 s the software power cap held it down.
    early = [r for r in gemm if 0 < r.t < 0.1]
    assert early and not acting(gemm[0], early[-1])
    at_probe = next(r for r in gemm if r.t >= PROBE_SECONDS)
    assert at_probe.reasons == ("sw_power_cap",) and acting(gemm[0], at_probe)
    # The memory-bound scale: 514 W, 1980 MHz, no reason in 12 s: nothing acts at any reading.
    assert not any(acting(scale[0], r) for r in scale[1:])


def test_a_controller_that_acts_is_seen_by_its_counters_or_instant_power() -> None:
    first = Reading(t=0.0, limit_w=LIMIT_W, limited_s=10.0)
    # Held down for 0.05 s of 0.3 s (17%): acted; for 0.01 s (3%): not.
    assert acting(first, Reading(t=0.3, limit_w=LIMIT_W, limited_s=10.05))
    assert not acting(first, Reading(t=0.3, limit_w=LIMIT_W, limited_s=10.01))
    # No reason and no counter, but the instant draw at the cap: acting; at 514 W: not.
    assert acting(first, Reading(t=0.3, instant_w=690.0, limit_w=LIMIT_W))
    assert not acting(first, Reading(t=0.3, instant_w=514.0, limit_w=LIMIT_W))


def test_the_hold_settles_when_the_power_average_is_at_the_cap_and_not_before() -> None:
    gemm = readings("gemm_bf16_8192")
    first = next(r for r in gemm if hold_settled(r))
    # The 1 s average reached 693 W at 1.01 s; the least hold (1.5 s) decides here.
    assert HOLD_MIN_SECONDS <= first.t < HOLD_MIN_SECONDS + 0.1
    assert first.power_w is not None and first.power_w >= AT_CAP_SHARE * LIMIT_W
    assert not any(hold_settled(r) for r in gemm if r.t < HOLD_MIN_SECONDS)
    # A load that never draws the cap's power (capped briefly) settles only at the ceiling.
    low = [Reading(t=r.t, power_w=500.0, limit_w=LIMIT_W) for r in gemm]
    assert not any(hold_settled(r) for r in low)
    # Where NVML reads no power, the least hold alone decides.
    assert hold_settled(Reading(t=HOLD_MIN_SECONDS)) and not hold_settled(Reading(t=1.0))
    assert HOLD_CEILING_SECONDS > HOLD_MIN_SECONDS + CAPPED_SPAN_SECONDS - 1.0


def test_the_held_span_is_within_2_percent_of_the_long_run_and_the_burst_is_not() -> None:
    blocks = kernel("gemm_bf16_8192")["blocks"]
    t0 = blocks[0]["t"]
    steady = steady_ms("gemm_bf16_8192")  # 1.616 ms
    start = next(r.t for r in readings("gemm_bf16_8192") if hold_settled(r))
    span = [b["ms"] for b in blocks if start <= b["t"] - t0 < start + CAPPED_SPAN_SECONDS]
    assert abs(statistics.median(span) / steady - 1) < 0.02
    burst = [b["ms"] for b in blocks[1:] if b["t"] - t0 < PROBE_SECONDS]
    assert statistics.median(burst) / steady - 1 < -0.02


class Replayed:
    """A step and a clock on one virtual time that replay a recorded kernel: a step at time t
    costs the step time of the block recorded at t."""

    def __init__(self, name: str) -> None:
        blocks = kernel(name)["blocks"][1:]
        t0 = kernel(name)["blocks"][0]["t"]
        self.at = [b["t"] - t0 for b in blocks]
        self.ms = [b["ms"] for b in blocks]
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def step(self) -> None:
        i = max(0, bisect_right(self.at, self.now) - 1)
        self.now += self.ms[i] / 1000.0


class ReplayedProbe(NvmlReader):
    """NVML as the H100 read it, at the replayed step's virtual time."""

    def __init__(self, name: str, device: Replayed) -> None:
        super().__init__(None)
        self.readings, self.device = readings(name), device
        self.reads = 0

    def start(self) -> Reading | None:
        self.t0 = self.device.now
        return self.readings[0]

    def read(self) -> Reading | None:
        self.reads += 1
        t = self.device.now - self.t0
        i = max(0, bisect_right([r.t for r in self.readings], t) - 1)
        r = self.readings[i]
        return Reading(t, r.sm_mhz, r.power_w, r.instant_w, r.limit_w, r.reasons, r.limited_s)


def replayed_pass(name: str, clocks: str) -> Any:
    dev = Replayed(name)
    probe = ReplayedProbe(name, dev)
    return time_step(
        dev.step,
        warmup_steps=5,
        budget=0.3,
        target_rel=0.01,
        clock=dev.clock,
        ceiling_device="cuda",
        clocks=clocks,
        probe=probe,
    )


def test_a_sustained_pass_of_the_recorded_gemm_holds_and_lands_on_the_long_run() -> None:
    t = replayed_pass("gemm_bf16_8192", "sustained")
    hold = t.hold
    assert hold is not None and hold["status"] == "ok"
    assert hold["acted"] and hold["settled"] and hold["dropped_samples"] > 0
    assert HOLD_MIN_SECONDS <= hold["load_seconds"] < HOLD_MIN_SECONDS + 0.1
    assert hold["end"]["throttle_reasons"] == ["sw_power_cap"]
    assert hold["end"]["power_limit_w"] == LIMIT_W
    assert t.clock_mode == "sustained"
    steady = steady_ms("gemm_bf16_8192") / 1000.0
    assert abs(t.median / steady - 1) < 0.02
    # The counted samples span the held span at least (about 1.6 ms each: 600 or more).
    assert sum(t.samples) * t.number_per_block >= CAPPED_SPAN_SECONDS
    # The same recording timed as a burst reads faster than the long run by more than 2 %.
    burst = replayed_pass("gemm_bf16_8192", "burst")
    assert burst.hold == {"status": "burst", "reason": "--clocks burst: the load was not held"}
    assert burst.median / steady - 1 < -0.02


def test_a_sustained_pass_of_the_recorded_scale_costs_only_the_probe() -> None:
    t = replayed_pass("scale_fp32_1gib", "sustained")
    hold = t.hold
    assert hold is not None and hold["status"] == "ok"
    assert not hold["acted"] and hold["settled"] and hold["dropped_samples"] == 0
    # The probe runs the load to 0.25 s from the warm-up's start, and no further.
    assert PROBE_SECONDS <= hold["load_seconds"] < PROBE_SECONDS + 0.06
    assert t.median == pytest.approx(steady_ms("scale_fp32_1gib") / 1000.0, rel=1e-3)
    assert t.reached_target


def test_the_report_puts_each_rates_clock_state_beside_it() -> None:
    import pandas as pd

    from detbench.analysis.clocks import CPU, clock_states, record_state

    gemm = replayed_pass("gemm_bf16_8192", "sustained").to_json()
    scale = replayed_pass("scale_fp32_1gib", "sustained").to_json()
    burst = replayed_pass("gemm_bf16_8192", "burst").to_json()
    assert record_state(gemm, "cuda") == "sustained, power-capped"
    assert record_state(scale, "cuda") == "sustained, below the limits"
    assert record_state(burst, "cuda") == "burst"
    assert record_state({"median": 1.0}, "cuda") == "burst"  # a record from before --clocks
    assert record_state(scale, "cpu") == CPU
    # With NVML's SM clock during the samples: its range over the replicates.
    clocked = [dict(gemm, gpu_clocks={"sm_clock_mhz": {"median": mhz}}) for mhz in (1350, 1365)]
    rows = [
        ("w", "sustained", clocked[0]),
        ("w", "sustained", clocked[1]),
        ("v", "mixed", gemm),
        ("v", "mixed", burst),
        ("v", "mixed", gemm),
    ]
    df = pd.DataFrame(
        [
            {"suite": "s", "workload": w, "mode": m, "status": "ok", "device": "cuda", "timing": t}
            for w, m, t in rows
        ]
    )
    assert clock_states(df) == {
        ("s", "w", "sustained"): "sustained, power-capped, 1350-1365 MHz",
        ("s", "v", "mixed"): "sustained, power-capped (2/3); burst (1/3)",
    }


def test_the_clocks_option_reaches_the_run_options(tmp_path: Path) -> None:
    from detbench.cli.options import run_config
    from detbench.cli.parser import build_parser
    from detbench.run.config import RunConfig, RunError, validate

    def config(*extra: str) -> RunConfig:
        out = str(tmp_path / f"run{len(extra)}")
        args = build_parser().parse_args(["run", "--device", "cpu", "--out", out, *extra])
        return run_config(args, cuda=False)

    burst, default = config("--clocks", "burst"), config()
    sustained = config("--clocks", "sustained")
    # Issue 34: burst is the default; the hold only where a user asks for it.
    assert (burst.clock_mode, default.clock_mode, sustained.clock_mode) == (
        "burst",
        "burst",
        "sustained",
    )
    assert sustained.options_json([], [], None, 0.03)["clocks"] == "sustained"
    with pytest.raises(RunError, match="unknown --clocks 'fast'; use sustained or burst"):
        validate(RunConfig(out=tmp_path / "x", clocks="fast"), cuda_available=False)
