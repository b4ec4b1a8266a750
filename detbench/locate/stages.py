"""``detbench locate FILE.py[:WORKLOAD]``: where do two runs of my model first part?

Three stages, each in fresh processes (:mod:`detbench.locate.worker`) that run the workload under
the recorder (:mod:`detbench.locate.record`):

1. **Find.** The build and fingerprint steps run in ``replicates`` processes, and in more, up to
   ``until``, while every stream is still equal; their culprits: :mod:`detbench.locate.culprits`.
2. **Measure.** The culprits' outputs are saved in up to ``MEASURE_PROCESSES`` more processes,
   until two with equal inputs gave different bits: their largest absolute difference is its size
   (a lower bound when the output was sampled).
3. **Check.** The find stage again in the fully deterministic mode (``cudnn-det+det-algos``): a
   culprit no longer one there is fixed by it; one whose op raises has no deterministic kernel.

The recorder cannot see work outside PyTorch's dispatcher (a kernel launched from C++ or Triton
without an ATen op, NCCL), nor compiled code: dynamo steps aside under a dispatch mode, so
compiled functions run eagerly and a difference only their kernels make is not located (the
result says when the workload called ``torch.compile``).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from detbench.core.errors import DetbenchError
from detbench.core.modes import DETERMINISTIC_MODE, get_mode
from detbench.core.workload import Context, WorkloadError, registry, select_target
from detbench.locate.culprits import Culprit, culprits_of, same_bits
from detbench.locate.record import SAVE_MAX_ELEMENTS
from detbench.store.schema import Status
from detbench.worker.protocol import ChildFailed, run_child

#: Processes that save the culprits' outputs, at most (stage 2).
MEASURE_PROCESSES = 3
#: Seconds one recording process may take.
PROCESS_TIMEOUT = 3600.0
MARKER = "does not have a deterministic implementation"


class LocateError(DetbenchError):
    """A locate that cannot run as asked (one clear line)."""


def check_replicates(replicates: int) -> None:
    if replicates < 2:
        raise LocateError(
            f"--replicates must be at least 2 (two runs to compare), not {replicates}"
        )


@dataclass
class Located:
    workload: str
    device: str
    mode: str
    torch: str
    #: Every op's bits and the step's outputs alike in every process; None: the workload failed
    reproducible: bool | None
    #: The step's outputs (what the fingerprint covers) alike in every process.
    outputs_reproducible: bool | None = None
    #: Every op's bits (its name, the digests of its inputs and outputs) alike in every process.
    ops_reproducible: bool | None = None
    processes: int = 0
    culprits: list[Culprit] = field(default_factory=list)
    ops: int = 0
    carried: int = 0  # ops whose outputs differed because their inputs did
    first_difference: dict[str, Any] | None = None
    parted_at: dict[str, Any] | None = None
    #: Not reproducible, but no op with equal inputs gave other outputs
    unlocated: bool = False
    error: str | None = None
    compiled: list[dict[str, Any]] = field(default_factory=list)
    sampled_tensors: int = 0
    notes: list[str] = field(default_factory=list)
    deterministic_mode: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Runs:
    """The recording processes of one locate."""

    def __init__(
        self, source: Path, device: str, profile: str, seed: int, workdir: Path, stream: TextIO
    ) -> None:
        self.source, self.device, self.profile, self.seed = source, device, profile, seed
        self.workdir, self.stream = workdir, stream
        self.count = 0

    def run(
        self,
        keys: list[str],
        mode: Any,
        steps: dict[str, int],
        why: str,
        save: dict[str, list[int]] | None = None,
    ) -> dict[str, Any]:
        self.count += 1
        job = {
            "source": str(self.source.resolve()),
            "keys": keys,
            "device": self.device,
            "mode": asdict(mode),
            "steps": steps,
            "seed": self.seed,
            "profile": self.profile,
            "save": save or {},
        }
        print(f"detbench locate: process {self.count} ({why}, {mode.name})", file=self.stream)
        try:  # in the mode's environment, as a run's worker
            return run_child(
                "detbench.locate.worker:main",
                job,
                self.workdir,
                f"p{self.count}",
                timeout=PROCESS_TIMEOUT,
                environment=mode.environment,
                label="the recording process",
            )
        except ChildFailed as exc:
            return {"error": str(exc)}


def _find(
    runs: _Runs, keys: list[str], mode: Any, steps: dict[str, int], replicates: int, until: int
) -> dict[str, list[dict[str, Any]]]:
    """Stage 1: per workload, the streams of the processes that ran it."""
    streams: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    for n in range(max(replicates, until)):
        todo = [
            k
            for k in keys
            if n < replicates
            or (all(s.get("status") == Status.OK for s in streams[k]) and _alike(streams[k]))
        ]
        if not todo:
            break
        why = "find" if n < replicates else "find: no difference yet"
        got = runs.run(todo, mode, steps, why)
        for k in todo:
            streams[k].append(got["workloads"][k] if "workloads" in got else got)
    return streams


def _alike(streams: list[dict[str, Any]]) -> bool:
    """Every stream's ops and step outputs hold the first one's bits."""
    first = streams[0] if streams else {}
    return all(
        same_bits(first["ops"], s["ops"]) and s.get("step_digests") == first.get("step_digests")
        for s in streams[1:]
    )


def _measure(
    runs: _Runs, mode: Any, steps: dict[str, int], culprits: dict[str, list[Culprit]]
) -> None:
    """Stage 2: the size of each culprit's difference, from saved outputs."""
    import torch

    seen: dict[str, dict[int, list[tuple[str, list[Any], list[Any]]]]] = {
        k: {c.op_index: [] for c in cs} for k, cs in culprits.items()
    }
    for _ in range(MEASURE_PROCESSES):
        todo = [k for k in culprits if any(_pair(v) is None for v in seen[k].values())]
        if not todo:
            break
        got = runs.run(todo, mode, steps, "measure", save={k: list(seen[k]) for k in todo})
        for k in todo:
            w = got.get("workloads", {}).get(k)
            if not w or w.get("status") != Status.OK:
                continue
            for i, kept in seen[k].items():
                if i < len(w["ops"]) and str(i) in w["saved"]:
                    op = w["ops"][i]
                    saved = torch.load(w["saved"][str(i)])
                    kept.append((json.dumps(op.get("out")), op.get("in", []), saved))
    for k, cs in culprits.items():
        for c in cs:
            _size(c, _pair(seen[k][c.op_index]))


