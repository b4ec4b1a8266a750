"""What one run of a user's script left, as comparable items, and where two runs first part.

``read_outputs`` turns a run's folder (``files/<path>``, ``stdout.txt``, ``stderr.txt``,
``fingerprints.jsonl``) into ``Item``s, in comparison order: printed lines, stdout then stderr
(``stdout:K``), each followed by the results it labels (``stdout:K:loss``); fingerprints; then
files, by their names without the run in them (``worker.runnames``). A checkpoint gives one item
per leaf, never its file's bytes: the same state saved twice can give other bytes (archive name,
pickle protocol, storage sharing). Event files, JSON and CSV are read by field
(``worker.formats``), other text files by line; any other file, an unreadable one and an empty
one are one item of their whole bytes. Numbers are compared as bits.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from detbench.worker.evidence import labelled_numbers
from detbench.worker.formats import csv_items, is_tfevents, json_items, tfevents_items
from detbench.worker.items import Item, sha, shown
from detbench.worker.pickles import Stub, fields, load_as_data
from detbench.worker.printed import Asides, SetAside, line_diff, lines, mask_line
from detbench.worker.runnames import canonical

CHECKPOINT_SUFFIXES = frozenset({".pt", ".pth", ".ckpt", ".bin"})
TEXT_SUFFIXES = frozenset(
    {".txt", ".log", ".csv", ".json", ".jsonl", ".yaml", ".yml", ".md", ".out"}
)
#: The start of a legacy (pre-1.6, non-zip) torch.save file: its magic number, pickled.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
#: The safetensors dtype names (the format's data is little-endian, as torch's on x86 and ARM).
_ST_DTYPES: dict[str, torch.dtype] = {
    **{f"F{n}": getattr(torch, f"float{n}") for n in (64, 32, 16)},
    **{f"I{n}": getattr(torch, f"int{n}") for n in (64, 32, 16, 8)},
    **{f"U{n}": getattr(torch, f"uint{n}") for n in (64, 32, 16, 8)},
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "C64": torch.complex64,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class Outputs:
    """One run's items in comparison order; ``run_dir`` to read a differing tensor again."""

    items: list[Item]
    set_aside: list[SetAside]
    unreadable: list[str]  # "PATH: why (compared as whole bytes)"
    run_dir: Path | None = None
    trust_pickles: bool = False


@dataclass(frozen=True)
class Parting:
    """The first item where two runs differ: ``a``/``b`` its ``shown`` in each (None: absent
    there), ``max_abs_diff`` the largest |a - b| of a tensor or of the numbers on a line."""

    item: str
    kind: str
    where: dict[str, Any]
    a: str | None
    b: str | None
    max_abs_diff: float | None
    differing: int
    compared: int


def _line_items(text: str, source: str, where: dict[str, Any], asides: Asides) -> list[Item]:
    """Each comparable line, then each result it labels (``evidence.labelled_numbers``)."""
    items = []
    for k, ln in enumerate(lines(text, source, asides), 1):
        at = {**where, "line_no": ln.line_no, "text": ln.text, "masked": ln.masked, "step": ln.step}
        if ln.epoch is not None:
            at["epoch"] = ln.epoch
        items.append(Item("line", f"{source}:{k}", sha(ln.masked), at, shown(ln.text)))
        for label, number in labelled_numbers(ln.masked):
            name = f"{source}:{k}:{label}"
            items.append(Item("result", name, sha(number), {**at, "label": label}, number))
    return items


def _natural(name: str) -> list[Any]:
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", name)]


def read_safetensors(path: Path, *, library: bool = True) -> dict[str, torch.Tensor]:
    """A .safetensors file's tensors in natural name order (parsed here without the library)."""
    if library:
        try:
            from safetensors.torch import load_file  # an optional dependency
        except ImportError:
            library = False
    if library:
        tensors: dict[str, torch.Tensor] = load_file(str(path), device="cpu")
    else:
        blob = path.read_bytes()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8 : 8 + n])
        tensors = {}
        for key, spec in header.items():
            if key == "__metadata__":
                continue
            dtype, shape = _ST_DTYPES[spec["dtype"]], [int(s) for s in spec["shape"]]
            start, end = (8 + n + int(o) for o in spec["data_offsets"])
            if end - start != math.prod(shape) * dtype.itemsize or end > len(blob):
                raise ValueError(f"{key}: data_offsets do not fit {spec['dtype']} {shape}")
            flat = torch.empty(0, dtype=torch.uint8)
            if end > start:  # frombuffer refuses an empty buffer
                flat = torch.frombuffer(bytearray(blob[start:end]), dtype=torch.uint8)
            tensors[key] = flat.view(dtype).reshape(shape)
    return {k: tensors[k] for k in sorted(tensors, key=_natural)}


