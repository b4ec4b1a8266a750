"""``detbench attribute``: which switch costs what, and which is needed for reproducibility.

The study has two ends: the default mode and the fully deterministic one (``cudnn-det+det-algos``
with every setting strict where it acts on the device). Each switch is added alone at the default
end and removed alone (to each loose level) at the deterministic end. Every variant is a mode
with settings, so the study is an ordinary run whose env.json holds the study (``build_study``,
pure); ``effects`` turns its records into each switch's effect per workload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from detbench.analysis import matrix
from detbench.analysis.cost_intervals import costs
from detbench.analysis.labels import counted
from detbench.analysis.switches import FLAG_WORDS as switches_words
from detbench.core import acts
from detbench.core import settings as st
from detbench.core import torchstate as ts
from detbench.core.modes import MODES, Mode, get_mode
from detbench.store.schema import Status

if TYPE_CHECKING:
    from detbench.core.workload import Workload

KIND = "attribution"
#: The op whose backend the ``sdpa_backend`` switch picks (``worker.ops.WATCHED``'s name).
SDPA = "scaled_dot_product_attention"
#: The two mode flags that are switches of the study, and where each acts.
FLAG_DEVICES = {
    f: acts.FLAG_DEVICES[f] for f in ("deterministic_algorithms", "cudnn_deterministic")
}
#: Loose levels where "every level but the strict one" is not what users turn off.
LOOSE = {"float32_matmul_precision": ("high",)}
#: Settings that are not switches of the study although they have a strict level.
NOT_SWITCHES = ("warn_only",)
#: How the conclusions name the flags (settings go by their setting name).
FLAG_WORDS = {f: switches_words[f] for f in FLAG_DEVICES}


@dataclass(frozen=True)
class Switch:
    name: str
    strict: str
    loose: tuple[str, ...]
    flag: bool = False

    def devices(self) -> tuple[str, ...]:
        return FLAG_DEVICES[self.name] if self.flag else st.get(self.name).devices


def switches() -> list[Switch]:
    """The two flags, then every process setting with a strict level, in table order."""
    out = [Switch(f, "on", ("off",), flag=True) for f in FLAG_DEVICES]
    for s in st.SETTINGS:
        if s.strict is None or s.scope == "workload" or s.name in NOT_SWITCHES:
            continue
        loose = LOOSE.get(s.name, tuple(lvl for lvl in s.levels if lvl != s.strict))
        out.append(Switch(s.name, s.strict, loose))
    return out


@dataclass(frozen=True)
class _State:
    """Where a mode of the study stands: its two flags and its setting overrides."""

    det_algos: bool
    cudnn_det: bool
    overrides: tuple[tuple[str, str], ...] = ()

    def mode(self) -> Mode:
        base = next(
            m
            for m in MODES
            if m.cudnn_enabled
            and not m.benchmark
            and m.deterministic_algorithms == self.det_algos
            and m.cudnn_deterministic == self.cudnn_det
        )
        return base.with_settings(st.normalise(self.overrides)) if self.overrides else base

    def levels(self) -> dict[str, str]:
        return {**{s.name: s.torch_default for s in st.SETTINGS}, **dict(self.overrides)}

    def level(self, sw: Switch) -> str:
        if sw.flag:
            on = self.det_algos if sw.name == "deterministic_algorithms" else self.cudnn_det
            return "on" if on else "off"
        return self.levels()[sw.name]

    def with_level(self, name: str, level: str) -> _State:
        if name == "deterministic_algorithms":
            return replace(self, det_algos=level == "on")
        if name == "cudnn_deterministic":
            return replace(self, cudnn_det=level == "on")
        given = {**dict(self.overrides), name: level}
        return replace(self, overrides=tuple(given.items()))


def _inert(sw: Switch, device: str, state: _State) -> str | None:
    if device not in sw.devices():
        return f"{sw.name} acts only on {', '.join(sw.devices())}"
    if sw.flag:
        return None
    return st.inert_reason(sw.name, device, state.levels(), state.det_algos)


@dataclass
class _Plan:
    """The variants of a study, in the order they run, and the switches skipped with the reason."""

    variants: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def skip(self, sw: str, end: str, reason: str) -> None:
        self.skipped.append({"switch": sw, "end": end, "reason": reason})

    def add(
        self,
        state: _State,
        sw: str,
        level: str,
        end: str,
        direction: str,
        only: list[str] | None,
        against: _State | None = None,
    ) -> None:
        try:
            label = state.mode().name
        except st.SettingError as exc:  # a combination torch refuses
            self.skip(sw, end, str(exc))
            return
        self.variants.append(
            {
                "mode": label,
                "switch": sw,
                "level": level,
                "end": end,
                "direction": direction,
                "workloads": only,
                **({"against": against.mode().name} if against else {}),
            }
        )


#: The setting switched in the compiled mode of each end when the study compiles.
_INDUCTOR = "inductor_deterministic"


def build_study(
    device: str,
    workloads: Sequence[Workload],
    compile: bool = False,
    tied: bool | None = None,
    called: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The study of ``workloads`` on ``device`` as written to env.json: its ends, its variants
    (one per switch, end and level) and the switches skipped with the reason.

    ``compile``: execution=compile is a switch, and ``inductor_deterministic`` one in each end's
    compiled mode unless ``tied`` to deterministic algorithms (probed when None). ``called``:
    per workload, the ops a step was seen calling; ``sdpa_backend`` runs on those calling SDPA
    or declaring ``attention=True``."""
    declared = [w.key for w in workloads if getattr(w, "attention", False)]
    seen = [k for k, ops in (called or {}).items() if SDPA in ops]
    attention = [w.key for w in workloads if w.key in declared or w.key in seen]
    seen_keys = [w.key for w in workloads if w.key in seen] if called is not None else None
    default = _State(False, False)
    det = _deterministic_end(device, attention)
    plan = _Plan()
    for end, state in (("default", default), ("deterministic", det)):
        for sw in switches():
            if compile and sw.name == _INDUCTOR:  # switched in the compiled mode, below
                continue
            _add_switch(plan, sw, end, state, device, attention, called)
        if compile:
            _add_compiled(plan, end, state, tied)
    return {
        "kind": KIND,
        "device": device,
        "default_end": default.mode().name,
        "deterministic_end": det.mode().name,
        "variants": plan.variants,
        "skipped": plan.skipped,
        "attention": {"declared": declared, "seen": seen_keys},
    }


