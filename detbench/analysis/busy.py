"""Was the host busy while the run timed (the ``host_load`` of paired lines and earlier records)?
A timing was busy when other work took ``OTHER_CPU`` of the host's CPU (the foreign share where
known: the run's own workers are busy by design), the hypervisor stole ``STEAL``, or a foreign
process used its GPU above ``GPU_UTIL``. A run is busy when ``BUSY_SHARE`` of its timings were:
its timings are then not to be trusted, its bitwise verdicts still are. A record that does not
say whose the other process on its GPU was (the earlier design's published runs) counts it as
busy unless NVML sampled it idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from detbench.store.schema import Status

#: A record is busy when other processes took this share of the host's CPU time or more.
OTHER_CPU = 0.25
#: ... or the hypervisor stole this share.
STEAL = 0.05
#: ... judged on a record's own window only where it held this many CPU-seconds: /proc/stat
#: counts 10 ms ticks, so two stolen ticks of a 0.15 s window on 2 CPUs read 7%. Shorter windows
#: count in the run's pooled steal.
STEAL_MIN_CPU_SECONDS = 2.0
#: ... or another process used the GPU above this SM utilisation (percent).
GPU_UTIL = 5
#: A run is busy when this share of its timings were.
BUSY_SHARE = 0.10
#: The field of a ``paired.jsonl`` line with the host's load while its worker timed its rounds.
PAIRED_FIELD = "host_load"


@dataclass(frozen=True)
class HostLoad:
    """What the records say about the host while it timed."""

    timed: int  # timings with host_load (records and paired lines)
    busy: int  # of them, timed on a busy host
    cpus: int | None
    load1: float | None  # median 1-minute load average at the end of a timing pass
    other_cpu: float | None  # median share of the host's CPU used by other processes
    steal: float | None  # the share stolen over all the timings (weighted by their CPU-seconds)
    gpu_foreign: int = 0  # timings with a foreign process on their GPU
    gpu_unknown: int = 0  # records with another process whose owner the record does not say
    paired: int = 0  # of ``timed``, the paired timings (lines of paired.jsonl) with host_load
    unrecorded: int = 0  # paired timings (ok lines) whose line does not carry host_load

    @property
    def gpu_others(self) -> int:
        """Timings with another process on their GPU: foreign, or of an unknown owner."""
        return self.gpu_foreign + self.gpu_unknown

    @property
    def is_busy(self) -> bool:
        stolen = self.steal is not None and self.steal >= STEAL
        return (self.timed > 0 and self.busy >= BUSY_SHARE * self.timed) or stolen

    def sentence(self) -> str:
        """The host's state in sentences, for the first screen and the console."""
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
        if self.gpu_foreign:
            parts.append(f"{_timings(self.gpu_foreign)} shared the GPU with another program")
        if self.gpu_unknown:
            parts.append(
                f"{_timings(self.gpu_unknown)} had another process on the GPU that the records "
                "do not attribute"
            )
        said = (": " + "; ".join(parts) if parts else "") + "."
        if not self.is_busy and not self.timed:
            return self.unknown()
        if not self.is_busy:
            quiet = "The host was quiet while this run timed" + said
            return quiet + (" " + self.unknown() if self.unrecorded else "")
        return (
            "The host was busy while this run timed" + said + " Do not trust its timings (every "
            "ratio and interval); its bitwise verdicts still hold, since the load does not change "
            "the bits."
        )

    def unknown(self) -> str:
        """The sentence on paired timings whose lines lack the host's load; "" for none."""
        if not self.unrecorded:
            return ""
        n = self.unrecorded
        which = "its one paired timing" if n == 1 else f"{n} of its paired timings"
        if not self.paired:
            which = "its paired timing" if n == 1 else f"its {n} paired timings"
        return (
            f"Whether the host was busy while this run timed its costs is not known: {which} "
            "(paired.jsonl) did not record the host's load."
        )

    def _usage(self) -> str:
        if self.other_cpu is None:
            return ""
        facts = ["the median over " + ("the " if self.busy else "") + _timings(self.timed)]
        if self.load1 is not None:
            facts.append(f"load {self.load1:.1f}" + (f" on {self.cpus} CPUs" if self.cpus else ""))
        if self.steal is not None and self.steal >= 0.0005:  # what _pct does not read as 0%
            facts.append(f"the hypervisor stole {_pct(self.steal)}")
        return f"other processes used {_pct(self.other_cpu)} of its CPU ({'; '.join(facts)})"


