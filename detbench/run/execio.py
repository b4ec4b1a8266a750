"""What one run of a user's command leaves, gathered for ``detbench exec``: its output streams,
piece by piece with the time each arrived (split on ``\\r`` too, for tqdm's bars), the steps a
second it printed, and the files it wrote.

**Files.** ``Snapshot`` notes every file under the watched folders before a run; ``keep`` takes
those the run created or changed into the run's ``files/`` folder. A created file is moved there,
so every run starts from the folder as it was before the first: a logger that counts the runs in
its folder (Lightning's ``version_N``), or a script that resumes from what it finds, sees the
same in each. A changed file is copied, and stays as that run left it. ``put_back`` returns the
last run's created files, so the folder ends as the script leaves it after one run.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

#: The folders never watched (besides the run's own output folder and hidden ones).
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "wandb"})
#: The most files a snapshot looks at.
MAX_FILES = 20_000
#: The largest file kept for the comparison (bytes).
MAX_BYTES = 2 << 30
#: Steps printed within this many seconds of each other give no rate (all printed at the end).
MIN_SPAN = 0.2

_STEP = re.compile(
    r"(?:\b(?:step|iter|iteration|it|batch)\s*[:=#]?\s*(\d+)\b)|(?:^\s*\[?(\d+)\s*/\s*\d+\b)", re.I
)


@dataclass
class Stream:
    """One output stream of a run: its pieces with their arrival times (``time.monotonic``)."""

    name: str
    pieces: list[tuple[float, str]] = field(default_factory=list)

    def read(self, pipe: IO[bytes], dest: Path) -> threading.Thread:
        """A started thread that reads ``pipe`` to its end into ``dest`` and ``pieces``."""

        def work() -> None:
            with open(dest, "wb") as f:
                rest = b""
                while True:
                    chunk = pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(65536)
                    if not chunk:
                        break
                    f.write(chunk)
                    f.flush()
                    now = time.monotonic()
                    parts = re.split(rb"[\r\n]", rest + chunk)
                    rest = parts.pop()
                    for p in parts:
                        if p.strip():
                            self.pieces.append((now, p.decode(errors="replace")))
                if rest.strip():
                    self.pieces.append((time.monotonic(), rest.decode(errors="replace")))

        t = threading.Thread(target=work, daemon=True)
        t.start()
        return t

    def tail(self, n: int = 3) -> str:
        return " | ".join(text.strip() for _, text in self.pieces[-n:])


def step_of(text: str) -> int | None:
    """The step a printed line names ("step 12", "iter 12", "[12/60]", "12/60 ..."), or None."""
    m = _STEP.search(text)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def steps_per_second(streams: list[Stream]) -> tuple[float | None, int]:
    """(steps a second between the first and the last step printed, the steps seen)."""
    seen = sorted(
        (t, s) for st in streams for t, text in st.pieces if (s := step_of(text)) is not None
    )
    distinct = len({s for _, s in seen})
    if distinct < 2:
        return None, distinct
    first = min(seen, key=lambda x: (x[1], x[0]))
    last = max(seen, key=lambda x: (x[1], -x[0]))
    span, steps = last[0] - first[0], last[1] - first[1]
    if span < MIN_SPAN or steps <= 0:
        return None, distinct
    return steps / span, distinct


class Snapshot:
    """The files under ``roots`` but ``skip`` (size, mtime in ns), named by their path relative to
    the user's folder, or under another root by their absolute path without the leading ``/``."""

    def __init__(self, roots: list[Path], skip: list[Path]) -> None:
        self.roots = [r.resolve() for r in roots]
        self.skip = [p.resolve() for p in skip]
        self.where: dict[str, Path] = {}
        self.seen_dirs: set[Path] = set()
        self.files = self._scan()
        self.dirs = set(self.seen_dirs)  # the folders there before the run

    def _name(self, p: Path) -> str:
        home = self.roots[0]
        return str(p.relative_to(home)) if p.is_relative_to(home) else str(p).lstrip("/")

    def _scan(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for root in self.roots:
            if not root.is_dir():
                continue
            for here, dirs, files in os.walk(root):
                d = Path(here)
                self.seen_dirs.add(d)
                dirs[:] = [
                    x
                    for x in sorted(dirs)
                    if not x.startswith(".")
                    and x not in SKIP_DIRS
                    and not any((d / x).resolve() == s for s in self.skip)
                    and (d / x).resolve() not in self.roots[1:]  # scanned as its own root
                ]
                for name in sorted(files):
                    p = d / name
                    try:
                        st = p.stat()
                    except OSError:
                        continue
                    key = self._name(p)
                    out[key] = (st.st_size, st.st_mtime_ns)
                    self.where[key] = p
                    if len(out) >= MAX_FILES:
                        return out
        return out

    def changed(self) -> list[str]:
        """The files created or modified since the snapshot, by their names."""
        now = self._scan()
        return sorted(k for k, v in now.items() if self.files.get(k) != v)

    def keep(self, names: list[str], dest: Path) -> list[str]:
        """Take ``names`` into ``dest``: moved if the run made them, else copied; those left out."""
        left = []
        before = set(self.files)
        for name in names:
            src = self.where[name]
            try:
                if src.stat().st_size > MAX_BYTES:
                    left.append(f"{name} (over {MAX_BYTES >> 30} GiB)")
                    continue
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if name in before:
                    shutil.copy2(src, target)
                else:
                    shutil.move(src, target)
                    self._prune(src.parent)
            except OSError as exc:
                left.append(f"{name} ({exc.strerror or exc})")
        return left

    def _prune(self, d: Path) -> None:
        """Remove ``d`` and its parents while they are empty and were made by the run."""
        d = Path(os.path.abspath(d))
        while d not in self.dirs and not any(d == r for r in self.roots):
            try:
                d.rmdir()
            except OSError:  # not empty, or gone
                return
            d = d.parent

    def created(self, names: list[str]) -> list[str]:
        """Of ``names`` (``changed``'s), those the run created."""
        return [n for n in names if n not in self.files]


def path_of(name: str, roots: list[Path]) -> Path:
    """Where the file ``name`` (a ``Snapshot``'s name, over the same ``roots``) lies."""
    absolute = Path("/" + name)
    if any(absolute.is_relative_to(r.resolve()) for r in roots[1:]):
        return absolute
    return roots[0].resolve() / name


def put_back(names: list[str], kept: Path, roots: list[Path]) -> list[str]:
    """Copy ``names`` back from a run's ``files/`` where nothing lies now; those that failed."""
    failed = []
    for name in names:
        src, target = kept / name, path_of(name, roots)
        if not src.is_file() or target.exists():
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
        except OSError as exc:
            failed.append(f"{name} ({exc.strerror or exc})")
    return failed


def named_folders(command: list[str], cwd: Path) -> list[Path]:
    """The folders a command's arguments name outside ``cwd`` (``--out /scratch/run``), where
    they or their parents (a folder the run will make) exist."""
    out: list[Path] = []
    home = cwd.resolve()
    for arg in command[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if "/" not in value or value.startswith("-"):
            continue
        p = (cwd / value).resolve()
        if p.is_relative_to(home) or p.is_file() or p in out:
            continue
        if p.is_dir() or (p.parent.is_dir() and not p.suffix):
            out.append(p)
    return out