def _deterministic_end(device: str, attention: list[str]) -> _State:
    """Both flags on, every setting strict where that acts on ``device`` (SDPA: if called)."""
    strict = {}
    for sw in switches():
        s = st.get(sw.name) if not sw.flag else None
        if s is None or sw.strict == s.torch_default or s.unavailable() is not None:
            continue
        if sw.name == "sdpa_backend" and not attention:
            continue
        probe = _State(True, True, ((sw.name, sw.strict),))
        if _inert(sw, device, probe) is None:
            strict[sw.name] = sw.strict
    return _State(True, True, tuple(strict.items()))


def _add_switch(
    plan: _Plan,
    sw: Switch,
    end: str,
    state: _State,
    device: str,
    attention: list[str],
    called: Mapping[str, Sequence[str]] | None,
) -> None:
    """Switch ``sw`` alone at ``end`` (added, or removed to each loose level), or skip it."""
    only = attention if sw.name == "sdpa_backend" else None
    reason = _inert(sw, device, state)
    if reason is None and not sw.flag and st.get(sw.name).unavailable() is not None:
        reason = str(st.get(sw.name).unavailable())
    if reason is None and sw.name == "sdpa_backend" and not attention:
        reason = "no selected workload calls scaled_dot_product_attention" + (
            " (one step of each was run to see)" if called is not None else ""
        )
    now = state.level(sw)
    if reason is None and end == "default" and now == sw.strict:
        reason = f"{sw.name} is already {now} in the default mode (torch's default)"
    if reason is None and end == "deterministic" and now != sw.strict:
        reason = f"{sw.name} is {now} at the deterministic end"
    if reason is not None:
        plan.skip(sw.name, end, reason)
        return
    levels, direction = ((sw.strict,), "added") if end == "default" else (sw.loose, "removed")
    for level in levels:
        plan.add(state.with_level(sw.name, level), sw.name, level, end, direction, only)


