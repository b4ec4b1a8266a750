"""The determinism mode matrix.

A mode is process state (the flags are global, ``cudnn.benchmark`` caches its choice per
process), so it is applied once, in a fresh worker before any CUDA work, and never toggled inside
a process that measures. The 10 modes change nothing else but ``CUBLAS_WORKSPACE_CONFIG``
(``Mode.environment``). A mode may carry ``--set`` overrides of ``detbench.core.settings``:
``det-algos[fill_uninitialized_memory=off]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from detbench.core import settings as st
from detbench.core.errors import DetbenchError
from detbench.core.settings import CUBLAS_DEFAULT, CUBLAS_ENV, Overrides

__all__ = [
    "CUBLAS_DEFAULT",
    "CUBLAS_ENV",
    "DEFAULT_MODE",
    "DETERMINISTIC_MODE",
    "MODES",
    "Mode",
    "get_mode",
]


@dataclass(frozen=True)
class Mode:
    """One combination of the reproducibility flags PyTorch users are told to set."""

    name: str
    benchmark: bool
    cudnn_deterministic: bool
    deterministic_algorithms: bool
    cudnn_enabled: bool = True
    #: Overrides of ``detbench.core.settings``, canonical (table order); () for the 10 modes.
    settings: Overrides = ()

    def __post_init__(self) -> None:  # a job's JSON gives lists: make them the canonical tuple
        pairs = [(str(n), str(v)) for n, v in self.settings]
        object.__setattr__(self, "settings", st.normalise(pairs))

    @property
    def base_name(self) -> str:
        """The name of the mode without its overrides: one of the 10."""
        return self.name.partition("[")[0]

    @property
    def overrides(self) -> dict[str, str]:
        return dict(self.settings)

    def with_settings(self, overrides: Overrides) -> Mode:
        """This mode with ``overrides`` added (a later level of a setting replaces an earlier)."""
        merged = st.normalise({**self.overrides, **dict(overrides)})
        return replace(self, name=self.base_name + st.label(merged), settings=merged)

    def changes(self) -> list[str]:
        """What this mode changes from torch's default: the names of its flags and settings that
        differ (the cuBLAS workspace of deterministic algorithms goes with them, not counted)."""
        out = [f for f in st.MODE_FLAGS if getattr(self, f) != getattr(DEFAULT_MODE, f)]
        out += [n for n, level in self.settings if level != st.BY_NAME[n].torch_default]
        return out

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
        parts += [f"{n}={v}" for n, v in self.settings]
        return ", ".join(parts)

    def snippet(self) -> str:
        """The Python lines that put a user's script in this mode (run them before CUDA work)."""
        lines = []
        given = self.overrides
        if "cublas_workspace_config" in given:
            cublas = st.BY_NAME["cublas_workspace_config"]
            lines += ["import os", *cublas.snippet(given["cublas_workspace_config"])]
        elif self.deterministic_algorithms:
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
        lines += st.snippet_lines(
            tuple((n, v) for n, v in self.settings if n != "cublas_workspace_config")
        )
        return "\n".join(lines)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The worker's environment: ``base`` plus what this mode needs. Modes without
        deterministic algorithms unset ``CUBLAS_WORKSPACE_CONFIG``: a value from the user's shell
        would give the baseline the deterministic workspace too, hiding its cost."""
        env = dict(base)
        cublas = self.overrides.get("cublas_workspace_config")
        if cublas is not None:  # --set: exactly what was asked, whatever the shell has
            if cublas == "unset":
                env.pop(CUBLAS_ENV, None)
            else:
                env[CUBLAS_ENV] = cublas
        elif self.deterministic_algorithms:
            env.setdefault(CUBLAS_ENV, CUBLAS_DEFAULT)
        else:
            env.pop(CUBLAS_ENV, None)
        return env

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.settings:  # the 10 modes keep their fields exactly
            del out["settings"]
        else:
            out["settings"] = dict(self.settings)
        return {**out, "description": self.description, "snippet": self.snippet()}


_WORDS = ("no-cudnn", "bench", "cudnn-det", "det-algos")


def _name(benchmark: bool, cudnn_det: bool, det_algos: bool, cudnn_enabled: bool) -> str:
    flags = (not cudnn_enabled, benchmark, cudnn_det, det_algos)
    return "+".join(w for w, on in zip(_WORDS, flags, strict=True) if on) or "default"


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
#: Every determinism switch on: what ``detbench locate`` checks a culprit in.
DETERMINISTIC_MODE = "cudnn-det+det-algos"
_BY_NAME = {m.name: m for m in MODES}


def get_mode(name: str) -> Mode:
    """One of the 10 modes by name, or a mode with settings, ``det-algos[warn_only=on]``."""
    base, overrides = st.parse_label(name)
    try:
        mode = _BY_NAME[base]
    except KeyError:
        raise DetbenchError(f"unknown mode {base!r}; known modes: {', '.join(_BY_NAME)}") from None
    return mode.with_settings(overrides) if overrides else mode


def record_fields(mode: Mode) -> dict[str, Any]:
    """A record's mode fields: its name, base, flags and the levels of the settings it sets."""
    out: dict[str, Any] = {"mode": mode.name, "base_mode": mode.base_name}
    out.update({f: getattr(mode, f) for f in st.MODE_FLAGS})
    out.update({n: st.BY_NAME[n].column(v) for n, v in mode.settings})
    return out


def current_flags() -> dict[str, bool]:
    """The flags as torch reports them now (recorded beside each result, as a check)."""
    import torch

    return {
        "benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "cudnn_enabled": bool(torch.backends.cudnn.enabled),
    }
