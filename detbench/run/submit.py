"""``detbench submit``: a run's shards, or one whole run per GPU type, as batch jobs through
submitit (Slurm, or submitit's local executor on this machine), gathered and merged when they end.

Each job runs the run API in its own process (``RunJob``) and names the job and node in its
records. A job that fails, times out or is preempted resumes its own directory when it starts
again: submitit requeues a job Slurm times out or preempts (``checkpoint``), and ``submit``
resubmits a failed one up to ``retries`` times. submitit is optional (``detbench[slurm]``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from detbench.core.errors import DetbenchError
from detbench.run.api import plan_run, run_planned
from detbench.run.config import RunConfig, resume_config
from detbench.store.results import JOB_ENV, RESULTS_FILE, iter_records, where

EXECUTORS = ("slurm", "local")
#: The folder under OUT that holds the jobs' own runs and submitit's files.
PARTS = "parts"


class SubmitError(DetbenchError):
    """A submission that cannot go ahead (one clear line)."""


def submitit_module() -> Any:
    try:
        import submitit
    except ImportError:
        raise SubmitError(
            "detbench submit needs submitit: pip install submitit (or "
            "pip install 'detbench[slurm]')"
        ) from None
    return submitit


class RunJob:
    """What one job runs: the run of ``config``, resumed where it holds records already.
    Checkpointable: submitit requeues it when Slurm times it out or preempts it."""

    def __call__(self, config: RunConfig) -> dict[str, Any]:
        job = _job_id()
        if job:
            os.environ[JOB_ENV] = job  # read by env.json's host facts and by every worker
        if (config.out / RESULTS_FILE).exists():
            config = resume_config(config.out)
        runner = plan_run(config)
        if not (config.resume and not runner.missing):
            run_planned(runner)
        records = sum(1 for _ in iter_records(config.out))
        return {"out": str(config.out), **where(), "records": records}

    def checkpoint(self, config: RunConfig) -> Any:
        return submitit_module().helpers.DelayedSubmission(self, config)


def _job_id() -> str | None:
    try:
        return str(submitit_module().JobEnvironment().job_id)
    except (RuntimeError, SubmitError, KeyError):
        return None  # not inside a submitit job


@dataclass
class Task:
    """One job of a submission: its name, its run, and its partition."""

    name: str
    config: RunConfig
    partition: str | None = None


@dataclass
class Outcome:
    """A job's fate: its attempts' ids, its final state and where it ran."""

    name: str
    out: Path
    job_ids: list[str] = field(default_factory=list)
    state: str = "PENDING"
    node: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "out": str(self.out)}

    def line(self) -> str:
        jobs = ", then ".join(self.job_ids)
        text = f"{self.name}: {self.state} (job {jobs}" + (
            f", node {self.node})" if self.node else ")"
        )
        return text + (f": {self.error}" if self.error else "")


def tasks(config: RunConfig, shards: int | None, partitions: Sequence[str] | None) -> list[Task]:
    """The jobs of a submission of ``config``: its shards, or one whole run per partition,
    each writing under ``OUT/parts/`` (``out`` takes the merged run)."""
    parts = config.out / PARTS
    if partitions:
        if len(set(partitions)) < len(partitions):
            raise SubmitError("a partition is named twice")
        return [Task(f"partition {p}", replace(config, out=parts / p), p) for p in partitions]
    n = shards or 1
    if n < 2:
        raise SubmitError(
            "give --shards N (N >= 2) to split the run, or --partition P1,P2 for "
            "one run per GPU type"
        )
    return [
        Task(f"shard {k}/{n}", replace(config, out=parts / f"shard-{k}-of-{n}", shard=(k, n)))
        for k in range(1, n + 1)
    ]


def executor(kind: str, folder: Path, params: Mapping[str, Any]) -> Any:
    """submitit's executor for ``kind``, ``params`` passed through (``slurm_`` ones: Slurm only)."""
    submitit = submitit_module()
    if kind not in EXECUTORS:
        raise SubmitError(f"unknown --executor {kind!r}; use {' or '.join(EXECUTORS)}")
    try:
        ex = submitit.AutoExecutor(folder=folder, cluster=kind)
        given = {k: v for k, v in params.items() if v is not None}
        ex.update_parameters(name="detbench", **given)
    except (AssertionError, ValueError, RuntimeError) as exc:  # submitit's word on the options
        raise SubmitError(f"submitit refused the {kind} executor's options: {exc}") from None
    return ex