def _add_compiled(plan: _Plan, end: str, state: _State, tied: bool | None) -> None:
    """execution=compile at ``end``, then ``inductor_deterministic`` switched in that mode."""
    compiled = state.with_level("execution", "compile")
    if end == "deterministic":
        compiled = compiled.with_level(_INDUCTOR, "on")
    plan.add(compiled, "execution", "compile", end, "added", None)
    level, direction = ("on", "added") if end == "default" else ("off", "removed")
    reason = st.get(_INDUCTOR).unavailable()
    if reason is None and (ts.inductor_tied() if tied is None else tied):
        reason = ts.inductor_tie_reason(level)
    if reason is not None:
        plan.skip(_INDUCTOR, end, reason)
        return
    inductor = compiled.with_level(_INDUCTOR, level)
    plan.add(inductor, _INDUCTOR, level, end, direction, None, against=compiled)


def is_study(study: Any) -> bool:
    return isinstance(study, dict) and study.get("kind") == KIND


def end_label(study: dict[str, Any], end: str) -> str:
    return str(study["default_end"] if end == "default" else study["deterministic_end"])


def against(study: dict[str, Any], variant: dict[str, Any]) -> str:
    """The mode a variant is compared with: its own ``against``, else its end's."""
    return str(variant.get("against") or end_label(study, variant["end"]))


def study_modes(study: dict[str, Any]) -> list[Mode]:
    """The modes to run: the two ends, then every variant's, each once."""
    labels = [study["default_end"], study["deterministic_end"]]
    labels += [x for v in study["variants"] for x in (v.get("against"), v["mode"]) if x]
    return [get_mode(label) for label in dict.fromkeys(labels)]


def only_for(study: dict[str, Any]) -> dict[str, list[str]]:
    """Mode label -> the workloads it runs, for the modes that run only some."""
    everyone = {study["default_end"], study["deterministic_end"]}
    everyone |= {v["mode"] for v in study["variants"] if v["workloads"] is None}
    everyone |= {v["against"] for v in study["variants"] if v.get("against")}
    out: dict[str, list[str]] = {}
    for v in study["variants"]:
        if v["mode"] not in everyone:
            keys = out.setdefault(v["mode"], [])
            keys += [k for k in v["workloads"] if k not in keys]
    return out


def skipped(study: dict[str, Any]) -> list[str]:
    """The skipped switches grouped by reason, naming the end where skipped at one only."""
    groups: dict[tuple[str, str], list[str]] = {}
    ends: dict[tuple[str, str], list[str]] = {}
    for x in study["skipped"]:
        reason = str(x["reason"]).removeprefix(x["switch"] + " ")  # "cudnn_tf32 acts only on cuda"
        ends.setdefault((x["switch"], reason), []).append(x["end"])
    for (sw, reason), where in ends.items():
        one = "" if len(where) > 1 else f" at the {where[0]} end"
        groups.setdefault((reason, one), []).append(sw)
    return [f"{', '.join(sws)}{one}: {reason}" for (reason, one), sws in groups.items()]


