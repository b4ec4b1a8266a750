"""A single-node Slurm cluster for the tests, from Debian's packages (``munge``, ``slurmctld``,
``slurmd``), started as root in a temporary directory and stopped after: its own munge key and
socket, its own slurm.conf (``SLURM_CONF``), one node with this host's CPUs and one partition.
``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none`` need no cgroup setup, and with
no accounting storage submitit learns that a job ended from its result file.

``why_not()`` says why no cluster can start here (not root, a package missing); the tests skip
with that reason. Every daemon started is stopped by its own pid, so none outlives the tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")
PARTITION = "detbench"
START_TIMEOUT = 60.0  # seconds: the node is usually idle within 5


def why_not() -> str | None:
    """Why a single-node Slurm cannot start here, or None."""
    if os.geteuid() != 0:
        return "starting Slurm's daemons needs root"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return (f"Slurm is not installed here ({', '.join(missing)} missing): apt-get install "
                "munge slurmctld slurmd")  # fmt: skip
    return None


def _conf(d: Path, host: str) -> str:
    return "\n".join([
        "ClusterName=detbench", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={d / 'munge.socket'}",
        "CredType=cred/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "MpiDefault=none", "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
        f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d / 'slurmd.log'}",
        "SlurmctldPort=46817", "SlurmdPort=46818",
        f"NodeName={host} CPUs={os.cpu_count() or 1} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"  # fmt: skip


def _stop(pid_file: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)  # raises once it is gone
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def single_node_slurm(d: Path) -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd under ``d``; yield the environment variables a client
    needs (``SLURM_CONF``); stop the daemons at the end."""
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, host))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pids = [d / "munged.pid", d / "slurmctld.pid", d / "slurmd.pid"]
    try:
        subprocess.run(
            ["munged", "--force", f"--key-file={key}", f"--socket={d / 'munge.socket'}",
             f"--pid-file={pids[0]}", f"--log-file={d / 'munged.log'}",
             f"--seed-file={d / 'munged.seed'}"], check=True, env=env, timeout=30,
        )  # fmt: skip
        subprocess.run(["slurmctld", "-c", "-f", str(conf)], check=True, env=env, timeout=30)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env, timeout=30)
        deadline = time.monotonic() + START_TIMEOUT
        state = ""
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                                 env=env, timeout=30)  # fmt: skip
            state = out.stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            log = (d / "slurmctld.log").read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the Slurm node is not idle after {START_TIMEOUT:.0f} s "
                               f"({state!r}); slurmctld.log: {log}")  # fmt: skip
        yield {"SLURM_CONF": str(conf)}
    finally:
        for pid_file in reversed(pids):
            _stop(pid_file)
