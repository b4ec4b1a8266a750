"""detbench: what determinism costs in PyTorch, measured per workload and per mode.

The public API, for a user's workloads and the built-in suites alike (``docs/suites.md``):

* ``workload``, ``Context``: the decorator that registers a workload, and what its factory gets;
* ``Unsupported``, ``SettingUnsupported``: what a factory raises when its workload, or a setting
  its step pins, cannot run here (the record is ``unsupported``, not an error);
* ``suite_helper``: a suite's helper file (``suites/_NAME.py``), imported by its path once;
* ``SDPA_BACKENDS``: the ``sdpa_backend`` levels, each with the ``SDPBackend`` it allows alone;
* ``catalog``: what torch documents about ``use_deterministic_algorithms`` (``find_all``);
* ``fingerprint``: ``detbench.fingerprint(name, tensor)`` hands a tensor to ``detbench exec``;
* ``fresh_generators``: every generator as a fresh process starts it;
* ``MODES``, ``Mode``, ``get_mode``: the determinism mode matrix;
* ``RunConfig``, ``run_benchmark``, ``load_results``: a run, and its results as a DataFrame.

Each name is imported at its first use (PEP 562), so ``import detbench`` and a worker's modules
load no run orchestration, analysis or report. Importing detbench changes no global state.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for mypy and editors; at run time __getattr__ imports them
    from detbench.core import catalog
    from detbench.core.errors import DetbenchError
    from detbench.core.modes import MODES, Mode, get_mode
    from detbench.core.seeding import fresh_generators
    from detbench.core.torchstate import SDPA_BACKENDS
    from detbench.core.workload import Context, Unsupported, suite_helper, workload
    from detbench.locate.scripted import fingerprint
    from detbench.run.api import run_benchmark
    from detbench.run.config import RunConfig
    from detbench.store.results import SCHEMA_VERSION, load_results
    from detbench.worker.measure import SettingUnsupported

__version__ = "0.1.0"

#: Each public name -> the module that defines it.
_PUBLIC = {
    "DetbenchError": "detbench.core.errors",
    "MODES": "detbench.core.modes",
    "Mode": "detbench.core.modes",
    "get_mode": "detbench.core.modes",
    "Context": "detbench.core.workload",
    "Unsupported": "detbench.core.workload",
    "suite_helper": "detbench.core.workload",
    "workload": "detbench.core.workload",
    "SDPA_BACKENDS": "detbench.core.torchstate",
    "fresh_generators": "detbench.core.seeding",
    "fingerprint": "detbench.locate.scripted",
    "SettingUnsupported": "detbench.worker.measure",
    "SCHEMA_VERSION": "detbench.store.results",
    "load_results": "detbench.store.results",
    "RunConfig": "detbench.run.config",
    "run_benchmark": "detbench.run.api",
}
#: The public names that are modules.
_MODULES = {"catalog": "detbench.core.catalog"}

__all__ = [  # the keys of _PUBLIC and _MODULES (tests/test_imports.py holds them equal)
    "MODES",
    "SCHEMA_VERSION",
    "SDPA_BACKENDS",
    "Context",
    "DetbenchError",
    "Mode",
    "RunConfig",
    "SettingUnsupported",
    "Unsupported",
    "catalog",
    "fingerprint",
    "fresh_generators",
    "get_mode",
    "load_results",
    "run_benchmark",
    "suite_helper",
    "workload",
]


def __getattr__(name: str) -> Any:
    """A public name, imported at its first use and kept (PEP 562)."""
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    else:
        raise AttributeError(f"module 'detbench' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC) | set(_MODULES))