def _torch_load(path: Path, trust_pickles: bool) -> Any:
    """``torch.load`` on the CPU, else as data (``worker.pickles``) unless ``trust_pickles``."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        if not trust_pickles:
            try:
                return load_as_data(path)
            except Exception:
                pass
            found = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(e))
            detail = (found.group(1) if found else str(e).strip()).split(". ")[0][:200]
            raise ValueError(f"torch.load(weights_only=True) refused it: {detail}") from e
    return torch.load(path, map_location="cpu", weights_only=False)


def _leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, leaf) for each leaf under dicts, lists and tuples ("" for the root)."""
    if isinstance(obj, dict):
        pairs: Any = obj.items()
    elif isinstance(obj, Stub):  # an object of a pickled class, read as data
        pairs = fields(obj)
    elif isinstance(obj, list | tuple) and not hasattr(obj, "_fields"):  # a namedtuple: a leaf
        pairs = enumerate(obj)
    else:
        yield prefix, obj
        return
    for k, v in pairs:
        yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))


def _host(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.cpu().resolve_conj().resolve_neg().contiguous()


def _leaf_item(rel: str, dotted: str, leaf: Any, asides: Asides, as_name: str = "") -> Item:
    key = dotted or "(root)"
    # a key may hold a path of the run's (Lightning's best_k_models: version_N/...ckpt)
    name = f"{as_name or rel}:{canonical(key)}"
    if isinstance(leaf, np.ndarray) and leaf.dtype != object:
        leaf = torch.from_numpy(np.ascontiguousarray(leaf))
    if isinstance(leaf, torch.Tensor):
        t = _host(leaf)
        raw = t.reshape(-1).view(torch.uint8).numpy()  # any dtype, 0-dim and empty included
        shape = list(t.shape)
        digest = sha(f"{t.dtype}:{tuple(shape)};", raw.tobytes())
        at = {"file": rel, "tensor": key, "dtype": str(t.dtype), "shape": shape}
        return Item("tensor", name, digest, at, f"{t.dtype} {shape} sha256 {digest[:12]}")
    if not isinstance(leaf, int | float | complex | str | bytes | np.generic | type(None)):
        why = "not a tensor, number or string: compared by its repr, addresses masked"
        asides.extra.append(SetAside(f"{name}: the inside of a {type(leaf).__qualname__}", why))
    text, kinds = mask_line(repr(leaf))  # e.g. a saved_at string, an object's address
    if kinds:
        masked = ", ".join(f"<{k}>" for k in dict.fromkeys(kinds))
        asides.extra.append(SetAside(f"{name}: {masked}", "never equal between two runs"))
    digest = sha(f"{type(leaf).__qualname__}:", text)
    return Item("value", name, digest, {"file": rel, "key": key}, shown(text, 80))


def _is_torch_file(path: Path) -> bool:
    with path.open("rb") as f:
        if f.read(len(_LEGACY_MAGIC)) == _LEGACY_MAGIC:
            return True
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.endswith("data.pkl") for n in z.namelist())


def _file_items(path: Path, rel: str, name: str, trust: bool, asides: Asides) -> list[Item]:
    """One file's items, named ``name``; [] for a file compared whole; raises if unreadable."""
    suffix = path.suffix.lower()
    if is_tfevents(path):
        return tfevents_items(path, name, rel, asides)
    if suffix in TEXT_SUFFIXES:
        text = path.read_bytes().decode("utf-8")
        found = None
        if suffix in (".json", ".jsonl"):
            found = json_items(text, name, rel, asides, lines=suffix == ".jsonl")
        elif suffix == ".csv":
            found = csv_items(text, name, rel, asides)
        return found if found is not None else _line_items(text, name, {"file": rel}, asides)
    if suffix == ".safetensors":
        tensors = read_safetensors(path).items()
        return [_leaf_item(rel, k, t, asides, name) for k, t in tensors]
    if suffix in CHECKPOINT_SUFFIXES or _is_torch_file(path):
        leaves = _leaves(_torch_load(path, trust))
        return [_leaf_item(rel, k, v, asides, name) for k, v in leaves]
    return []


def _whole(path: Path, rel: str, name: str) -> Item:
    blob = path.read_bytes()
    digest = sha(blob)
    at = {"file": rel, "bytes": len(blob)}
    return Item("file", name, digest, at, f"{len(blob)} bytes, sha256 {digest[:12]}")


def _fingerprints(path: Path, unreadable: list[str]) -> list[Item]:
    items: list[Item] = []
    if not path.is_file():
        return items
    for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            name, index, fp = str(r["name"]), int(r["index"]), str(r["digest"])
            dtype, shape = str(r.get("dtype")), list(r.get("shape") or [])
        except (ValueError, KeyError, TypeError) as e:
            unreadable.append(f"fingerprints.jsonl:{no}: not a fingerprint record ({e!r})")
            continue
        at = {"name": name, "index": index, "step": index, "dtype": dtype, "shape": shape}
        digest = sha(f"{fp}:{dtype}:{shape}")
        text = f"{dtype} {shape} {fp[:16]}"
        items.append(Item("fingerprint", f"fingerprint:{name}#{index}", digest, at, text))
    return items


