"""``detbench locate -- COMMAND``: the op, the module and the line of the user's code where two
fresh runs of an unchanged script first part. The command runs as ``detbench exec`` runs it
(``run.execrun``), under the recorder (``locate.census.start_recorder``). The streams of
``replicates`` runs, and more up to ``until`` while they agree, are compared as a workload's
(``stages.conclude``). The runs keep nothing but their recording: the files the script writes are
``exec``'s to compare.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from detbench.core.modes import get_mode
from detbench.locate.culprits import same_bits
from detbench.locate.stages import Located, LocateError, check_replicates, conclude
from detbench.run.execplan import ExecConfig, ExecError, RunSlot, name_of
from detbench.run.execrun import ExecRunner


def locate_command(
    command: list[str],
    mode: str = "default",
    replicates: int = 2,
    until: int = 4,
    timeout: float | None = None,
    stream: TextIO = sys.stderr,
) -> Located:
    """Where two fresh runs of ``command`` first part."""
    check_replicates(replicates)
    m = get_mode(mode)
    with tempfile.TemporaryDirectory(prefix="detbench-locate-") as tmp:
        c = ExecConfig(command=list(command), modes=[m], out=Path(tmp) / "run", timeout=timeout)
        runner = ExecRunner(c, stream)
        try:
            runner.check()
        except ExecError as exc:
            raise LocateError(str(exc)) from None
        runner.prepare()
        streams: list[dict[str, Any]] = []
        device = "cpu"
        try:
            for i in range(max(until, replicates)):
                if i >= replicates and not all(
                    same_bits(streams[0]["ops"], s["ops"]) for s in streams[1:]
                ):
                    break
                stream.write(f"locate: run {i + 1} of {name_of(command)} under the recorder\n")
                facts = runner.one(RunSlot(i, m, 0, 0), census=False, folder=f"rec{i}", record=True)
                boot = facts.get("boot") or {}
                if facts["status"] != "ok" or "recording" not in boot:
                    tail = facts.get("stderr_tail") or "no output"
                    raise LocateError(
                        f"the command failed under the recorder ({facts['status']}): {tail}"
                    )
                device = str(boot.get("device") or "cpu")
                streams.append(boot["recording"])
        finally:
            runner.leave_folder()  # the user's folder as after one run, before tmp goes
        loc = conclude(name_of(command), m, streams, device)
        if loc.reproducible is not None:  # a script has no step outputs: its ops say it all
            loc.outputs_reproducible = None
            loc.reproducible = loc.ops_reproducible
        return loc
