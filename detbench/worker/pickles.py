"""A ``torch.save`` file of pickled objects, read as data without running their code.

A training script saves more than state dicts: the Hugging Face ``Trainer`` writes
``training_args.bin`` (a pickled ``TrainingArguments``, whose ``logging_dir`` holds the run's
start time and host), and people ``torch.save(model)`` a whole module. ``torch.load(weights_only=
True)`` refuses both, and unpickling them in full imports and runs the classes the file names.
``load_as_data`` does neither: each class the file names (``torch.serialization.
get_unsafe_globals_in_checkpoint``) is stood in for by a ``Stub`` that keeps the arguments and
the state the pickle hands it, allowed through torch's own weights-only unpickler
(``torch.serialization.safe_globals``). Tensors and parameters come back as tensors, the rest as
the plain values they are; ``fields`` walks a stub as a dict of its arguments and its state.

Both torch APIs are probed: without them (torch before 2.5) the file stays unreadable here and is
compared as whole bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Stub:
    """An object of a class named in a pickle, rebuilt as data: ``args`` from its construction
    (``NEWOBJ``, ``REDUCE``: an ``Enum``'s value), ``state`` from ``BUILD``."""

    args: tuple[Any, ...]
    state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Stub:
        obj = object.__new__(cls)
        obj.args, obj.state = args, None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args or self.args

    def __setstate__(self, state: Any) -> None:
        self.state = state


def available() -> str | None:
    """Why pickled objects cannot be read as data with this torch, or None."""
    import torch.serialization as ser

    for name in ("get_unsafe_globals_in_checkpoint", "safe_globals"):
        if not hasattr(ser, name):
            return f"torch {__import__('torch').__version__} has no torch.serialization.{name}"
    return None


def load_as_data(path: Path) -> Any:
    """The file's objects with every class it names stood in for by a ``Stub``."""
    import torch
    import torch.serialization as ser

    why = available()
    if why is not None:
        raise ValueError(why)
    names = ser.get_unsafe_globals_in_checkpoint(str(path))
    stubs = [(type(n.rsplit(".", 1)[-1], (Stub,), {"__qualname__": n}), n) for n in names]
    with ser.safe_globals(stubs):  # type: ignore[arg-type]
        return torch.load(path, map_location="cpu", weights_only=True)


def fields(obj: Stub) -> Iterator[tuple[str, Any]]:
    """A stub's (key, value) pairs: its arguments by position, then its state's fields."""
    for i, a in enumerate(obj.args):
        yield f"arg{i}", a
    state = obj.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] or {}), **state[1]}  # (dict, slots) as copyreg gives it
    if isinstance(state, dict):
        yield from ((str(k), v) for k, v in state.items())
    elif state is not None:
        yield "state", state
