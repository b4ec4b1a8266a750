"""Where each switch acts: the devices on which one of the four mode flags or a setting can change
what runs (``acts_on``). A setting's row carries its own ``devices``; the four flags are not rows
of that table, so theirs are here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detbench.core.settings import BY_NAME

#: Where each of the four flags changes what runs: the cuDNN flags only where cuDNN runs.
FLAG_DEVICES: dict[str, tuple[str, ...]] = {
    "benchmark": ("cuda",),
    "cudnn_deterministic": ("cuda",),
    "deterministic_algorithms": ("cpu", "cuda"),
    "cudnn_enabled": ("cuda",),
}


def devices(switch: str) -> tuple[str, ...]:
    """Where ``switch`` (a mode flag or a setting) can change what runs; unknown: anywhere."""
    if switch in FLAG_DEVICES:
        return FLAG_DEVICES[switch]
    setting = BY_NAME.get(switch)
    return ("cpu", "cuda") if setting is None else setting.devices


def acts_on(switch: str, device: str | None) -> bool:
    """Whether ``switch`` can change what runs on ``device`` (None: unknown; "cuda:1" is cuda)."""
    return device is None or device.partition(":")[0] in devices(switch)


def computation(mode: Any, device: str | None) -> tuple[Any, ...]:
    """The flags and settings of ``mode`` that act on ``device``: two modes with the same key run
    the same computation there (on a CPU, ``bench+det-algos`` is ``det-algos``)."""
    flags = tuple(getattr(mode, f) for f in FLAG_DEVICES if acts_on(f, device))
    return flags, tuple((n, v) for n, v in mode.settings if acts_on(n, device))


def timed_as(modes: Sequence[Any], device: str | None) -> dict[str, str]:
    """Each mode's name -> the first of ``modes`` with the same ``computation`` on ``device``:
    the one the paired phase times (the others' verdicts are still made)."""
    first: dict[tuple[Any, ...], str] = {}
    return {m.name: first.setdefault(computation(m, device), m.name) for m in modes}
