"""Bitwise fingerprints of step results, and the divergence between two results.

A step digest covers every tensor a step returned: its dtype, shape and exact bits. Two methods
give the same verdicts: ``"device"`` (default), ``worker.digest``'s sums computed where the tensor
lives, 16 bytes per tensor to the host, the same on a CPU and a GPU; and ``"sha256"`` of the raw
bytes copied to the host (schema-1 runs' digest, byte for byte). To say *how far* two runs
drifted, the first replicate's final outputs are kept as a reference (``save_reference``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from detbench.worker import digest

METHODS = ("device", "sha256")
DEFAULT_METHOD = "device"

#: Elements kept per reference (4 Mi float32 = 16 MiB). Larger results keep an evenly strided
#: sample, and the difference measured on it is flagged as a lower bound.
REFERENCE_MAX_ELEMENTS = 4 * 1024 * 1024

#: Opens every device digest, so that it can never equal a sha256 digest of the same outputs.
_DEVICE_TAG = b"detbench device digest v1;"


def _dense(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The strided tensors that carry ``t``'s value (sparse COO: indices and values)."""
    t = t.detach()
    if t.layout == torch.sparse_coo:
        t = t.coalesce()
        parts = [("indices", t.indices()), ("values", t.values())]
    elif t.layout != torch.strided:
        parts = [("dense", t.to_dense())]
    else:
        parts = [("", t)]
    return [(name, p.resolve_conj().resolve_neg()) for name, p in parts]


def _host_array(t: torch.Tensor) -> np.ndarray:
    """``t``'s bytes in logical order, on the host (any dtype, no value cast, no second copy)."""
    return t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


#: What a step may return, in words (``step_outputs``'s refusal).
EXPECTED = "tensors: a tensor, or lists, tuples, dicts (a ModelOutput), dataclasses of them, None"


class OutputError(TypeError):
    """A step returned something that is not tensors: what, where, and what is expected."""


