"""Pairing two sides of a paired comparison: a mode's blocks with the baseline's of the same round.

In the paired design every worker of a replicate times one block per round, taking turns, so the
pair of one round shares the machine's clock, power and host state. Either source of paired
timings, the lines of ``paired.jsonl`` or the verdict rows joined to them, becomes ``Paired``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis.labels import counted
from detbench.store.schema import Status

#: One side of a comparison: replicate -> (rounds, seconds per step, block start in epoch s).
Side = dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Paired:
    """The log ratios ``log(t_base / t_other)`` of one comparison, one array per replicate in
    round order; ``start``: seconds from the process's first paired block to each pair's."""

    replicates: tuple[int, ...]
    log_ratio: tuple[np.ndarray, ...] = field(repr=False)
    start: tuple[np.ndarray, ...] = field(repr=False)

    @property
    def rounds(self) -> int:
        """Paired rounds over all processes."""
        return int(sum(len(x) for x in self.log_ratio))

    @property
    def processes(self) -> int:
        return len(self.log_ratio)


def side_from_lines(rows: pd.DataFrame) -> Side:
    """The side of the ``paired.jsonl`` rows of one (workload, mode, copy) (later lines win)."""
    out: Side = {}
    for r in rows.to_dict("records"):
        if r["status"] == "ok" and r["samples"]:
            out[int(r["replicate"])] = (
                np.asarray(r["rounds"], dtype=int),
                np.asarray(r["samples"], dtype=float),
                np.asarray(r["block_start"], dtype=float),
            )
    return out


def is_paired(timing: Any) -> bool:
    """A record's timing is a paired worker's (joined by ``store.paired.joined``)."""
    return isinstance(timing, Mapping) and timing.get("paired_rounds") is not None


def side_from_records(g: pd.DataFrame) -> Side:
    """The side of the verdict rows of one (workload, mode): its ok paired records that count."""
    out: Side = {}
    g = counted(g)
    ok = g[g["status"] == Status.OK]
    # Two columns, not ``to_dict("records")``: a report reads these sides thousands of times.
    for replicate, t in zip(ok["replicate"], ok["timing"], strict=True):
        if isinstance(t, Mapping) and is_paired(t) and t.get("samples"):
            out[int(replicate)] = (
                np.asarray(t["paired_rounds"], dtype=int),
                np.asarray(t["samples"], dtype=float),
                np.asarray(t["paired_block_start"], dtype=float),
            )
    return out


def pair(base: Side, other: Side) -> Paired:
    """Join ``other`` to ``base`` on (replicate, round); what one side lacks adds nothing."""
    reps, logs, starts = [], [], []
    for rep in sorted(set(base) & set(other)):
        (rb, tb, sb), (ro, to, so) = base[rep], other[rep]
        common, ib, io = np.intersect1d(rb, ro, return_indices=True)
        if not len(common):
            continue
        when = (sb[ib] + so[io]) / 2.0
        reps.append(rep)
        logs.append(np.log(tb[ib]) - np.log(to[io]))
        starts.append(when - when.min())
    return Paired(tuple(reps), tuple(logs), tuple(starts))
