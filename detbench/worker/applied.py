"""A mode's settings inside a worker: applied once before CUDA starts, read back around every
workload, and restored when a workload changed one (user code does: a script that sets
``cudnn.benchmark = True`` on import), so one workload cannot change the mode of another.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from detbench.core import settings as st
from detbench.core import torchstate as ts
from detbench.core.modes import Mode, current_flags


def apply(mode: Mode) -> dict[str, str]:
    """Put this process in ``mode``, before any CUDA work; {name: reason} of what cannot apply."""
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError(
            "a determinism mode must be applied before CUDA is initialised in this process"
        )
    set_flags(mode)
    problems: dict[str, str] = {}
    for name, level in mode.settings:
        s = st.BY_NAME[name]
        reason = s.unavailable()
        if reason is not None:
            problems[name] = reason
            continue
        if s.scope != "process" or s.apply is None:
            continue
        try:
            s.apply(level)
        except Exception as exc:  # torch refused the level: it cannot run here
            problems[name] = f"{name}={level}: {type(exc).__name__}: {exc}"
    reason = _inductor_tie(dict(mode.settings))
    if reason is not None:
        problems["inductor_deterministic"] = reason
    return problems


def _inductor_tie(given: Mapping[str, str]) -> str | None:
    """Why compiled steps cannot run at the ``inductor_deterministic`` level asked for, or None:
    where torch ties it to deterministic algorithms, its compilation overwrites another level."""
    level = given.get("inductor_deterministic")
    if level is None or given.get("execution", "eager") != "compile":
        return None
    import torch

    if (level == "on") == torch.are_deterministic_algorithms_enabled():
        return None
    return ts.inductor_tie_reason(level) if ts.inductor_tied() else None


#: A setting whose module (``Setting.module``) this process never imported.
NOT_LOADED = "not loaded"


def read_all(loaded_only: bool = False) -> dict[str, Any]:
    """The four mode flags and every process setting's level as they are now; "unavailable" (no
    such API) or "unreadable: ..." (torch refused) where not readable. ``loaded_only``
    (``detbench exec``): ``NOT_LOADED`` where the setting's module is not imported, rather than
    import it (``torch._inductor.config`` pulls in ``torch._dynamo``; a DDP rank that imported
    it at exit hung, docs/measured.md)."""
    out: dict[str, Any] = dict(current_flags())
    for s in st.SETTINGS:
        if s.scope != "process" or s.read is None:
            continue
        if loaded_only and s.module is not None and s.module not in sys.modules:
            out[s.name] = NOT_LOADED
            continue
        if s.unavailable() is not None:
            out[s.name] = "unavailable"
            continue
        try:
            out[s.name] = s.read()
        except Exception as exc:
            out[s.name] = f"unreadable: {type(exc).__name__}"
    return out


def differ(applied: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The names whose value differs between two ``read_all`` results, in table order."""
    return [k for k in applied if now.get(k) != applied[k]]


def _first_read(before: Any, after: Any, name: str) -> bool:
    """Whether a difference is only a module imported since (``NOT_LOADED`` then the default)."""
    s = st.BY_NAME.get(name)
    pair = {before, after}
    return s is not None and NOT_LOADED in pair and s.torch_default in pair


def changed(applied: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The names a workload changed: those of ``differ`` less a change torch made itself (where
    tied, dynamo's ``use_deterministic_algorithms`` after each frame sets inductor's setting to
    the flag: a workload that turned the flag is named for the flag)."""
    names = [k for k in differ(applied, now) if not _first_read(applied.get(k), now.get(k), k)]
    key = "inductor_deterministic"
    follows = now.get(key) == ("on" if now.get("deterministic_algorithms") else "off")
    if key in names and follows and ts.inductor_tied():
        names.remove(key)
    return names


def columns(levels: Mapping[str, Any], mode: Mode) -> dict[str, Any]:
    """A record's setting columns: process settings as ``levels`` has them, workload ones as set."""
    given = mode.overrides
    out: dict[str, Any] = {}
    for s in st.SETTINGS:
        if s.scope == "workload":
            out[s.name] = s.column(given.get(s.name, s.torch_default))
            continue
        level = levels.get(s.name)  # None, or "unavailable", "unreadable: ..." where not a level
        out[s.name] = s.column(level) if level in s.levels else level
    return out


def set_flags(mode: Mode) -> None:
    """The four flags of ``mode``; also how a worker restores them after a workload changed one."""
    import torch

    torch.backends.cudnn.enabled = mode.cudnn_enabled
    torch.backends.cudnn.benchmark = mode.benchmark
    torch.backends.cudnn.deterministic = mode.cudnn_deterministic
    torch.use_deterministic_algorithms(mode.deterministic_algorithms)


@dataclass
class WorkerSettings:
    """What the worker applied for its mode, to read back against and to restore."""

    mode: Mode
    #: Overrides this torch cannot apply: {name: reason}; the worker's records are unsupported.
    problems: dict[str, str] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, mode: Mode, loaded_only: bool = False) -> WorkerSettings:
        """Apply ``mode`` in this fresh process, before CUDA, and read the settings back."""
        problems = apply(mode)
        return cls(mode, problems, read_all(loaded_only))

    def restore(self) -> None:
        """Put the mode back: flags, then every process setting as it was applied."""
        set_flags(self.mode)
        for name, level in self.applied.items():
            s = st.BY_NAME.get(name)
            if s is None or s.scope != "process" or s.apply is None or level not in s.levels:
                continue
            with contextlib.suppress(Exception):
                s.apply(level)

    def unsupported(self, workload: Any) -> str | None:
        """Why ``workload`` cannot run under this mode's settings, or None."""
        if self.problems:
            name, reason = next(iter(self.problems.items()))
            return f"setting {name}={self.mode.overrides.get(name)} is unavailable: {reason}"
        autocast = self.mode.overrides.get("autocast", "off")
        if autocast != "off" and not getattr(workload, "autocast", False):
            return (
                f"setting autocast={autocast}: the workload does not declare that it can run "
                "under autocast (@detbench.workload(..., autocast=True))"
            )
        return None
