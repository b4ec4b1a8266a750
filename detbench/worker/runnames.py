"""A file's name without the run in it: the same item in every run of a script.

Loggers name their files after the run (TensorBoard's ``runs/<Mon><DD>_<HH-MM-SS>_<host>``,
Lightning's ``version_N``, Hydra's ``outputs/<date>/<time>/``), so by name each run leaves files
the other lacks. Each pattern is tied to a clock's, a host's, a pid's or a run counter's shape, so
a name that carries a result (``epoch=3-step=120.ckpt``, ``checkpoint-500``) keeps it.
"""

from __future__ import annotations

import re
import socket

#: (pattern, replacement) on each component of a path, in order.
_PARTS = [
    # TensorBoard's event files: everything after the prefix is time, host, pid and a counter
    (re.compile(r"^(events\.out\.tfevents)\..+$"), r"\1.<run>"),
    # SummaryWriter's default folder: ``Dec01_21-33-53_vm`` (and a comment after it)
    (re.compile(r"\b[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}"), "<time>"),
    (
        re.compile(r"(?<!\d)\d{4}-\d{2}-\d{2}(?:[T_ ]\d{2}[-:]\d{2}[-:]\d{2}(?:\.\d+)?)?(?!\d)"),
        "<time>",
    ),
    (re.compile(r"(?<!\d)\d{8}[-_T]?\d{6}(?!\d)"), "<time>"),
    (re.compile(r"^\d{2}-\d{2}-\d{2}$"), "<time>"),  # Hydra's time folder under its date folder
    (re.compile(r"(?<!\d)1[5-9]\d{8}(?:\.\d+)?(?!\d)"), "<time>"),  # unix seconds, 2017-2033
    (re.compile(r"\b(version|run|trial)([-_])\d+\b", re.IGNORECASE), r"\1\2<n>"),
    (re.compile(r"\bpid[-_]?\d+\b", re.IGNORECASE), "pid-<n>"),
]


def _host() -> str | None:
    try:
        name = socket.gethostname()
    except OSError:
        return None
    return name if len(name) >= 3 else None  # a 1-2 letter name would match inside words


def canonical(rel: str) -> str:
    """``rel`` (a path with ``/``) with the run's time, host, pid and counter replaced."""
    host = _host()
    out = []
    for part in rel.split("/"):
        for pattern, repl in _PARTS:
            part = pattern.sub(repl, part)
        if host and host in part:
            part = part.replace(host, "<host>")
        out.append(part)
    return "/".join(out)
