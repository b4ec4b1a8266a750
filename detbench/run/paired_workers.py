"""The processes of a paired group's workers (``run/paired.py``), one per member for a
replicate, and the messages that wait on them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.core.modes import Mode
from detbench.run.supervise import TIMEOUT, Crew, log_tail
from detbench.worker.protocol import exit_description

if TYPE_CHECKING:
    from detbench.run.paired import Member, PairedStats


class GroupWorkers:
    """A replicate's workers, one per ``Member``. ``on_verdict``: where a verdict record sent
    before the message asked for goes; ``on_ready``: told each worker's ready message."""

    def __init__(
        self,
        out: Path,
        python: str,
        crew: Crew,
        job_for: Callable[[Mode, int], dict[str, Any]],
        env_for: Callable[[Mode], dict[str, str]],
        startup_timeout: float,
        timeout: Any,
        stats: PairedStats,
        on_verdict: Callable[[dict[str, Any]], None],
        tag: str = "",
    ) -> None:
        self.out = out
        self.python = python
        self.crew = crew
        self.job_for = job_for
        self.env_for = env_for
        self.startup_timeout = startup_timeout
        self.timeout = timeout
        self.stats = stats
        self.on_verdict = on_verdict
        self.tag = tag  # in its workers' log names: the device's, where several time groups
        self.on_ready: Callable[[dict[str, Any]], None] | None = None
        self.failed_starts = 0  # groups in a row none of whose workers started

    def spawn(self, member: Member, replicate: int) -> None:
        job = {**self.job_for(member.mode, replicate), "copy": member.copy}
        env = self.env_for(member.mode)
        name = f"r{replicate}-{member.mode.name}-timing{member.copy}{self.tag}.log"
        member.worker = self.crew.spawn(self.python, job, env, self.out / "logs" / name)
        self.stats.workers += 1

    def start(self, members: list[Member], replicate: int) -> None:
        t0 = time.perf_counter()
        for m in members:
            self.spawn(m, replicate)
        for m in members:
            self.ready(m)
        self.stats.startup += time.perf_counter() - t0
        none = all(m.worker is None for m in members)
        self.failed_starts = self.failed_starts + 1 if none else 0

    def ready(self, m: Member) -> None:
        assert m.worker is not None
        m.worker.release()
        msg = m.worker.ready(self.startup_timeout)
        if msg is TIMEOUT:
            self.lose(m, f"did not start within {self.startup_timeout:g} s", "timeout")
        elif msg is None or msg.get("type") != "ready":
            self.lose(m, "did not start")
        else:
            if self.on_ready is not None:
                self.on_ready(msg)
            m.worker.send("go")

    def lose(self, m: Member, what: str, status: str = "crashed") -> None:
        """``m``'s worker is gone (crashed, or silent): killed and reaped."""
        if m.worker is not None:
            m.worker.kill()
            code = self.crew.finish(m.worker)
            status, why = lost_words(what, code, self.timeout, status)
            m.exit_code = code
            m.failure = (status, f"{why}; log: {log_tail(m.worker.log)}")
            m.worker = None

    def end(self, members: list[Member], kill: bool = False) -> None:
        """The members' workers told to exit and reaped; ``kill``: killed instead (a worker
        held in its start-up, or busy, would keep a Ctrl-C waiting 60 s for each)."""
        for m in members:
            if m.worker is not None and kill:
                m.worker.kill()
            elif m.worker is not None:
                m.worker.send("exit")
        for m in members:
            if m.worker is not None:
                self.crew.finish(m.worker)
                m.worker = None

    def ask(self, m: Member, line: str, kind: str) -> dict[str, Any] | None:
        """Send ``line`` to ``m``'s worker and ``wait`` for its message of type ``kind``."""
        assert m.worker is not None
        m.worker.send(line)
        return self.wait(m, kind)

    def wait(self, m: Member, kind: str) -> dict[str, Any] | None:
        """``m``'s next message of type ``kind``, the records before it stored; None (the worker
        lost) where it exits or stays silent past ``--timeout``."""
        assert m.worker is not None
        msg = m.worker.answer(self.timeout, self.on_verdict)
        if msg is None or msg is TIMEOUT or msg.get("type") != kind:
            self.lose(m, "ended" if msg is None else "was silent" if msg is TIMEOUT else "erred")
            return None
        return msg


def lost_words(what: str, code: int | None, timeout: Any, status: str) -> tuple[str, str]:
    """(status, why) of a member whose worker ``what`` ("was silent", "ended", ...), in a verdict
    worker's words (``supervise.ending``)."""
    if what == "was silent":
        return "timeout", f"exceeded the --timeout of {timeout:g} s; worker killed"
    if what == "ended":
        return status, f"worker {exit_description(code)} while running this workload"
    return status, f"the worker {what} ({exit_description(code)})"
