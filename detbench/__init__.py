"""detbench: what determinism costs in PyTorch, measured per workload and per mode.

The public API:

* ``workload``: the decorator that registers a workload (the built-in suites use it too);
* ``Context``: what a workload factory receives (``device``, ``profile``, ``seed``);
* ``MODES``, ``Mode``, ``get_mode``: the determinism mode matrix;
* ``load_results``: a results directory as a pandas DataFrame.
"""

from detbench.core.errors import DetbenchError
from detbench.core.modes import MODES, Mode, get_mode
from detbench.core.workload import Context, workload
from detbench.store.results import SCHEMA_VERSION, load_results

__version__ = "0.1.0"

__all__ = [
    "MODES",
    "SCHEMA_VERSION",
    "Context",
    "DetbenchError",
    "Mode",
    "get_mode",
    "load_results",
    "workload",
]
