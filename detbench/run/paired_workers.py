"""The workers of a paired group (``run/paired.py``): spawned all at once for a replicate, each
released and started, one lost where it crashes or stays silent, all ended when the replicate's
workloads are done. ``PairedPhase`` is a ``GroupWorkers``: what its groups do with the workers
(prepare, rounds, finish) is its own."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detbench.core.modes import Mode
from detbench.run.paired_members import Member, PairedStats, lost_words
from detbench.run.supervise import TIMEOUT, Crew, log_tail

#: The job's kind for a timing worker of the paired phase.
PAIR_KIND = "detbench.run.child:pair"


class GroupWorkers:
    """A replicate's workers, one per ``Member``: the attributes ``PairedPhase`` sets."""

    out: Path
    python: str
    crew: Crew
    job_for: Callable[[Mode, int], dict[str, Any]]
    env_for: Callable[[Mode], dict[str, str]]
    startup_timeout: float
    timeout: Any
    stats: PairedStats
    failed_starts: int
    on_ready: Callable[[dict[str, Any]], None] | None

    def _spawn(self, member: Member, replicate: int) -> None:
        job = {**self.job_for(member.mode, replicate), "copy": member.copy}
        env = self.env_for(member.mode)
        log = self.out / "logs" / f"r{replicate}-{member.mode.name}-timing{member.copy}.log"
        member.worker = self.crew.spawn(self.python, job, env, log, kind=PAIR_KIND)
        self.stats.workers += 1

    def _start(self, members: list[Member], replicate: int) -> None:
        """Spawn the group's workers all at once, let them all initialise, wait until each is
        ready, and start them."""
        t0 = time.perf_counter()
        for m in members:
            self._spawn(m, replicate)
        for m in members:
            self._ready(m)
        self.stats.startup += time.perf_counter() - t0
        none = all(m.worker is None for m in members)  # a broken install or GPU
        self.failed_starts = self.failed_starts + 1 if none else 0

    def _ready(self, m: Member) -> None:
        assert m.worker is not None
        m.worker.release()
        msg = m.worker.ready(self.startup_timeout)
        if msg is TIMEOUT:
            self._lose(m, f"did not start within {self.startup_timeout:g} s", "timeout")
        elif msg is None or msg.get("type") != "ready":
            self._lose(m, "did not start")
        else:
            if self.on_ready is not None:
                self.on_ready(msg)
            m.worker.send("go")

    def _lose(self, m: Member, what: str, status: str = "crashed") -> None:
        """``m``'s worker is gone (crashed, or silent past its limit): killed and reaped."""
        if m.worker is not None:
            m.worker.kill()
            code = self.crew.finish(m.worker)
            status, why = lost_words(what, code, self.timeout, status)
            m.exit_code = code
            m.failure = (status, f"{why}; log: {log_tail(m.worker.log)}")
            m.worker = None

    def _end(self, members: list[Member]) -> None:
        for m in members:
            if m.worker is not None:
                m.worker.send("exit")
        for m in members:
            if m.worker is not None:
                self.crew.finish(m.worker)
                m.worker = None

    def _ask(self, m: Member, line: str, kind: str) -> dict[str, Any] | None:
        """Send ``line`` to ``m``'s worker and wait for its message of type ``kind`` (a
        ``record`` message before it is stored at once); None (the worker lost) where it exits
        or stays silent past the run's ``--timeout``."""
        assert m.worker is not None
        m.worker.send(line)
        return self._wait(m, kind)

    def _wait(self, m: Member, kind: str) -> dict[str, Any] | None:
        """``_ask``'s wait: ``m``'s next message of type ``kind``, the records before it stored."""
        assert m.worker is not None
        while True:
            msg = m.worker.next(self.timeout)
            if msg is not None and msg is not TIMEOUT and msg.get("type") == "record":
                self._verdict(msg["record"])
                continue
            break
        if msg is None or msg is TIMEOUT or msg.get("type") != kind:
            self._lose(m, "ended" if msg is None else "was silent" if msg is TIMEOUT else "erred")
            return None
        return msg

    def _verdict(self, rec: dict[str, Any]) -> None:
        """A verdict record a worker sent before the message asked for: stored at once."""
        raise NotImplementedError