def _timings(n: int) -> str:
    return f"{n} timing{'' if n == 1 else 's'}"


def _pct(x: float) -> str:
    return "under 1%" if 0.0005 <= x < 0.005 else f"{100 * x:.0f}%"


def _gpu_busy(h: Mapping[str, Any]) -> bool:
    whose = _whose(h)
    util = h.get("gpu_other_util" if whose == "unknown" else "gpu_foreign_util")
    return whose is not None and (util is None or util > GPU_UTIL)


def _stolen(h: Mapping[str, Any]) -> bool:
    """``STEAL`` or more stolen, where the window was long enough to say (or of unknown length)."""
    steal = h.get("steal")
    if steal is None or steal < STEAL:
        return False
    seconds, cpus = h.get("seconds"), h.get("cpus")
    return seconds is None or cpus is None or seconds * cpus >= STEAL_MIN_CPU_SECONDS


def _busy(h: Mapping[str, Any]) -> bool:
    other = _other(h)
    return bool((other is not None and other >= OTHER_CPU) or _stolen(h) or _gpu_busy(h))


def _whose(h: Mapping[str, Any]) -> str | None:
    """ "foreign", "unknown" (not recorded) or None (none but the run's own) on a timing's GPU."""
    if not h.get("gpu_other_processes"):
        return None
    if h.get("gpu_own_processes") is None or h.get("gpu_foreign_processes") is None:
        return "unknown"
    return "foreign" if h["gpu_foreign_processes"] else None


def pooled_steal(loads: Iterable[Mapping[str, Any]]) -> float | None:
    """The share of the timings' CPU time stolen, weighted by CPU-seconds where all say them."""
    pairs = []
    for h in loads:
        if h.get("steal") is None:
            continue
        seconds, cpus = h.get("seconds"), h.get("cpus")
        weight = seconds * cpus if seconds is not None and cpus else None
        pairs.append((float(h["steal"]), weight))
    if not pairs:
        return None
    weights = [w for _, w in pairs if w is not None]
    if len(weights) < len(pairs) or sum(weights) <= 0:
        return float(np.median([s for s, _ in pairs]))
    return sum(s * w for s, w in pairs if w is not None) / sum(weights)


def _other(h: Mapping[str, Any]) -> float | None:
    """The CPU share a timing counts as other work: the foreign share where known."""
    foreign = h.get("other_cpu_foreign")
    return float(foreign) if foreign is not None else h.get("other_cpu")


def paired_loads(
    lines: Iterable[Mapping[str, Any]] | None,
) -> tuple[list[Mapping[str, Any]], int]:
    """(the ``host_load`` of each ok paired line that has one, the ok lines without)."""
    loads: list[Mapping[str, Any]] = []
    missing = 0
    for line in lines or ():
        if line.get("status") != "ok":
            continue
        h = line.get(PAIRED_FIELD)
        if isinstance(h, Mapping):
            loads.append(h)
        else:
            missing += 1
    return loads, missing


def host_load(
    df: pd.DataFrame, lines: Iterable[Mapping[str, Any]] | None = None
) -> HostLoad | None:
    """The run's ``HostLoad`` from its records and paired ``lines``; None where they say none."""
    if df.empty:
        return None
    ok = df[df["status"] == Status.OK]
    records = [h for h in ok.get("host_load", ()) if isinstance(h, Mapping)]
    paired, unrecorded = paired_loads(lines)
    loads = [*records, *paired]
    if not loads and not unrecorded:
        return None

    def median(key: str) -> float | None:
        got = (_other(h) if key == "other_cpu" else h.get(key) for h in loads)
        xs = [float(x) for x in got if x is not None]
        return float(np.median(xs)) if xs else None

    cpus = [int(h["cpus"]) for h in loads if h.get("cpus")]
    whose = [_whose(h) for h in loads]
    return HostLoad(
        timed=len(loads),
        busy=sum(map(_busy, loads)),
        cpus=max(cpus) if cpus else None,
        load1=median("load1"),
        other_cpu=median("other_cpu"),
        steal=pooled_steal(loads),
        gpu_foreign=whose.count("foreign"),
        gpu_unknown=whose.count("unknown"),
        paired=len(paired),
        unrecorded=unrecorded,
    )
