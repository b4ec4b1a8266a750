"""The recorder of ``detbench locate``: every op a workload calls, with a digest of its inputs and
outputs, in order, in one fresh process (:mod:`detbench.locate.worker`).

A ``TorchDispatchMode`` sees each ATen op below autograd, the backward's too (the engine carries
the thread-local mode over to its threads). For each op it notes its **phase** (``build``,
``forward``, ``backward``, ``optimizer``), its **module** (the innermost running ``nn.Module``'s
path, such as ``encoder.layers.3.attn``; the root's is ``""``, None outside every module) and the
innermost frame of the user's code (``NOT_USER``). A backward op takes the module and line of the
forward op that made its autograd node (by the node's sequence number, which the forward op saw as
``_get_sequence_nr() - 1``): a race in the backward of ``x[idx]`` is placed at ``x[idx]``.

Digests: sha256 of the bytes on a CPU; on a GPU, :mod:`detbench.worker.digest`'s, copied to the
host once per step (no synchronisation per op). Tensors above ``SAMPLE_ABOVE`` elements are
digested on a strided sample; views are not digested (equal inputs give equal views).

The outputs of ``torch.empty`` and its kin hold whatever was there: they are recorded as
``uninitialized``, and an op that reads such a buffer is flagged, so the comparison blames the
read, not the allocation. A workspace an op returns for its own backward (``WORKSPACE_OUTPUTS``)
is scratch too (oneDNN's LSTM workspace differed between processes whose results agreed): it is
recorded as ``workspace``, and its reader, the backward op, is compared.
"""

from __future__ import annotations

import ctypes
import hashlib
import linecache
import os
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from detbench.worker import digest

#: Tensors above this many elements are digested on an evenly strided sample of about this many.
SAMPLE_ABOVE = 1 << 24
#: Saved outputs (second stage) above this many elements keep an evenly strided sample.
SAVE_MAX_ELEMENTS = 1 << 22
#: Ops whose output is memory left as it was found (nothing to compare, by contract).
UNINITIALIZED_OPS = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
)
#: Outputs (by position) that are an op's scratch workspace for its backward, not a result:
#: ``mkldnn_rnn_layer`` (oneDNN's LSTM) returns (output, hy, cy, workspace).
WORKSPACE_OUTPUTS = {"mkldnn_rnn_layer": frozenset({3})}

#: The files through which user code calls the autograd engine (backward(), autograd.grad()).
_ENGINE_FILES = tuple(
    os.sep + os.path.join("torch", *p)
    for p in (("_tensor.py",), ("autograd", "__init__.py"), ("autograd", "graph.py"))
)
#: Where code that is not the user's lives: torch, detbench, the standard library, site-packages,
#: as given and resolved (a frame names its file by the path it was imported from, maybe a link).
NOT_USER = tuple(
    {
        form + os.sep
        for p in (
            os.path.dirname(torch.__file__),
            os.path.dirname(os.path.abspath(__file__)),
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
        )
        for form in (os.path.abspath(p), str(Path(p).resolve()))
    }
)


def op_name(func: Any) -> str:
    """``aten.index_put_.default`` -> ``aten.index_put_`` (the overload is noise to a reader)."""
    name = str(func)
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name


def code_line(file: str, line: int) -> str:
    """The code of line ``line`` of ``file``, stripped ("" where there is none)."""
    return linecache.getline(file, line).strip() if file and line else ""


def base_name(op: str) -> str:
    """``aten.empty_like`` -> ``empty_like``."""
    return op.split(".", 1)[1] if "." in op else op


