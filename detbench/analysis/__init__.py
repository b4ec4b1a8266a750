"""The analysis layer, and the library a user reads a run with (``verdicts(df)``, ``costs(df)``,
``recommendations(df)``, ...). Its modules import their neighbours, never this package, so
importing it cannot make a cycle.
"""

from detbench.analysis.cost_intervals import NOISY_IQR, costs, replicate_samples
from detbench.analysis.labels import (
    baseline_mode,
    changed_mask,
    changed_settings,
    counted,
    mode_key,
    mode_of,
    ordered_modes,
)
from detbench.analysis.matrix import (
    MARKS,
    RAN,
    cost_points,
    divergence,
    peak_memory,
    ran_somewhere,
    recipes,
    relative_throughput,
    summary_table,
    verdicts,
)
from detbench.analysis.recommend import recommendations
from detbench.analysis.stats import bootstrap_throughput, median_throughput
from detbench.analysis.suite_answer import recommendation_text
from detbench.analysis.tradeoff import mark_frontier, plane

__all__ = [
    "MARKS",
    "NOISY_IQR",
    "RAN",
    "baseline_mode",
    "bootstrap_throughput",
    "changed_mask",
    "changed_settings",
    "cost_points",
    "costs",
    "counted",
    "divergence",
    "mark_frontier",
    "median_throughput",
    "mode_key",
    "mode_of",
    "ordered_modes",
    "peak_memory",
    "plane",
    "ran_somewhere",
    "recipes",
    "recommendation_text",
    "recommendations",
    "relative_throughput",
    "replicate_samples",
    "summary_table",
    "verdicts",
]
