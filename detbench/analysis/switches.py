"""Which switch changed the bits, and which only cost time, as far as the run measured it.

A switch (a mode flag or a setting) is measured by each pair of the run's modes that differ in
it alone (``default`` and ``det-algos``). Its cost is the geometric mean over the workloads of
its simplest pair's ratio; a switch inert on the run's device gets none, a ratio there is noise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import pandas as pd

from detbench.analysis import stats
from detbench.analysis.cost_intervals import ratio, replicate_samples
from detbench.analysis.labels import counted, mode_of, run_device, simplicity_key
from detbench.analysis.matrix import RAN, verdicts
from detbench.core import acts
from detbench.core import settings as st
from detbench.core.modes import Mode
from detbench.store.schema import Status

#: How the report names the four flags.
FLAG_WORDS = {
    "benchmark": "cudnn.benchmark",
    "cudnn_deterministic": "cudnn.deterministic",
    "deterministic_algorithms": "deterministic algorithms",
    "cudnn_enabled": "cuDNN off",
}


@dataclass(frozen=True)
class SwitchEffect:
    """What one switch did to the run's bits and time."""

    switch: str  # a flag of MODE_FLAGS or a setting's name
    words: str  # how the report names it
    pairs: tuple[tuple[str, str], ...]  # (without, with) mode labels
    workloads: int  # workloads compared in at least one pair
    bits_changed: tuple[str, ...]  # "suite/workload" whose bits it changed
    made_reproducible: tuple[str, ...]  # of them, those it made reproducible
    ratio: stats.Ratio | None  # the first pair's throughput, with over without; None: inert
    devices: tuple[str, ...] = ("cpu", "cuda")  # where it can act (``acts.devices``)
    device: str | None = None  # the run's device (None: not one, or not said)

    @property
    def inert(self) -> bool:
        """The switch acts on nothing on the run's device: no cost is put on it."""
        return not acts.acts_on(self.switch, self.device)

    @property
    def changed_bits(self) -> bool:
        return bool(self.bits_changed)


def _state(m: Mode) -> dict[str, Any]:
    s: dict[str, Any] = {f: getattr(m, f) for f in st.MODE_FLAGS}
    s.update(m.overrides)
    return s


def _difference(a: Mode, b: Mode) -> str | None:
    """The one switch ``a`` and ``b`` differ in, else None (cuDNN off: its flags do not count)."""
    sa, sb = _state(a), _state(b)
    if not a.cudnn_enabled or not b.cudnn_enabled:
        for f in ("benchmark", "cudnn_deterministic"):
            sa.pop(f, None)
            sb.pop(f, None)
    diff = [k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k)]
    return diff[0] if len(diff) == 1 else None


def _first_is_without(switch: str, a: Mode, b: Mode) -> bool:
    """Whether ``a`` is the "without" side: flag off (cuDNN on), setting at torch's default."""
    if switch == "cudnn_enabled":
        return a.cudnn_enabled
    if switch in st.MODE_FLAGS:
        return not getattr(a, switch)
    default = st.BY_NAME[switch].torch_default if switch in st.BY_NAME else None
    return a.overrides.get(switch, default) == default


def pairs(labels: Iterable[Any]) -> dict[str, list[tuple[str, str]]]:
    """Per switch, the (without, with) pairs of ``labels`` differing in it alone, simplest first."""
    modes = [(str(x), m) for x in dict.fromkeys(labels) if (m := mode_of(str(x))) is not None]
    out: dict[str, list[tuple[str, str]]] = {}
    for (la, a), (lb, b) in combinations(modes, 2):
        sw = _difference(a, b)
        if sw is None:
            continue
        pair = (la, lb) if _first_is_without(sw, a, b) else (lb, la)
        out.setdefault(sw, []).append(pair)
    for sw in out:
        out[sw].sort(key=lambda p: (simplicity_key(p[0]), simplicity_key(p[1])))
    order = {f: i for i, f in enumerate(st.MODE_FLAGS)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def effects(
    df: pd.DataFrame, seed: int = stats.SEED, v: pd.DataFrame | None = None
) -> list[SwitchEffect]:
    """Every switch the run measured, flags first; ``v``: ``matrix.verdicts(df)`` if known."""
    v = verdicts(df) if v is None else v
    if v.empty:
        return []
    df = counted(df)
    groups = {k: g for k, g in df.groupby(["suite", "workload", "mode"], sort=False)}
    ok = df[df["status"] == Status.OK]
    prints: dict[Any, frozenset[Any]] = {
        k: frozenset(g["fingerprint"])
        for k, g in ok.groupby(["suite", "workload", "mode"], sort=False)
    }
    verdict = v.set_index(["suite", "workload", "mode"])["verdict"]
    keys = list(dict.fromkeys(zip(v["suite"], v["workload"], strict=True)))
    device = run_device(df)
    out: list[SwitchEffect] = []
    for sw, ps in pairs(v["mode"]).items():
        changed: dict[str, None] = {}
        made: dict[str, None] = {}
        compared: set[str] = set()
        for without, with_ in ps:
            for suite, w in keys:
                a, b = verdict.get((suite, w, without)), verdict.get((suite, w, with_))
                if a not in RAN or b not in RAN or "single" in (a, b):
                    continue
                name = f"{suite}/{w}"
                if a == b == "nondeterministic":  # different bits either way: nothing to tell
                    continue
                compared.add(name)
                if a != b or prints.get((suite, w, without)) != prints.get((suite, w, with_)):
                    changed[name] = None
                if a == "nondeterministic" and b == "reproducible":
                    made[name] = None
        out.append(
            SwitchEffect(
                switch=sw,
                words=FLAG_WORDS.get(sw, sw),
                pairs=tuple(ps),
                workloads=len(compared),
                bits_changed=tuple(changed),
                made_reproducible=tuple(made),
                ratio=_time(groups, keys, ps[0], seed) if acts.acts_on(sw, device) else None,
                devices=acts.devices(sw),
                device=device,
            )
        )
    return out


def _time(
    groups: dict[Any, pd.DataFrame], keys: list[tuple[str, str]], pair: tuple[str, str], seed: int
) -> stats.Ratio | None:
    """The pair's throughput ratio, with over without, over the workloads."""
    without, with_ = pair
    ratios = []
    for suite, w in keys:
        a, b = groups.get((suite, w, with_)), groups.get((suite, w, without))
        if a is not None and b is not None and replicate_samples(a) and replicate_samples(b):
            name = stats.comparison_key(suite, w, with_, without)
            ratios.append(ratio(a, b, name, seed))
    return stats.geometric_mean(ratios) if ratios else None