def describe(study: dict[str, Any]) -> list[str]:
    """The study in lines of text (printed before the plan)."""
    compile = any(v["switch"] == "execution" for v in study["variants"])
    lines = [
        f"attribution study on {study['device']}: default end {study['default_end']}, "
        f"deterministic end {study['deterministic_end']}",
    ]
    for v in study["variants"]:
        sign = "+" if v["direction"] == "added" else "-"
        where = "" if v["workloads"] is None else f" (only {', '.join(v['workloads'])})"
        where += f" (against {v['against']})" if v.get("against") else ""
        lines.append(
            f"  {sign} {v['switch']}={v['level']} at the {v['end']} end: {v['mode']}{where}"
        )
    lines += [f"  skipped: {x}" for x in skipped(study)]
    lines.append(
        "  --compile: every workload is also compiled with torch.compile (inductor) in the "
        "compiled modes above: each worker compiles afresh, which takes long (tens of "
        "seconds per small graph on a CPU)"
        if compile
        else "  execution=compile is not a switch of this study unless --compile is given (off "
        "by default: it compiles every workload)"
    )
    return lines


def _bits(end: dict[str, Any] | None, var: dict[str, Any] | None) -> Any:
    """True/False: the variant's bits differ from the end's; "varies"; None (no comparison)."""
    if end is None or var is None:
        return None
    verdicts = {end["verdict"], var["verdict"]}
    if not verdicts <= set(matrix.RAN):
        return None
    if "nondeterministic" in verdicts:
        return "varies"
    if "single" in verdicts:
        return None
    return bool(end["fingerprints"] != var["fingerprints"])


def effects(df: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """One row per (suite, workload, variant): the switch, its cost against its end's mode,
    ``bits_changed``, both verdicts, ``needed`` (deterministic end: the end is reproducible and
    the variant is not) and ``sufficient`` (default end: the other way round)."""
    df = counted(df)
    if df.empty:
        return pd.DataFrame()
    ok = df[df["status"] == Status.OK]
    prints = ok.groupby(["suite", "workload", "mode"])["fingerprint"].agg(frozenset).to_dict()
    by: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for r in matrix.verdicts(df).to_dict("records"):
        key3 = (r["suite"], r["workload"], r["mode"])
        by[key3] = {str(k): x for k, x in r.items()}
        by[key3]["fingerprints"] = prints.get(key3, frozenset())
    cost_tables = []
    for label in dict.fromkeys(against(study, x) for x in study["variants"]):
        modes = {label} | {x["mode"] for x in study["variants"] if against(study, x) == label}
        sub = df[df["mode"].isin(modes)]
        if len(sub):
            cost_tables.append(costs(sub, baseline=label).assign(against=label))
    c = pd.concat(cost_tables) if cost_tables else pd.DataFrame()
    cost = {} if c.empty else c.set_index(["suite", "workload", "mode", "against"]).to_dict("index")
    rows: list[dict[str, Any]] = []
    for suite, workload in dict.fromkeys(zip(df["suite"], df["workload"], strict=True)):
        for x in study["variants"]:
            if x["workloads"] is not None and f"{suite}/{workload}" not in x["workloads"]:
                continue
            base = against(study, x)
            at_end = by.get((suite, workload, base))
            var = by.get((suite, workload, x["mode"]))
            if var is None:
                continue
            ce = cost.get((suite, workload, x["mode"], base), {})
            ev = None if at_end is None else str(at_end["verdict"])
            vv = str(var["verdict"])
            needed = sufficient = None
            if x["end"] == "deterministic" and ev == "reproducible":
                needed = {"nondeterministic": True, "reproducible": False}.get(vv)
            if x["end"] == "default" and ev == "nondeterministic":
                sufficient = {"reproducible": True, "nondeterministic": False}.get(vv)
            rows.append(
                {
                    "suite": suite,
                    "workload": workload,
                    "mode": x["mode"],
                    "end_mode": base,
                    **{k: x[k] for k in ("switch", "end", "direction", "level")},
                    **{k: ce.get(k, np.nan) for k in ("relative_throughput", "ci_low", "ci_high")},
                    "significant": ce.get("significant"),
                    "noisy": ce.get("noisy"),
                    "bits_changed": _bits(at_end, var),
                    "verdict": vv,
                    "end_verdict": ev,
                    "needed": needed,
                    "sufficient": sufficient,
                }
            )
    return pd.DataFrame(rows, dtype=object)
