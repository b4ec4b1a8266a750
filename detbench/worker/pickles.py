"""A ``torch.save`` file of pickled objects, read as data without running their code.

``training_args.bin`` (a pickled ``TrainingArguments``) or a ``torch.save(model)`` is refused by
``torch.load(weights_only=True)``, and unpickling it in full runs the classes the file names.
``load_as_data`` stands a ``Stub`` in for each class the file names, through torch's own
weights-only unpickler (``safe_globals``; torch 2.5+, else the file is compared whole).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Stub:
    """An object of a class named in a pickle, as data: its construction ``args``, its ``state``."""

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
