"""Bitwise fingerprints of step results, and the divergence between two results.

A fingerprint is sha256 over every tensor a step returned: its dtype, shape and raw bytes. Two runs
agree bitwise exactly when their fingerprints are equal. To say *how far* two runs drifted when
they disagree, the first replicate's final outputs are kept as a reference (``save_reference``)
and later replicates measure their maximum absolute difference against it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: Elements kept per reference (4 Mi float32 = 16 MiB). Larger results keep an evenly strided
#: sample, and the difference measured on it is flagged as a lower bound.
REFERENCE_MAX_ELEMENTS = 4 * 1024 * 1024


def _dense(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The strided tensors that carry ``t``'s value (indices and values for sparse COO)."""
    t = t.detach()
    if t.layout == torch.sparse_coo:
        t = t.coalesce()
        return [("indices", t.indices()), ("values", t.values())]
    if t.layout != torch.strided:
        return [("dense", t.to_dense())]
    return [("", t)]


def _host_bytes(t: torch.Tensor) -> bytes:
    # Reinterpreting as bytes works for every dtype (bfloat16 included) without a value cast.
    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def step_digest(outputs: Sequence[Any]) -> str:
    """sha256 of one step's outputs: for each tensor, its dtype, shape and bytes."""
    h = hashlib.sha256()
    for i, out in enumerate(outputs):
        if out is None:
            h.update(f"{i}:None;".encode())
            continue
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"a step must return tensors (or None); output {i} is {type(out).__name__}"
            )
        for part, t in _dense(out):
            h.update(f"{i}{part}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(_host_bytes(t))
    return h.hexdigest()


def combine(digests: Sequence[str]) -> str:
    """The fingerprint of a whole pass: sha256 over its step digests, in order."""
    h = hashlib.sha256()
    for d in digests:
        h.update(d.encode())
    return h.hexdigest()


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
    tmp = path.with_name(path.name + ".tmp.npz")
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
    """Max |this - reference| over all outputs (0.0 when the fingerprints are equal), or None
    when there is no reference yet, or when the reference was saved by this same ``replicate``
    in an attempt that never finished (a run interrupted and resumed): this replicate then
    replaces it, as in an uninterrupted run."""
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
