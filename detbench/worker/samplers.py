"""The clocks of a timing sample, a block of consecutive steps: CUDA events on a GPU, a host clock
elsewhere (or an injected one, in tests); garbage collection off inside every sample. Each is a
``warmup.Sampler``: the warm-up and the paired blocks after it use the same one.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

Clock = Callable[[], float]


@contextmanager
def gc_off() -> Iterator[None]:
    """Garbage collection off (as ``timeit`` does): one the harness triggers is not the step's."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class ClockSampler:
    """Samples timed by reading a host clock before and after each block."""

    def __init__(self, clock: Clock, name: str) -> None:
        self.clock = clock
        self.name = name

    def now(self) -> float:
        return self.clock()

    def one_step(self, step: Callable[[], Any]) -> float:
        t0 = self.clock()
        step()
        return self.clock() - t0

    def samples(self, step: Callable[[], Any], number: int, k: int) -> list[float]:
        out = []
        clock = self.clock
        for _ in range(k):
            with gc_off():
                t0 = clock()
                for _ in range(number):
                    step()
                t1 = clock()
            out.append((t1 - t0) / number)
        return out


class CudaEventSampler:
    """Samples timed by CUDA events around each block, one host sync per ``samples`` call."""

    name = "cuda-event"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.current_stream(device)

    def now(self) -> float:
        return time.perf_counter()

    def one_step(self, step: Callable[[], Any]) -> float:
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def samples(self, step: Callable[[], Any], number: int, k: int) -> list[float]:
        pairs = []
        with gc_off():
            for _ in range(k):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(self.stream)
                for _ in range(number):
                    step()
                end.record(self.stream)
                pairs.append((start, end))
            torch.cuda.synchronize(self.device)
        # elapsed_time is in milliseconds
        return [s.elapsed_time(e) / 1000.0 / number for s, e in pairs]


def host_clock(device: torch.device | None) -> Clock:
    """perf_counter, after a CUDA sync where no device was named and CUDA is in use."""
    if device is None and torch.cuda.is_available() and torch.cuda.is_initialized():

        def synchronising_clock() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return synchronising_clock
    return time.perf_counter
