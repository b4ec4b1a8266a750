"""What a user's script does, inside ``detbench exec``, to the state that decides its bits, each
noted with the file, line and code of the user's code that did it (``locate.scripted`` installs
the watches after applying the mode, so the mode's own writes are not noted): every common way to
set a row of ``detbench settings`` or one of the four flags (``Watch.install``), each setting it
moved noted with the API used (``via``); the seeding calls (which the helpers of Transformers,
Lightning and accelerate make); and each DataLoader made.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from typing import Any

from detbench.core import settings as st
from detbench.locate.record import NOT_USER, code_line

#: The attribute of ``torch.backends.cudnn`` -> the settings a write to it can move.
CUDNN_ATTRS = {
    "enabled": ("cudnn_enabled",),
    "benchmark": ("benchmark",),
    "deterministic": ("cudnn_deterministic",),
    "allow_tf32": ("cudnn_tf32",),
    "fp32_precision": ("cudnn_tf32",),
}
#: What a write to ``torch.backends.cuda.matmul`` or an ``fp32_precision`` object can move.
MATMUL = (
    "float32_matmul_precision",
    "fp16_reduced_precision_reduction",
    "fp16_reduced_precision_reduction_split_k",
    "bf16_reduced_precision_reduction",
    "bf16_reduced_precision_reduction_split_k",
)
PRECISION = ("float32_matmul_precision", "cudnn_tf32")
_WHERE = ("file", "line", "code")


def user_frame(depth: int = 2) -> tuple[str, int, str]:
    """(file, line, code) of the innermost frame of the user's code above the caller."""
    f: Any = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if not os.path.abspath(name).startswith(NOT_USER) and not name.startswith("<"):
            return name, f.f_lineno, code_line(name, f.f_lineno)
        f = f.f_back
    return "", 0, ""


def _level(name: str) -> Any:
    """A setting's level now: a mode flag as a boolean, a table row as its ``read`` says."""
    import torch

    flags = {
        "cudnn_enabled": lambda: torch.backends.cudnn.enabled,
        "benchmark": lambda: torch.backends.cudnn.benchmark,
        "cudnn_deterministic": lambda: torch.backends.cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    }
    try:
        if name in flags:
            return bool(flags[name]())
        s = st.BY_NAME[name]
        if s.read is None or s.unavailable() is not None:
            return None
        return s.read()
    except Exception:  # torch refused the read (a mix of TF32 APIs on 2.9+)
        return None


