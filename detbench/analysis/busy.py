"""Was the host busy while the run timed? From each record's ``host_load`` (``worker/hostload``)
and ``timed_alone`` (whether the runner had every other worker of the run stopped while it timed).

A record was timed on a busy host when other processes took at least ``OTHER_CPU`` of the host's
CPU time during its timing pass, the hypervisor stole at least ``STEAL`` of it, or another process
ran on its GPU (with utilisation above ``GPU_UTIL`` percent, where NVML sampled it). A run is
busy when at least ``BUSY_SHARE`` of its timed records were, or when the runner could not time
some records alone. Its timings (every ratio and interval) are then not to be trusted; its bitwise
verdicts are, since the bits do not depend on the host's load.

A run recorded before ``host_load`` existed says nothing about its host (``verdict`` returns
None), unless ``timed_alone`` says another worker ran beside a timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from detbench.store.schema import Status

#: A record is busy when other processes took this share of the host's CPU time or more.
OTHER_CPU = 0.25
#: ... or the hypervisor stole this share.
STEAL = 0.05
#: ... or another process used the GPU above this SM utilisation (percent).
GPU_UTIL = 5
#: A run is busy when this share of its timed records were.
BUSY_SHARE = 0.10


@dataclass(frozen=True)
class HostLoad:
    """What the records say about the host while it timed."""

    timed: int  # records with host_load
    busy: int  # of them, timed on a busy host
    not_alone: int  # records the runner could not time alone (timed_alone False)
    cpus: int | None
    load1: float | None  # median 1-minute load average at the end of a timing pass
    other_cpu: float | None  # median share of the host's CPU used by other processes
    steal: float | None  # median steal share
    gpu_others: int  # records with another process on their GPU

    @property
    def is_busy(self) -> bool:
        return (self.timed > 0 and self.busy >= BUSY_SHARE * self.timed) or self.not_alone > 0

    def sentence(self) -> str:
        """The host's state in sentences, for the first screen and the console, e.g. "The host
        was busy while this run timed: 5 of 10 timings ran beside other work; other processes
        used 35% of its CPU (the median over the 10 timings; load 1.4 on 2 CPUs). Do not trust
        its timings (every ratio and interval); its bitwise verdicts still hold, since the load
        does not change the bits." """
        parts = []
        if self.timed:
            usage = self._usage()
            if self.busy:
                some = f"{self.busy} of {self.timed} timings"
                if self.busy == self.timed:
                    some = f"all {self.timed} timings" if self.timed > 1 else "its one timing"
                parts.append(f"{some} ran beside other work")
            if usage:
                parts.append(usage)
        if self.gpu_others:
            parts.append(f"{_timings(self.gpu_others)} shared the GPU with another process")
        if self.not_alone:
            parts.append(f"{_timings(self.not_alone)} ran beside another worker of this run")
        said = (": " + "; ".join(parts) if parts else "") + "."
        if not self.is_busy:
            return "The host was quiet while this run timed" + said
        return (
            "The host was busy while this run timed" + said + " Do not trust its timings (every "
            "ratio and interval); its bitwise verdicts still hold, since the load does not change "
            "the bits."
        )

    def _usage(self) -> str:
        """How much of the CPU other processes used, with the load and steal, as a clause."""
        if self.other_cpu is None:
            return ""
        facts = ["the median over " + ("the " if self.busy else "") + _timings(self.timed)]
        if self.load1 is not None:
            facts.append(f"load {self.load1:.1f}" + (f" on {self.cpus} CPUs" if self.cpus else ""))
        if self.steal:
            facts.append(f"the hypervisor stole {_pct(self.steal)}")
        return f"other processes used {_pct(self.other_cpu)} of its CPU ({'; '.join(facts)})"


def _timings(n: int) -> str:
    return f"{n} timing{'' if n == 1 else 's'}"


def _pct(x: float) -> str:
    return "under 1%" if 0.0005 <= x < 0.005 else f"{100 * x:.0f}%"


def _busy(h: Mapping[str, Any]) -> bool:
    other, steal = h.get("other_cpu"), h.get("steal")
    util, others = h.get("gpu_other_util"), h.get("gpu_other_processes")
    return bool(
        (other is not None and other >= OTHER_CPU)
        or (steal is not None and steal >= STEAL)
        or (others and (util is None or util > GPU_UTIL))
    )


def host_load(df: pd.DataFrame) -> HostLoad | None:
    """The run's ``HostLoad``; None where no record says anything about its host."""
    if df.empty:
        return None
    ok = df[df["status"] == Status.OK]
    loads = [h for h in ok.get("host_load", pd.Series(dtype=object)) if isinstance(h, Mapping)]
    alone = ok["timed_alone"] if "timed_alone" in ok.columns else pd.Series(dtype=object)
    not_alone = int((alone == False).sum())  # noqa: E712  (None: not known)
    if not loads and not not_alone:
        return None

    def median(key: str) -> float | None:
        xs = [float(h[key]) for h in loads if h.get(key) is not None]
        return float(np.median(xs)) if xs else None

    cpus = [int(h["cpus"]) for h in loads if h.get("cpus")]
    return HostLoad(
        timed=len(loads), busy=sum(_busy(h) for h in loads), not_alone=not_alone,
        cpus=max(cpus) if cpus else None, load1=median("load1"), other_cpu=median("other_cpu"),
        steal=median("steal"), gpu_others=sum(1 for h in loads if h.get("gpu_other_processes")),
    )  # fmt: skip