def read_outputs(run_dir: Path, *, trust_pickles: bool = False) -> Outputs:
    """The comparable items of one run's folder. ``trust_pickles`` unpickles in full what
    weights-only loading refuses: that runs code the file names, so only for trusted files."""
    run_dir = Path(run_dir)
    asides, unreadable, items = Asides(), list[str](), list[Item]()
    for stream in ("stdout", "stderr"):
        p = run_dir / f"{stream}.txt"
        text = p.read_bytes().decode("utf-8", errors="replace") if p.is_file() else ""
        items += _line_items(text, stream, {"stream": stream}, asides)
    items += _fingerprints(run_dir / "fingerprints.jsonl", unreadable)
    root = run_dir / "files"
    paths = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    rels = [(canonical(r), r) for r in (p.relative_to(root).as_posix() for p in paths)]
    for name, rel in sorted(rels):
        path = root / rel
        try:
            found = _file_items(path, rel, name, trust_pickles, asides)
        except Exception as e:
            unreadable.append(f"{rel}: {e} (compared as whole bytes)")
            found = []
        items += found or [_whole(path, rel, name)]
    counts: dict[str, int] = {}
    for i, item in enumerate(items):  # names made unique ("a.b" and a -> b), to match by name
        counts[item.name] = n = counts.get(item.name, 0) + 1
        if n > 1:
            items[i] = Item(item.kind, f"{item.name}~{n}", item.digest, item.where, item.shown)
    return Outputs(items, asides.listed(), unreadable, run_dir, trust_pickles)


def digest_of(o: Outputs) -> str:
    """One sha256 over the items' names and digests, in order: equal iff every item is equal."""
    return sha(*(f"{i.name}\0{i.digest}\n" for i in o.items))


def _abs_diff(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """The largest |x - y|, NaN-safe as ``printed.num_diff``; None for other shapes or none."""
    if x.shape != y.shape or x.numel() == 0:
        return None
    wide = torch.complex128 if x.is_complex() or y.is_complex() else torch.float64
    x, y = x.to(wide), y.to(wide)
    same = (x == y) | (x.isnan() & y.isnan())
    d = torch.where(same, 0.0, torch.nan_to_num((x - y).abs(), nan=math.inf))
    return float(d.max())


def _tensor(o: Outputs, item: Item) -> torch.Tensor | None:
    """The tensor ``item`` names, read again from ``o``'s folder (None where that fails)."""
    if o.run_dir is None:
        return None
    path, key = o.run_dir / "files" / item.where["file"], item.where["tensor"]
    try:
        if path.suffix.lower() == ".safetensors":
            return read_safetensors(path).get(key)
        for dotted, leaf in _leaves(_torch_load(path, o.trust_pickles)):
            if (dotted or "(root)") == key:
                if isinstance(leaf, np.ndarray):
                    leaf = torch.from_numpy(leaf)
                return _host(leaf) if isinstance(leaf, torch.Tensor) else None
    except Exception:
        return None
    return None


def first_parting(a: Outputs, b: Outputs) -> Parting | None:
    """The first item, in ``a``'s order, that differs or one run lacks (one only ``b`` has comes
    right after the last item before it that ``a`` has too); None when all are equal."""
    in_a = {item.name: (k, item) for k, item in enumerate(a.items)}
    in_b = {item.name: item for item in b.items}
    order: dict[str, tuple[float, int]] = {name: (k, 0) for name, (k, _) in in_a.items()}
    last = -1.0
    for k, item in enumerate(b.items):
        if item.name in in_a:
            last = in_a[item.name][0]
        else:
            order[item.name] = (last + 0.5, k)
    differing = [
        n for n in order if n not in in_a or n not in in_b or in_a[n][1].digest != in_b[n].digest
    ]
    if not differing:
        return None
    name = min(differing, key=order.__getitem__)
    ia, ib = in_a[name][1] if name in in_a else None, in_b.get(name)
    diff = None
    if ia is not None and ib is not None and ia.kind == ib.kind == "tensor":
        x, y = _tensor(a, ia), _tensor(b, ib)
        diff = _abs_diff(x, y) if x is not None and y is not None else None
    elif ia is not None and ib is not None and ia.kind == ib.kind == "line":
        diff = line_diff(ia.where["masked"], ib.where["masked"])
    first = ia if ia is not None else ib
    assert first is not None
    a_shown, b_shown = ia.shown if ia else None, ib.shown if ib else None
    return Parting(
        name, first.kind, dict(first.where), a_shown, b_shown, diff, len(differing), len(order)
    )
