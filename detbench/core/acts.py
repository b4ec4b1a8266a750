"""Where each switch acts: the devices on which one of the four mode flags or a setting can change
what runs. A setting's row in ``settings.SETTINGS`` carries its own ``devices``; the four flags of
the 10 modes are not rows of that table, so their devices are here, beside the one question every
reader asks (``acts_on``): the recommendation (a cuDNN flag is never recommended on a CPU), the
switches of the answer (no cost on a switch that acts on nothing), the attribution study (which
switches it skips) and the price of full determinism.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detbench.core.settings import BY_NAME

#: Where each of the four flags changes what runs (a setting's row says it in ``devices``): the
#: cuDNN flags only where cuDNN runs, deterministic algorithms on both.
FLAG_DEVICES: dict[str, tuple[str, ...]] = {
    "benchmark": ("cuda",),
    "cudnn_deterministic": ("cuda",),
    "deterministic_algorithms": ("cpu", "cuda"),
    "cudnn_enabled": ("cuda",),
}


def devices(switch: str) -> tuple[str, ...]:
    """Where ``switch`` (one of ``MODE_FLAGS`` or a setting's name) can change what runs: the
    flag's ``FLAG_DEVICES``, the setting's ``devices``; an unknown name, anywhere."""
    if switch in FLAG_DEVICES:
        return FLAG_DEVICES[switch]
    setting = BY_NAME.get(switch)
    return ("cpu", "cuda") if setting is None else setting.devices


def acts_on(switch: str, device: str | None) -> bool:
    """Whether ``switch`` can change what runs on ``device`` ("cpu", "cuda"; None: unknown, so
    it may; "cuda:1" is "cuda")."""
    return device is None or device.partition(":")[0] in devices(switch)


def computation(mode: Any, device: str | None) -> tuple[Any, ...]:
    """What of ``mode`` (a ``modes.Mode``) can change what runs on ``device``: its flags and
    settings that act there (``acts_on``). Two modes with the same key run the same computation
    on that device: on a CPU, ``bench+det-algos`` is ``det-algos``."""
    flags = tuple(getattr(mode, f) for f in FLAG_DEVICES if acts_on(f, device))
    return flags, tuple((n, v) for n, v in mode.settings if acts_on(n, device))


def timed_as(modes: Sequence[Any], device: str | None) -> dict[str, str]:
    """Each of ``modes``' name -> the name of the first of ``modes`` that runs the same
    computation on ``device`` (``computation``): itself for the first of its kind. The paired
    phase times that one only; the others' verdicts are still made, each in its own process."""
    first: dict[tuple[Any, ...], str] = {}
    return {m.name: first.setdefault(computation(m, device), m.name) for m in modes}