def _leaves(value: Any, path: str, out: list[Any]) -> None:
    """Append ``value``'s leaves (tensors or None) to ``out`` in order: dicts (a ``ModelOutput``)
    by key, dataclasses by field, lists and tuples by position, pytree nodes as torch flattens
    them, a Transformers KV cache through ``to_legacy_cache()``; else an ``OutputError``."""
    if value is None or isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _leaves(v, f"{path}[{k!r}]", out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _leaves(getattr(value, f.name), f"{path}.{f.name}", out)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _leaves(v, f"{path}[{i}]", out)
    elif type(value) in pytree.SUPPORTED_NODES:  # registered with torch's pytree
        for i, v in enumerate(pytree.tree_flatten(value)[0]):
            _leaves(v, f"{path}<{i}>", out)
    elif callable(getattr(value, "to_legacy_cache", None)):  # a ModelOutput's past_key_values
        _leaves(value.to_legacy_cache(), f"{path}.to_legacy_cache()", out)
    else:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise OutputError(
            f"the step returned a {type(value).__name__} ({shown}) at {path or 'its top'}; "
            f"expected {EXPECTED}"
        )


def step_outputs(result: Any) -> list[Any]:
    """A step's result as the flat, ordered list of its tensors (None kept): what outputs index."""
    out: list[Any] = []
    _leaves(result, "", out)
    return out


def _tensors(outputs: Sequence[Any]) -> list[tuple[int, list[tuple[str, torch.Tensor]] | None]]:
    items: list[tuple[int, list[tuple[str, torch.Tensor]] | None]] = []
    for i, out in enumerate(outputs):
        if out is None:
            items.append((i, None))
        elif isinstance(out, torch.Tensor):
            items.append((i, _dense(out)))
        else:
            raise TypeError(
                f"a step must return tensors (or None); output {i} is {type(out).__name__}"
            )
    return items


def step_digest(outputs: Sequence[Any], method: str = DEFAULT_METHOD) -> str:
    """A hex digest of one step's outputs: for each tensor, its dtype, shape and exact bits."""
    if method not in METHODS:
        raise ValueError(f"unknown fingerprint method {method!r}; expected one of {METHODS}")
    items = _tensors(outputs)
    h = hashlib.sha256()
    if method == "sha256":

        def payload(t: torch.Tensor) -> Any:
            return _host_array(t).data  # the tensor's bytes, on the host

    else:
        flat = [t for _, parts in items if parts is not None for _, t in parts]
        sums = iter(digest.lane_sums(flat))  # one list of lane sums per tensor, in order
        h.update(_DEVICE_TAG)

        def payload(t: torch.Tensor) -> Any:
            return b"".join(v.to_bytes(8, "little") for v in next(sums))

    for i, parts in items:
        if parts is None:
            h.update(f"{i}:None;".encode())
            continue
        for part, t in parts:
            h.update(f"{i}{part}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(payload(t))
    return h.hexdigest()


def combine(digests: Sequence[str]) -> str:
    """The fingerprint of a whole pass: sha256 over its step digests, in order."""
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.is_floating_point() and t.dtype != torch.float64:
        t = t.float()  # float16/bfloat16 -> float32 is exact
    elif t.is_complex():
        t = torch.view_as_real(t.to(torch.complex128))
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.contiguous().numpy()


def reference_arrays(outputs: Sequence[Any]) -> tuple[dict[str, np.ndarray], bool]:
    """Flattened outputs to keep as a reference, and whether they are complete (not sampled)."""
    parts: list[tuple[str, torch.Tensor]] = []
    for i, out in enumerate(outputs):
        if isinstance(out, torch.Tensor):
            for part, t in _dense(out):
                parts.append((f"t{i}{part}", t.reshape(-1)))
    total = sum(t.numel() for _, t in parts)
    stride = max(1, math.ceil(total / REFERENCE_MAX_ELEMENTS))
    # Sample on the tensor's own device, so only the kept elements are copied to the host.
    return {k: _as_numpy(t[::stride]).reshape(-1) for k, t in parts}, stride == 1


def save_reference(
    path: Path, fingerprint: str, outputs: Sequence[Any], replicate: int = -1
) -> None:
    arrays, complete = reference_arrays(outputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npz")  # devices side by side
    meta = {
        "__fingerprint__": np.array(fingerprint),
        "__complete__": np.array(complete),
        "__replicate__": np.array(replicate),
    }
    np.savez(tmp, **meta, **arrays)  # type: ignore[arg-type]
    tmp.replace(path)


def diff_against_reference(
    path: Path, fingerprint: str, outputs: Sequence[Any], replicate: int = -1
) -> dict[str, Any] | None:
    """Max |this - reference| over all outputs (0.0 for equal fingerprints), or None when there
    is no reference yet or this same ``replicate`` saved it in an unfinished attempt (a resumed
    run: it is replaced)."""
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as ref:
        saved_by = int(ref["__replicate__"]) if "__replicate__" in ref.files else -1
        if replicate >= 0 and saved_by == replicate:
            return None
        info: dict[str, Any] = {
            "exact": bool(ref["__complete__"]),
            "reference_fingerprint": str(ref["__fingerprint__"]),
        }
        if info["reference_fingerprint"] == fingerprint:
            return {**info, "max_abs_diff": 0.0}
        arrays, _ = reference_arrays(outputs)
        names = [k for k in ref.files if not k.startswith("__")]
        if sorted(names) != sorted(arrays):
            return {**info, "max_abs_diff": None, "note": "outputs differ in structure"}
        worst = 0.0
        for k in names:
            a, b = arrays[k].astype(np.float64), ref[k].astype(np.float64)
            if a.shape != b.shape:
                return {**info, "max_abs_diff": None, "note": f"output {k} differs in shape"}
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            with np.errstate(invalid="ignore"):  # inf - inf: handled just below
                d = np.where(same, 0.0, np.abs(a - b))
            if np.isnan(d).any() or np.isinf(d).any():
                # NaN or inf in one run and a number in the other: no finite distance.
                return {**info, "max_abs_diff": None, "note": f"output {k}: non-finite in one run"}
            if d.size:
                worst = max(worst, float(d.max()))
        return {**info, "max_abs_diff": worst}
