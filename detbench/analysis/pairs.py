"""Pairing two sides of a paired comparison: a mode's blocks with the baseline's of the same round.

In the paired design (``store.paired``) every worker of a replicate times one block per round,
the workers taking turns a few hundred milliseconds apart; the pair of one round shares the
machine's clock, power and host state. A cost is then a ratio per round, not a ratio of two
medians taken minutes apart. This module turns either source of paired timings into the one
shape the estimators read (``Paired``): the lines of ``paired.jsonl`` (``store.paired
.load_paired``: copy 1 included, for the A/A check) or the verdict rows ``load_results`` joined
them onto (copy 0 only, with ``timing["paired_rounds"]``).
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
    """The log ratios of one comparison, one array per process (replicate) in round order:
    ``log(t_base / t_other)``, the log of the other side's throughput relative to the base's
    (> 0: faster); ``start``: when each pair's blocks began, in seconds since the process's
    first paired block (the time level of the variance)."""

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
    """The side of the ``paired.jsonl`` rows of one (workload, mode, copy): its ok lines by
    replicate (a later line of a replicate, measured again on a resume, replaces an earlier)."""
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
    """The side of the verdict rows of one (workload, mode) whose timing is paired: the records
    that count (``labels.counted``), status ok, by replicate."""
    out: Side = {}
    g = counted(g)
    ok = g[g["status"] == Status.OK]
    # Two columns, not ``to_dict("records")`` of every column: a report reads these sides
    # thousands of times.
    for replicate, t in zip(ok["replicate"], ok["timing"], strict=True):
        if isinstance(t, Mapping) and is_paired(t) and t.get("samples"):
            out[int(replicate)] = (
                np.asarray(t["paired_rounds"], dtype=int),
                np.asarray(t["samples"], dtype=float),
                np.asarray(t["paired_block_start"], dtype=float),
            )
    return out


def pair(base: Side, other: Side) -> Paired:
    """Join ``other`` to ``base`` on (replicate, round): a replicate or a round that one side
    lacks (a worker that failed, a run stopped in a group) adds nothing. A replicate with no
    common round is left out."""
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
