"""detbench: what determinism costs in PyTorch, measured per workload and per mode.

The public API:

* ``workload``: the decorator that registers a workload (the built-in suites use it too);
* ``Context``: what a workload factory receives (``device``, ``profile``, ``seed``);
* ``Unsupported``: what a factory raises when its workload cannot run here (a library that is
  not installed): the record is ``unsupported`` with the reason, not an error;
* ``MODES``, ``Mode``, ``get_mode``: the determinism mode matrix;
* ``RunConfig``, ``run_benchmark``: a run, from its plain arguments to its results directory;
* ``load_results``: a results directory as a pandas DataFrame.

Importing detbench changes no global state: torch's flags are set only in the worker processes
a run starts, and matplotlib's backend only when a plot is drawn.
"""

from detbench.core.errors import DetbenchError
from detbench.core.modes import MODES, Mode, get_mode
from detbench.core.workload import Context, Unsupported, workload
from detbench.run.api import run_benchmark
from detbench.run.config import RunConfig
from detbench.store.results import SCHEMA_VERSION, load_results

__version__ = "0.1.0"

__all__ = [
    "MODES",
    "SCHEMA_VERSION",
    "Context",
    "DetbenchError",
    "Mode",
    "RunConfig",
    "Unsupported",
    "get_mode",
    "load_results",
    "run_benchmark",
    "workload",
]
