"""detbench: what determinism costs in PyTorch, measured per workload and per mode.

The public API:

* ``workload``: the decorator that registers a workload (the built-in suites use it too);
* ``Context``: what a workload factory receives (``device``, ``profile``, ``seed``);
* ``MODES``, ``Mode``, ``get_mode``: the determinism mode matrix;
* ``load_results``: a results directory as a pandas DataFrame.
"""

from detbench.errors import DetbenchError
from detbench.modes import MODES, Mode, get_mode
from detbench.results import SCHEMA_VERSION, load_results
from detbench.workload import Context, workload

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