def _size(c: Culprit, pair: tuple[list[Any], list[Any]] | None) -> None:
    """Fill in how far the culprit's two saved outputs are apart."""
    if pair is None:
        c.diff_note = (
            f"the difference did not recur with equal inputs in {MEASURE_PROCESSES} more "
            "processes: its size was not measured"
        )
        return
    diff, differing, n, sampled = 0.0, 0, 0, False
    for x, y in zip(pair[0], pair[1], strict=False):
        if x is None or y is None or x.shape != y.shape:
            continue
        if x.dtype.is_floating_point or x.dtype.is_complex:
            d = (x - y).abs() if x.dtype.is_complex else (x.double() - y.double()).abs()
            nan = x.isnan() != y.isnan()
            differing += int(((d > 0) & ~d.isnan()).sum() + nan.sum())
            finite = d[~d.isnan()]
            diff = max(diff, float(finite.max()) if finite.numel() else 0.0)
        else:
            ne = x != y
            differing += int(ne.sum())
            if ne.any():
                diff = max(diff, float((x.double() - y.double()).abs().max()))
        n += x.numel()
        sampled = sampled or x.numel() >= SAVE_MAX_ELEMENTS
    c.max_abs_diff = diff if math.isfinite(diff) else None
    c.differing_elements, c.elements, c.diff_is_lower_bound = differing, n, sampled


def _pair(seen: list[tuple[str, list[Any], list[Any]]]) -> tuple[list[Any], list[Any]] | None:
    """Two saved outputs with equal inputs and different bits, if any."""
    for i, (out_a, in_a, ta) in enumerate(seen):
        for out_b, in_b, tb in seen[i + 1 :]:
            if out_a != out_b and in_a == in_b:
                return ta, tb
    return None


def _check(
    runs: _Runs, located: dict[str, Located], steps: dict[str, int], replicates: int
) -> None:
    """Stage 3: is each culprit still one in the fully deterministic mode?"""
    det = get_mode(DETERMINISTIC_MODE)
    found = _find(runs, list(located), det, steps, replicates, replicates)
    for key, loc in located.items():
        streams = found[key]
        bad = [s for s in streams if s.get("status") != Status.OK]
        if bad:
            msg = str(bad[0].get("error") or "failed")
            raises = MARKER in msg
            loc.deterministic_mode = {"mode": det.name, "error": msg, "raises": raises}
            note = (
                f"raises in {det.name}: an op has no deterministic implementation ({msg[:200]})"
                if raises
                else f"{det.name} failed: {msg[:200]}"
            )
            for c in loc.culprits:
                c.fixed_by_deterministic_mode = False if raises else None
                c.deterministic_mode_note = note
            continue
        still, _ = culprits_of(streams, loc.device)
        places = {c.place for c in still}  # other processes: a generated file has another name
        loc.deterministic_mode = {
            "mode": det.name,
            "processes": len(streams),
            "reproducible": _alike(streams),
            "culprits": [asdict(c) for c in still],
        }
        for c in loc.culprits:
            c.fixed_by_deterministic_mode = c.place not in places
            c.deterministic_mode_note = (
                f"still a culprit in {det.name}"
                if c.place in places
                else f"no difference there in {len(streams)} fresh processes in {det.name}"
            )