def launch(kind: str, todo: Sequence[Task], folder: Path, params: Mapping[str, Any]) -> list[Any]:
    """Submit ``todo``: shards as one job array, runs per partition one job each; the jobs."""
    if todo and todo[0].partition is None:
        ex = executor(kind, folder, params)
        return list(ex.map_array(RunJob(), [t.config for t in todo]))
    jobs = []
    for t in todo:
        ex = executor(kind, folder, {**params, "slurm_partition": t.partition})
        jobs.append(ex.submit(RunJob(), t.config))
    return jobs


def wait(
    jobs: Sequence[Any], outcomes: Sequence[Outcome], stream: TextIO, poll: float = 5.0
) -> list[int]:
    """Wait for ``jobs`` to end, report each as it does; the indices of those that failed."""
    left = dict(enumerate(jobs))
    failed = []
    while left:
        for i, job in list(left.items()):
            vanished = not job.done() and _vanished(job)
            if not (vanished or job.done()):
                continue
            del left[i]
            o = outcomes[i]
            try:
                if vanished:
                    raise SubmitError(
                        "the job left Slurm's queue without a result (no accounting here to "
                        "say why: see its log in submitit/)"
                    )
                result = job.result()
                o.state, o.node, o.error = "COMPLETED", result.get("node"), None
            except Exception as exc:  # the job's own failure, or one submitit saw
                o.state = str(getattr(job, "state", "") or "FAILED")
                o.state = "FAILED" if o.state in ("UNKNOWN", "COMPLETED", "FINISHED") else o.state
                said = str(exc).strip()
                o.error = said.splitlines()[-1][:300] if said else type(exc).__name__
                failed.append(i)
            print(f"detbench submit: {o.line()}", file=stream)
        if left:
            time.sleep(poll)
    return failed


def _vanished(job: Any) -> bool:
    """A Slurm job that left the queue without a result on a cluster without accounting
    storage (``sacct``): submitit would wait for it for ever."""
    if type(job).__name__ != "SlurmJob" or job.state != "UNKNOWN":
        return False
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job.job_id)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and not out.stdout.strip() and not job.paths.result_pickle.exists()


def submit(
    kind: str,
    todo: Sequence[Task],
    params: Mapping[str, Any],
    retries: int = 1,
    stream: TextIO = sys.stderr,
    poll: float = 5.0,
) -> list[Outcome]:
    """Submit ``todo``, wait, and resubmit failed jobs (they resume) up to ``retries`` times."""
    if not todo:
        return []
    folder = todo[0].config.out.parent / "submitit"
    outcomes = [Outcome(t.name, t.config.out) for t in todo]
    pending = list(range(len(todo)))
    for attempt in range(retries + 1):
        jobs = launch(kind, [todo[i] for i in pending], folder, params)
        for i, job in zip(pending, jobs, strict=True):
            outcomes[i].job_ids.append(str(job.job_id))
            outcomes[i].state = "SUBMITTED"
        print(
            f"detbench submit: {len(jobs)} job(s) through {kind}: "
            + ", ".join(
                f"{outcomes[i].name} = {job.job_id}" for i, job in zip(pending, jobs, strict=True)
            ),
            file=stream,
        )
        failed = wait(jobs, [outcomes[i] for i in pending], stream, poll)
        pending = [pending[i] for i in failed]
        if not pending:
            break
        if attempt < retries:
            print(f"detbench submit: resubmitting {len(pending)} job(s) with --resume", file=stream)
    return outcomes
