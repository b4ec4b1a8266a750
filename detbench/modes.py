"""The determinism mode matrix.

A mode is process state: cuDNN flags and ``torch.use_deterministic_algorithms`` are global, and
``cudnn.benchmark`` caches its algorithm choice per process. So a mode is applied once, in a fresh
worker process, before any CUDA work, and never toggled inside a process that measures.

Nothing else is changed: no ``CUDA_LAUNCH_BLOCKING``, TF32 left at torch's defaults. The only
environment variable a mode sets is ``CUBLAS_WORKSPACE_CONFIG``: for modes with deterministic
algorithms (older CUDA/torch combinations need it for deterministic cuBLAS) the user's value or
``:4096:8``, for the others none (see ``Mode.environment``); the value used is recorded with every
result.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from detbench.errors import DetbenchError

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DEFAULT = ":4096:8"


@dataclass(frozen=True)
class Mode:
    """One combination of the reproducibility flags PyTorch users are told to set."""

    name: str
    benchmark: bool
    cudnn_deterministic: bool
    deterministic_algorithms: bool
    cudnn_enabled: bool = True

    @property
    def description(self) -> str:
        if not self.cudnn_enabled:
            parts = ["cuDNN disabled"]
        else:
            parts = [
                "cudnn.benchmark " + ("on" if self.benchmark else "off"),
                "cudnn.deterministic " + ("on" if self.cudnn_deterministic else "off"),
            ]
        parts.append(
            "deterministic algorithms " + ("on" if self.deterministic_algorithms else "off")
        )
        return ", ".join(parts)

    def snippet(self) -> str:
        """The Python lines that put a user's script in this mode (run them before CUDA work)."""
        lines = []
        if self.deterministic_algorithms:
            lines += [
                "import os",
                "# before any CUDA work: cuBLAS reads it when its handle is created",
                f'os.environ.setdefault("{CUBLAS_ENV}", "{CUBLAS_DEFAULT}")',
            ]
        lines.append("import torch")
        if self.cudnn_enabled:
            lines += [
                f"torch.backends.cudnn.benchmark = {self.benchmark}",
                f"torch.backends.cudnn.deterministic = {self.cudnn_deterministic}",
            ]
        else:
            lines.append("torch.backends.cudnn.enabled = False")
        lines.append(f"torch.use_deterministic_algorithms({self.deterministic_algorithms})")
        return "\n".join(lines)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The worker's environment: ``base`` plus what this mode needs, nothing else.

        ``CUBLAS_WORKSPACE_CONFIG`` belongs to the mode: modes with deterministic algorithms get
        the user's value, or ``:4096:8`` when the user set none; modes without them run with it
        unset, as torch's default does. A value inherited from the user's shell would otherwise
        give the baseline the restricted deterministic workspace too, and the cost of
        deterministic algorithms would read as about 1.0 (the runner says so when it drops one).
        """
        env = dict(base)
        if self.deterministic_algorithms:
            env.setdefault(CUBLAS_ENV, CUBLAS_DEFAULT)
        else:
            env.pop(CUBLAS_ENV, None)
        return env

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "description": self.description, "snippet": self.snippet()}


def _name(benchmark: bool, cudnn_det: bool, det_algos: bool, cudnn_enabled: bool) -> str:
    parts = []
    if not cudnn_enabled:
        parts.append("no-cudnn")
    if benchmark:
        parts.append("bench")
    if cudnn_det:
        parts.append("cudnn-det")
    if det_algos:
        parts.append("det-algos")
    return "+".join(parts) or "default"


def _matrix() -> tuple[Mode, ...]:
    modes = [
        Mode(_name(b, d, a, True), b, d, a, True)
        for a, b, d in itertools.product((False, True), repeat=3)
    ]
    # With cuDNN disabled its benchmark/deterministic flags are inert: two modes, not eight.
    modes += [Mode(_name(False, False, a, False), False, False, a, False) for a in (False, True)]
    return tuple(modes)


#: The 10 modes, in a stable order. The first is torch's default and the baseline of every ratio.
MODES: tuple[Mode, ...] = _matrix()
DEFAULT_MODE: Mode = MODES[0]
_BY_NAME = {m.name: m for m in MODES}


def get_mode(name: str) -> Mode:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DetbenchError(f"unknown mode {name!r}; known modes: {', '.join(_BY_NAME)}") from None


def apply(mode: Mode) -> None:
    """Put this process in ``mode``. Must run before any CUDA work, once per process."""
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError(
            "a determinism mode must be applied before CUDA is initialised in this process"
        )
    torch.backends.cudnn.enabled = mode.cudnn_enabled
    torch.backends.cudnn.benchmark = mode.benchmark
    torch.backends.cudnn.deterministic = mode.cudnn_deterministic
    torch.use_deterministic_algorithms(mode.deterministic_algorithms)


def current_flags() -> dict[str, bool]:
    """The flags as torch reports them now (recorded beside each result, as a check)."""
    import torch

    return {
        "benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "cudnn_enabled": bool(torch.backends.cudnn.enabled),
    }