class Watch:
    """Notes into ``changes`` each setting that a watched write moved."""

    def __init__(self, changes: list[dict[str, Any]]) -> None:
        self.changes = changes
        self.inside = False  # a watched call inside another (the API's own) notes nothing

    def around(self, names: tuple[str, ...], via: str, act: Any, one: bool = False) -> Any:
        """``act()``, noting each of ``names`` whose level it changed; ``one``: ``names[0]`` even
        where it stays (``"same"``: a line the user wrote, maybe not the default elsewhere)."""
        if self.inside:
            return act()
        before = {n: _level(n) for n in names}
        self.inside = True
        try:
            out = act()
        finally:
            self.inside = False
        for n in names:
            after = _level(n)
            same = after == before[n]
            if not same or (one and n == names[0]):
                where = dict(zip(_WHERE, user_frame(3), strict=True))
                change = {"setting": n, "from": before[n], "to": after, "via": via, **where}
                self.changes.append({**change, "same": True} if same else change)
        return out

    def install(self) -> None:
        import torch

        self._descriptors(type(torch.backends.cudnn), "torch.backends.cudnn", CUDNN_ATTRS)
        det = sys.modules.get("torch.utils.deterministic")
        if det is not None:
            names = {"fill_uninitialized_memory": ("fill_uninitialized_memory",)}
            self._descriptors(type(det), "torch.utils.deterministic", names)
        self._setattr(type(torch.backends.cuda.matmul), "torch.backends.cuda.matmul", MATMUL)
        conv = getattr(torch.backends.cudnn, "conv", None)
        if conv is not None and hasattr(type(conv), "__setattr__"):
            self._setattr(type(conv), "fp32_precision", PRECISION)
        self._function(torch, "set_float32_matmul_precision", ("float32_matmul_precision",))
        algos = ("deterministic_algorithms", "warn_only", "fill_uninitialized_memory")
        self._function(torch, "use_deterministic_algorithms", algos)
        self._environ()

    def _descriptors(self, cls: type, api: str, attrs: Mapping[str, tuple[str, ...]]) -> None:
        watch = self
        for attr, names in attrs.items():
            inner = vars(cls).get(attr)
            if inner is None or not hasattr(inner, "__set__"):
                continue

            class Watched:
                def __get__(self, obj: Any, objtype: Any = None, inner: Any = inner) -> Any:
                    return inner.__get__(obj, objtype)

                def __set__(
                    self, obj: Any, value: Any, inner: Any = inner, names: Any = names, a=attr
                ) -> None:
                    watch.around(names, f"{api}.{a}", lambda: inner.__set__(obj, value), True)

            setattr(cls, attr, Watched())

    def _setattr(self, cls: type, api: str, names: tuple[str, ...]) -> None:
        original: Any = cls.__setattr__
        watch = self

        def __setattr__(obj: Any, attr: str, value: Any) -> None:
            if api == "fp32_precision":  # torch 2.9+'s objects say what they are for
                parts = (str(vars(obj).get(k, "")) for k in ("backend", "op"))
                label = f"{attr} ({' '.join(parts)})"
            else:
                label = f"{api}.{attr}"
            watch.around(names, label, lambda: original(obj, attr, value), attr == "allow_tf32")

        cls.__setattr__ = __setattr__  # type: ignore[method-assign,assignment]

    def _function(self, owner: Any, attr: str, names: tuple[str, ...]) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return

        one = len(names) == 1  # set_float32_matmul_precision: noted even at the same level

        @functools.wraps(original)
        def watched(*args: Any, **kwargs: Any) -> Any:
            act = lambda: original(*args, **kwargs)  # noqa: E731
            return self.around(names, f"{owner.__name__}.{attr}", act, one)

        setattr(owner, attr, watched)

    def _environ(self) -> None:
        env_cls: Any = type(os.environ)
        original = env_cls.__setitem__
        watch = self
        names = ("cublas_workspace_config",)

        def __setitem__(env: Any, key: str, value: str) -> None:
            if key != "CUBLAS_WORKSPACE_CONFIG" or env is not os.environ:
                original(env, key, value)
                return
            watch.around(names, f"os.environ[{key!r}]", lambda: original(env, key, value))

        env_cls.__setitem__ = __setitem__


def watch_seeding(seeds: list[dict[str, Any]], dataloaders: list[dict[str, Any]]) -> None:
    """Note every seeding call into ``seeds`` and every DataLoader into ``dataloaders``."""
    import random

    import torch

    inside: list[str] = []

    def noting(owner: Any, attr: str, what: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return

        @functools.wraps(original)
        def seeded(*args: Any, **kwargs: Any) -> Any:
            if inside:  # torch.manual_seed calls torch.cuda.manual_seed_all: one call, not two
                return original(*args, **kwargs)
            seeds.append({"call": what, **dict(zip(_WHERE, user_frame(), strict=True))})
            inside.append(what)
            try:
                return original(*args, **kwargs)
            finally:
                inside.pop()

        setattr(owner, attr, seeded)

    noting(torch, "manual_seed", "torch.manual_seed")
    noting(torch.random, "manual_seed", "torch.manual_seed")
    noting(torch.cuda, "manual_seed", "torch.cuda.manual_seed")
    noting(torch.cuda, "manual_seed_all", "torch.cuda.manual_seed_all")
    noting(random, "seed", "random.seed")
    try:
        import numpy

        noting(numpy.random, "seed", "numpy.random.seed")
    except ImportError:
        pass
    loader = torch.utils.data.DataLoader
    init = loader.__init__

    @functools.wraps(init)
    def made(self: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
        init(self, dataset, *args, **kwargs)
        where = dict(zip(_WHERE, user_frame(), strict=True))
        sampler = type(getattr(self, "sampler", None)).__name__
        dataloaders.append(
            {
                "num_workers": int(getattr(self, "num_workers", 0) or 0),
                "shuffle": sampler == "RandomSampler",
                "generator": getattr(self, "generator", None) is not None,
                "worker_init_fn": getattr(self, "worker_init_fn", None) is not None,
                **where,
            }
        )

    loader.__init__ = made  # type: ignore[method-assign]
