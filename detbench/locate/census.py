"""The ops of a user's script that can race, named even when its runs agreed (a race that fell the
same way in 3 runs can fall another way in the fourth). ``Census`` is ``locate.record.Recorder``
without digests: it counts, per (op, phase, file, line), the ATen ops that the installed torch
documents as nondeterministic by default on their device (``core.catalog.documenting_all``). An
entry whose condition names ``accumulate=True`` or ``accumulate=False`` counts only calls with that
argument; an ``index_put`` without accumulation through a boolean mask (``ids[noise] = x``) writes
each place once and is not counted.

``start_recorder`` and ``stop_recorder`` are ``detbench locate -- COMMAND``'s: the whole
``Recorder`` over the script's life, a step ending at each optimizer step.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from detbench.core import catalog
from detbench.locate.record import Recorder, base_name

_ACCUMULATE = re.compile(r"accumulate=(True|False)")
#: ATen ops -> the position of their ``accumulate`` argument (``index_put_(self, indices, values,
#: accumulate)``).
_ACCUMULATE_AT = {"index_put_": 3, "index_put": 3, "_index_put_impl_": 3, "put_": 3, "put": 3}


def _accumulate(op: str, args: Any, kwargs: Any) -> bool | None:
    at = _ACCUMULATE_AT.get(op)
    if at is None:
        return None
    if kwargs and "accumulate" in kwargs:
        return bool(kwargs["accumulate"])
    return bool(args[at]) if len(args) > at else False


def _masked(args: Any) -> bool:
    """Whether an ``index_put`` indexes by a boolean mask: its writes cannot race."""
    indices = args[1] if len(args) > 1 and isinstance(args[1], list | tuple) else ()
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices)


def _applies(entry: catalog.CatalogEntry, accumulate: bool | None) -> bool:
    m = _ACCUMULATE.search(entry.condition.replace("`", ""))
    return m is None or accumulate is None or (m.group(1) == "True") == accumulate


class Census(Recorder):
    """Counts the documented nondeterministic ops a script calls (module docstring)."""

    def __init__(self, user_file: str | None = None) -> None:
        super().__init__(user_file)
        self.found: dict[tuple[str, str, str, int, str], dict[str, Any]] = {}
        self._cache: dict[tuple[str, str, str, bool | None], catalog.CatalogEntry | None] = {}

    def _digest(self, t: torch.Tensor) -> str | int:
        return ""  # the census compares nothing

    def start(self) -> None:
        _start(self, end_step=False)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if not self.ops:
            return out
        rec = self.ops[-1]
        op = base_name(rec["op"])
        device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
        acc = _accumulate(op, args, kwargs)
        if acc is False and _masked(args):
            return out
        key = (op, device, rec["phase"], acc)
        if key not in self._cache:
            hits = catalog.documenting_all([op], device, rec["phase"])
            self._cache[key] = next((e for e in hits if _applies(e, acc)), None)
        entry = self._cache[key]
        if entry is not None:
            where = (op, rec["phase"], rec.get("file") or "", int(rec.get("line") or 0), device)
            seen = self.found.setdefault(
                where,
                {
                    "op": op,
                    "phase": rec["phase"],
                    "device": device,
                    "file": where[2],
                    "line": where[3],
                    "module": rec.get("module"),
                    "accumulate": acc,
                    "documented": entry.raw or f"{entry.op} {entry.condition}".strip(),
                    "kind": entry.kind,
                    "count": 0,
                    "steps": set(),
                },
            )
            seen["count"] += 1
            seen["steps"].add(self.step)
        return out

    def stop(self) -> list[dict[str, Any]]:
        """The census, one entry per (op, phase, line), most calls first; recording ends."""
        self.__exit__(None, None, None)
        self.remove()
        out = [{**seen, "steps": len(seen.pop("steps"))} for seen in self.found.values()]
        return sorted(out, key=lambda e: (-e["count"], e["file"], e["line"]))


def _start(rec: Recorder, end_step: bool) -> None:
    """``rec`` recording from now on, each optimizer step ending a step."""
    import torch.optim.optimizer as optim

    def stepped(*_: Any) -> None:
        if end_step:
            rec.end_step()
        rec.step += 1

    rec.phase, rec.step = "forward", 0
    rec.install()
    rec.keep_hook(optim.register_optimizer_step_post_hook(stepped))
    rec.__enter__()


def start_recorder(script: str | None) -> Recorder:
    """``locate``'s recorder over the whole script: a step ends at each optimizer step."""
    rec = Recorder(user_file=script)
    _start(rec, end_step=True)
    return rec


def stop_recorder(rec: Recorder) -> dict[str, Any]:
    """The recording as ``locate.stages`` reads a workload's stream."""
    rec.__exit__(None, None, None)
    rec.end_step()
    rec.remove()
    return {
        "status": "ok",
        "error": None,
        "ops": rec.ops,
        "notes": rec.notes,
        "sampled": rec.hasher.sampled,
        "compiled": [],
        "step_digests": [],
    }