def locate(
    target: str,
    device: str | None = None,
    mode: str = "default",
    replicates: int = 2,
    until: int = 4,
    steps: int | None = None,
    profile: str | None = None,
    check: bool = True,
    seed: int = 0,
    stream: TextIO = sys.stderr,
    only: list[str] | None = None,
) -> list[Located]:
    """Locate every workload ``target`` names (or those of them in ``only``)."""
    import torch

    check_replicates(replicates)
    if steps is not None and steps < 1:
        raise LocateError(f"--steps must be at least 1, not {steps}")
    try:
        m = get_mode(mode)
    except (DetbenchError, ValueError) as exc:
        raise LocateError(str(exc)) from None
    try:
        source, keys = select_target(target)
    except WorkloadError as exc:
        raise LocateError(str(exc)) from None
    keys = [k for k in keys if only is None or k in only]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise LocateError("--device cuda: no CUDA GPU is available to torch on this machine")
    # quick on a GPU too: at full sizes a digest of every op's tensors takes seconds per step
    profile = profile or "quick"
    workloads = registry()
    n_steps = {}
    for k in keys:
        own = workloads[k].steps(Context(torch.device(device), profile, seed), 3)
        n_steps[k] = min(own, steps) if steps is not None else own
    with tempfile.TemporaryDirectory(prefix="detbench-locate-") as tmp:
        runs = _Runs(source, device, profile, seed, Path(tmp), stream)
        found = _find(runs, keys, m, n_steps, replicates, max(until, replicates))
        out = {k: conclude(k, m, found[k], device) for k in keys}
        guilty = {k: loc for k, loc in out.items() if loc.culprits}
        if guilty:
            _measure(runs, m, n_steps, {k: loc.culprits for k, loc in guilty.items()})
        if guilty and check and m.name != DETERMINISTIC_MODE:
            _check(runs, guilty, n_steps, replicates)
    return list(out.values())


def conclude(key: str, mode: Any, streams: list[dict[str, Any]], device: str) -> Located:
    """What the find stage's streams say about one workload."""
    import torch

    loc = Located(
        workload=key,
        device=device,
        mode=mode.name,
        torch=torch.__version__,
        reproducible=None,
        processes=len(streams),
    )
    bad = [s for s in streams if s.get("status") != Status.OK]
    if bad:
        loc.error = str(bad[0].get("error"))
        return loc
    first = streams[0]
    loc.ops, loc.compiled = len(first["ops"]), first.get("compiled", [])
    loc.sampled_tensors = int(first.get("sampled", 0))
    loc.notes = list(first.get("notes", []))
    loc.ops_reproducible = all(same_bits(first["ops"], s["ops"]) for s in streams[1:])
    loc.outputs_reproducible = all(
        s.get("step_digests") == first.get("step_digests") for s in streams
    )
    loc.reproducible = loc.ops_reproducible and loc.outputs_reproducible
    if loc.compiled:
        at = ", ".join(f"{c['file']}:{c['line']}" for c in loc.compiled)
        loc.notes.append(
            f"the workload calls torch.compile ({at}): under the recorder the compiled code ran "
            "eagerly, op by op; a difference that only the compiled kernels make is not seen "
            "here (compare `detbench run --set execution=compile`)"
        )
    if loc.reproducible:
        return loc
    culprits, cmp = culprits_of(streams, device)
    loc.culprits, loc.carried = culprits, cmp.carried
    longest = max((s["ops"] for s in streams), key=len)  # where one stream ended, another went on
    for name, i in (("first_difference", cmp.first_difference), ("parted_at", cmp.parted_at)):
        if i is not None and i < len(longest):
            op = first["ops"][i] if i < len(first["ops"]) else longest[i]
            where = {k: op[k] for k in ("op", "phase", "file", "line", "module", "step")}
            setattr(loc, name, {"index": i, **where})
    loc.unlocated = not culprits
    return loc
