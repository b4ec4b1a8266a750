"""The price of full determinism, per suite: what every determinism switch on costs against the
baseline, stated beside the answer whatever mode it recommends, with the same figures as the
trade-off plot (``tradeoff.points``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from detbench.analysis import stats
from detbench.core import acts
from detbench.core.modes import DETERMINISTIC_MODE

#: On a device where the cuDNN flags act on nothing, the mode that is the same computation.
WITHOUT_CUDNN_FLAGS = "det-algos"


@dataclass(frozen=True)
class Price:
    """A suite's price of full determinism: ``mode``'s throughput relative to the baseline."""

    suite: str
    mode: str
    point: float | None
    low: float | None
    high: float | None
    reproducible: float  # the share of the suite's workloads it made reproducible
    ran: int  # the suite's workloads it ran (the others: unsupported or failed)
    workloads: int  # the suite's workloads that ran in some mode

    @property
    def too_wide(self) -> bool:
        """The interval is too wide to say anything (``stats.says_nothing``)."""
        return stats.says_nothing(self.low, self.high)


def full_mode(
    modes: Iterable[Any],
    device: str | None,
    study: Mapping[str, Any] | None = None,
    timed: Iterable[Any] | None = None,
) -> tuple[str, str | None] | None:
    """(the mode of full determinism the run timed, the mode it stands in for or None), or None:
    the study's deterministic end, else ``DETERMINISTIC_MODE``, else where cudnn.deterministic
    acts on nothing ``WITHOUT_CUDNN_FLAGS``, which also stands in where only it was ``timed``
    (the modes with a cost; None: all)."""
    ran = {str(m) for m in modes}
    costed = ran if timed is None else {str(m) for m in timed}
    end = (study or {}).get("deterministic_end")
    if end and str(end) in ran:
        return str(end), None
    stand_in = (
        WITHOUT_CUDNN_FLAGS in ran
        and device is not None
        and not acts.acts_on("cudnn_deterministic", device)
    )
    if DETERMINISTIC_MODE in ran and (DETERMINISTIC_MODE in costed or not stand_in):
        return DETERMINISTIC_MODE, None
    if stand_in:
        return WITHOUT_CUDNN_FLAGS, DETERMINISTIC_MODE
    return None


def costed_modes(points: pd.DataFrame) -> list[str]:
    """The modes of ``tradeoff.points`` with a throughput: those the run timed."""
    if points.empty or "relative_throughput" not in points:
        return []
    return sorted(set(points.loc[points["relative_throughput"].notna(), "mode"].astype(str)))


def _num(x: Any) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def prices(points: pd.DataFrame, mode: str) -> list[Price]:
    """``mode``'s price in each suite of ``tradeoff.points``."""
    if points.empty:
        return []
    out = []
    for r in points[points["mode"] == mode].to_dict("records"):
        out.append(
            Price(
                suite=str(r["suite"]),
                mode=mode,
                point=_num(r["relative_throughput"]),
                low=_num(r.get("ci_low")),
                high=_num(r.get("ci_high")),
                reproducible=float(r["reproducible"]),
                ran=int(r["ran"]),
                workloads=int(r["workloads"]),
            )
        )
    return out
