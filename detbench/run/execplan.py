"""An exec run's options and its plan: every run in a balanced order (``orders``)."""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from detbench.core.errors import DetbenchError
from detbench.core.modes import Mode

EXEC_FILE = "exec.json"


class ExecError(DetbenchError):
    """A command ``exec`` cannot measure: one line, said before anything is overwritten."""


@dataclass
class ExecConfig:
    """An exec run's options (``detbench exec --help``)."""

    command: list[str]
    modes: list[Mode]
    out: Path
    replicates: int = 3
    timeout: float | None = None
    seed: int = 0
    census: bool = True
    cwd: Path = field(default_factory=Path.cwd)
    resume: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "modes": [asdict(m) for m in self.modes],
            "replicates": self.replicates,
            "timeout": self.timeout,
            "seed": self.seed,
            "census": self.census,
            "cwd": str(self.cwd),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], out: Path) -> ExecConfig:
        return cls(
            command=list(doc["command"]),
            modes=[Mode(**m) for m in doc["modes"]],
            out=out,
            replicates=int(doc["replicates"]),
            timeout=doc.get("timeout"),
            seed=int(doc.get("seed", 0)),
            census=bool(doc.get("census", True)),
            cwd=Path(doc["cwd"]),
            resume=True,
        )


def name_of(command: list[str]) -> str:
    """What the reports call the command: its first ``.py`` argument's name, else the program's."""
    script = next((a for a in command[1:] if a.endswith(".py")), None)
    return Path(script or command[0]).name


def script_of(command: list[str], cwd: Path) -> str | None:
    script = next((a for a in command[1:] if a.endswith(".py")), None)
    return str((cwd / script).resolve()) if script else None


@dataclass(frozen=True)
class RunSlot:
    """One run: its round, mode, copy and place in the round's order."""

    round: int
    mode: Mode
    copy: int
    position: int

    @property
    def key(self) -> str:
        return f"r{self.round}-{re.sub(r'[^A-Za-z0-9_.+=-]', '_', self.mode.name)}-c{self.copy}"


def plan(c: ExecConfig) -> list[RunSlot]:
    """Every run, round by round, in a balanced order (``orders``)."""
    base = c.modes[0]
    members = [(m, 0) for m in c.modes] + [(base, 1)]
    out = []
    for r, order in enumerate(orders(len(members), c.replicates, c.seed)):
        out += [RunSlot(r, members[i][0], members[i][1], p) for p, i in enumerate(order)]
    return out


def orders(members: int, rounds: int, seed: int) -> list[list[int]]:
    """Each round's order of the ``members``: in each block of ``members`` rounds every member
    takes every place once (a cyclic Latin square drawn from ``seed``), so a place that runs
    slower falls on every member alike, which shuffled orders do not do in 3 rounds."""
    out: list[list[int]] = []
    for block in range(-(-rounds // members)):
        rng = random.Random(f"{seed}-exec-{block}")
        labels = list(range(members))
        rng.shuffle(labels)
        rows = list(range(members))
        rng.shuffle(rows)
        for k in rows[: rounds - block * members]:
            out.append([labels[(p + k) % members] for p in range(members)])
    return out


def load_config(out: Path) -> ExecConfig:
    """``--resume``: the exec run in ``out``'s own options."""
    path = out / EXEC_FILE
    if not path.exists():
        raise ExecError(f"{out} holds no {EXEC_FILE}: not a detbench exec run, nothing to resume")
    return ExecConfig.from_json(json.loads(path.read_text())["config"], out)