class _Hasher:
    """Digests of tensors: sha256 on a CPU at once; elsewhere an int handle until ``flush``."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, torch.Tensor, str]] = []
        self.resolved: dict[int, str] = {}
        self.handles = 0
        self.sampled = 0

    def __call__(self, t: torch.Tensor) -> str | int:
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        head = f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
        if t.numel() > SAMPLE_ABOVE:
            stride = -(-t.numel() // SAMPLE_ABOVE)
            t = t.reshape(-1)[::stride]
            self.sampled += 1
            head += "~"
        if t.device.type == "cpu":
            if not t.is_contiguous():
                t = t.contiguous()
            # The bytes read straight from memory: a tensor op costs more than hashing most.
            data = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())
            return head + ":" + hashlib.sha256(data).hexdigest()[:32]
        self.handles += 1
        self.pending.append((self.handles, digest.device_lanes(t.detach()), head))
        return self.handles

    def flush(self, ops: list[dict[str, Any]]) -> None:
        """Resolve every pending handle (one copy to the host) into ``ops``."""
        if self.pending:
            host = torch.stack([p[1] for p in self.pending]).cpu().tolist()
            for (h, _, head), lanes in zip(self.pending, host, strict=True):
                self.resolved[h] = head + ":" + "".join(f"{x & digest.M64:016x}" for x in lanes)
            self.pending = []
        for op in ops:
            for side in ("in", "out"):
                vals = op.get(side) or []
                for j, v in enumerate(vals):
                    if isinstance(v, int) and not isinstance(v, bool):
                        vals[j] = self.resolved[v]


class Recorder(TorchDispatchMode):
    """Records every op into ``ops`` (module docstring)."""

    def __init__(self, user_file: str | None = None) -> None:
        super().__init__()
        self.ops: list[dict[str, Any]] = []
        self.phase = "build"
        self.step = -1
        self.user_file = user_file
        self.save: set[int] = set()
        self.saved: dict[int, list[torch.Tensor | None]] = {}
        self.hasher = _Hasher()
        self._flushed = 0  # ops before this index hold no pending handle
        self._uninit: dict[int, int] = {}  # storage pointer -> the op that allocated it
        self._by_seq: dict[int, int] = {}  # autograd sequence number -> forward op index
        self._modules = threading.local()
        self._names: dict[int, dict[int, str]] = {}
        self._user_code: dict[Any, bool] = {}
        self._in_optimizer = 0
        self._handles: list[Any] = []
        self.notes: list[str] = []
        self._seq = getattr(torch._C._autograd, "_get_sequence_nr", None)
        self._node = getattr(torch._C, "_current_autograd_node", None)
        if self._seq is None or self._node is None:
            self.notes.append(
                "this torch lacks the autograd sequence numbers or the current-node query: "
                "backward ops are placed where backward() was called, not at their forward line"
            )

    def install(self) -> None:
        import torch.optim.optimizer as optim

        hooks = torch.nn.modules.module
        stack = self._stack

        def pre(module: torch.nn.Module, args: Any) -> None:
            s = stack()
            s.append((module, self._path_in(s, module), type(module).__name__))

        def post(module: torch.nn.Module, args: Any, out: Any) -> None:
            s = stack()
            if s and s[-1][0] is module:
                s.pop()

        def enter(*_: Any) -> None:
            self._in_optimizer += 1

        def leave(*_: Any) -> None:
            self._in_optimizer = max(0, self._in_optimizer - 1)

        self._handles += [
            hooks.register_module_forward_pre_hook(pre),
            hooks.register_module_forward_hook(post, always_call=True),
            optim.register_optimizer_step_pre_hook(enter),
            optim.register_optimizer_step_post_hook(leave),
        ]

    def keep_hook(self, handle: Any) -> None:
        """A hook another module registered for this recording, removed by ``remove``."""
        self._handles.append(handle)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _stack(self) -> list[tuple[torch.nn.Module, str, str]]:
        """The modules whose forward is running, innermost last: (module, path, class)."""
        s: list[tuple[torch.nn.Module, str, str]] | None = getattr(self._modules, "stack", None)
        if s is None:
            s = self._modules.stack = []
        return s

    def _path_in(self, s: list[tuple[torch.nn.Module, str, str]], child: torch.nn.Module) -> str:
        """``child``'s path: its caller's path and its name in the caller."""
        if not s:
            return ""
        parent, path, _ = s[-1]
        names = self._names.get(id(parent))
        if names is None:
            names = {id(m): n for n, m in parent.named_modules() if n}
            self._names[id(parent)] = names
        name = names.get(id(child))
        if name is None:  # not a submodule of its caller (a module passed in): keep the path
            return path
        return f"{path}.{name}" if path else name

    def _module_path(self) -> tuple[str | None, str | None]:
        s = self._stack()
        return (s[-1][1], s[-1][2]) if s else (None, None)

    def _where(self) -> tuple[str, int, str, bool]:
        """(file, line, function, through_backward) of the innermost frame of the user's code."""
        try:
            f: Any = sys._getframe(2)
        except ValueError:  # a stack under 3 frames: autograd's device thread on torch < 2.11
            f = None
        engine, fallback = False, None
        while f is not None:
            code = f.f_code
            user = self._user_code.get(code)
            if user is None:
                path = os.path.abspath(code.co_filename)
                user = not path.startswith(NOT_USER) and not code.co_filename.startswith("<")
                self._user_code[code] = user
            if user:
                return code.co_filename, f.f_lineno, code.co_name, engine
            # directly or through a framework's call (accelerate's backward, Lightning's loop)
            engine = engine or code.co_filename.endswith(_ENGINE_FILES)
            if fallback is None and self.user_file and code.co_filename == self.user_file:
                fallback = f
            f = f.f_back
        if fallback is not None:
            return fallback.f_code.co_filename, fallback.f_lineno, fallback.f_code.co_name, False
        return "", 0, "", False

    def _digest(self, t: torch.Tensor) -> str | int:
        """Every tensor is digested each time an op reads or writes it: a cache keyed on the
        version counter would miss writes through ``.data`` and in-place ops seen here before
        autograd's layer bumps the counter."""
        try:
            return self.hasher(t)
        except Exception as exc:  # an exotic tensor: compared by its description only
            return f"{t.dtype}{list(t.shape)}:unhashable ({type(exc).__name__})"

    def _storage(self, t: torch.Tensor) -> int | None:
        try:
            return int(t.untyped_storage().data_ptr())
        except Exception:
            return None

    def _reads_uninit(self, tensors: list[torch.Tensor]) -> dict[int, int]:
        """Input position -> the op that allocated its uninitialised storage."""
        ptrs = [self._storage(t) for t in tensors]
        return {j: self._uninit[p] for j, p in enumerate(ptrs) if p and p in self._uninit}

    def _written(self, t: torch.Tensor) -> None:
        """``t`` was written in place: its storage is initialised once the write covers it."""
        ptr = self._storage(t)
        if ptr and ptr in self._uninit:
            with_storage = t.untyped_storage().nbytes()
            if t.is_contiguous() and t.numel() * t.element_size() >= with_storage:
                del self._uninit[ptr]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        if name.startswith("profiler."):  # record_function markers: no data
            return func(*args, **kwargs)
        i = len(self.ops)
        node = self._node() if self._node is not None else None
        seq = self._seq() if self._seq is not None and node is None else None
        tin = _tensors(args) + (_tensors(kwargs.values()) if kwargs else [])
        schema = getattr(func, "_schema", None)
        returns = list(getattr(schema, "returns", []) or [])
        view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
        rec: dict[str, Any] = {"i": i, "op": name, "step": self.step}
        self._place(rec, node, seq)
        uninit_reads = self._reads_uninit(tin)
        if uninit_reads:
            rec["reads_uninitialized"] = {str(j): o for j, o in uninit_reads.items()}
        if not view:  # uninitialised memory is not compared: its bits are garbage by contract
            rec["in"] = [
                "uninitialized" if j in uninit_reads else self._digest(t) for j, t in enumerate(tin)
            ]
        out = func(*args, **kwargs)
        flat_out = out if isinstance(out, list | tuple) else [out]
        tout = _tensors(flat_out)
        fresh = [r.alias_info is None for r in returns]
        for t, new in zip(tout, fresh, strict=False):
            ptr = self._storage(t) if new and self._uninit else None
            if ptr:  # a new tensor where an uninitialised one was: that one was freed
                self._uninit.pop(ptr, None)
        if base_name(name) in UNINITIALIZED_OPS:
            rec["uninitialized"] = True
            rec["out"] = ["uninitialized"] * len(tout)
            for t in tout:
                ptr = self._storage(t)
                if ptr:
                    self._uninit[ptr] = i
        elif view:
            rec["view"] = True
        else:
            scratch = WORKSPACE_OUTPUTS.get(base_name(name), frozenset())
            rec["out"] = [
                "workspace" if j in scratch else self._digest(t) for j, t in enumerate(tout)
            ]
            for j in scratch:
                ptr = self._storage(tout[j]) if j < len(tout) else None
                if ptr:  # its reader is flagged, as a reader of torch.empty's memory is
                    self._uninit[ptr] = i
            writes = [r.alias_info is not None and r.alias_info.is_write for r in returns]
            for t, wrote in zip(tout, writes, strict=False):
                if wrote:
                    self._written(t)
            rec["out"] += [repr(o) for o in flat_out if isinstance(o, int | float | bool)]
        if i in self.save:
            self.saved[i] = [_keep(t) for t in tout]
        self.ops.append(rec)
        return out

    def _place(self, rec: dict[str, Any], node: Any, seq: int | None) -> None:
        """Where op ``rec`` sits in the user's code. A backward op (``node``) is placed at the
        forward op that made its node, unless user code called it (a custom Function, a hook)."""
        i = rec["i"]
        if node is not None:
            rec["phase"] = "backward"
            rec["node"] = node.name()
            origin = self._by_seq.get(int(node._sequence_nr()))
            o = self.ops[origin] if origin is not None else None
            file, line, fn, engine = self._where()
            rec["by_engine"] = engine or not file
            if o is not None and rec["by_engine"]:
                file, line, fn = o["file"], o["line"], o["func"]
            rec.update(
                module=o["module"] if o else None,
                module_type=o["module_type"] if o else None,
                file=file,
                line=line,
                func=fn,
                origin=origin,
            )
            return
        rec["phase"] = "optimizer" if self._in_optimizer else self.phase
        module, mtype = self._module_path()
        file, line, fn, _ = self._where()
        rec.update(module=module, module_type=mtype, file=file, line=line, func=fn)
        if seq is not None and seq > 0 and (seq - 1) not in self._by_seq:
            self._by_seq[seq - 1] = i

    def end_step(self) -> None:
        """Resolve the step's pending device digests (one copy to the host)."""
        self.hasher.flush(self.ops[self._flushed :])
        self._flushed = len(self.ops)


def _tensors(values: Any) -> list[torch.Tensor]:
    """The tensors among an op's arguments or results (flat but for lists: no pytree walk)."""
    out: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, list | tuple):
            out += [x for x in v if isinstance(x, torch.Tensor)]
    return out


def _keep(t: torch.Tensor) -> torch.Tensor | None:
    """A host copy of ``t`` to measure a difference on (an evenly strided sample when large)."""
    try:
        t = t.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        flat = t.resolve_conj().resolve_neg().reshape(-1)
        if flat.numel() > SAVE_MAX_ELEMENTS:
            flat = flat[:: -(-flat.numel() // SAVE_MAX_ELEMENTS)]
        return flat.cpu().clone()
    except Exception:
        return None
