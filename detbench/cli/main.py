"""``detbench``: a thin front over the library. A user error is one line and exit status 2. The
commands that show what there is are here; the others (``cli.commands``) load once named."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from detbench.cli.parser import build_parser
from detbench.core.errors import DetbenchError
from detbench.core.modes import MODES
from detbench.core.settings import MODE_FLAGS, SETTINGS
from detbench.core.torchstate import onoff
from detbench.run.config import RunConfig, resolve_sources


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _cmd_modes(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([m.to_json() for m in MODES], indent=2))
        return 0
    header = ("name", "cudnn.benchmark", "cudnn.deterministic", "det. algorithms", "cudnn.enabled")
    _table([header] + [(m.name, *(onoff(getattr(m, f)) for f in MODE_FLAGS)) for m in MODES])
    print("\n'detbench modes --json' gives each mode's Python snippet.")
    return 0


def _cmd_settings(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([s.to_json() for s in SETTINGS], indent=2))
        return 0
    rows = [("name", "levels", "default here", "acts on")]
    for s in SETTINGS:
        reason = s.unavailable()
        default = s.default() if reason is None else "unavailable in this torch"
        rows.append((s.name, " | ".join(s.levels), default, ", ".join(s.devices)))
    _table(rows)
    print(
        "\nApply one to every mode of a run with 'detbench run --set NAME=LEVEL' (repeatable);"
        "\n'detbench settings --json' gives what each does."
    )
    return 0


def _load(args: argparse.Namespace) -> list:
    config = RunConfig(
        out=Path("."),
        suites=args.suite or [],
        workload_files=[Path(f) for f in args.workload or []],
    )
    return resolve_sources(config)[1]


def _cmd_list(args: argparse.Namespace) -> int:
    workloads = _load(args)
    if args.json:
        rows = [
            {
                "suite": w.suite,
                "workload": w.name,
                "params": w.params_for(args.profile),
                "source": w.source,
                # what the settings act on: autocast=... runs it, sdpa_backend matters
                "autocast": getattr(w, "autocast", False),
                "attention": getattr(w, "attention", False),
            }
            for w in workloads
        ]
        print(json.dumps(rows, indent=2, default=str))
        return 0
    width = max(len(w.key) for w in workloads)
    for w in workloads:
        params = ", ".join(f"{k}={v}" for k, v in w.params_for(args.profile).items())
        print(f"{w.key:<{width}}  {params}")
    return 0


#: The commands that show what there is: they load no run, analysis or report module.
SHOW: dict[str, Callable[[argparse.Namespace], int]] = {
    "modes": _cmd_modes,
    "settings": _cmd_settings,
    "list": _cmd_list,
}


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of subcommand ``name``."""
    if name in SHOW:
        return SHOW[name]
    # torch, pandas, matplotlib, the runner and the report: only for a command that uses them.
    from detbench.cli.commands import COMMANDS

    return COMMANDS[name]


#: The commands that take a user's command after ``--`` (``args.command_line``).
TAKE_COMMAND = ("exec", "locate")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command_line: list[str] = []
    if argv and argv[0] in TAKE_COMMAND and "--" in argv:
        at = argv.index("--")
        argv, command_line = argv[:at], argv[at + 1 :]
    args = build_parser().parse_args(argv)
    args.command_line = command_line
    try:
        code: int = command(args.command)(args)
        return code
    except DetbenchError as exc:
        print(f"detbench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
