"""The options that ``run`` and ``attribute`` share, and how they become a ``RunConfig``: the
only place an ``argparse.Namespace`` turns into the library's plain arguments."""

from __future__ import annotations

import argparse
from pathlib import Path

from detbench.core.errors import DetbenchError
from detbench.core.modes import MODES, Mode, get_mode
from detbench.core.settings import Overrides, parse_assignments
from detbench.core.workload import check_file
from detbench.run.config import (
    DEFAULT_TIMEOUT,
    STARTUP_TIMEOUT,
    RunConfig,
    check_options,
    parse_devices,
    resume_config,
)
from detbench.run.schedule import parse_shard
from detbench.store.outdir import refuse_used
from detbench.store.results import stamped_dir


class UserError(DetbenchError):
    """Bad input: printed as one line, exit status 2."""


#: ``run`` options that choose what a run measures: a resumed run takes them from its env.json.
RUN_OPTIONS = (
    "suite",
    "workload",
    "only",
    "mode",
    "replicates",
    "profile",
    "device",
    "out",
    "seed",
    "budget",
    "timeout",
    "fingerprint",
    "startup_timeout",
    "set",
    "devices",
    "shard",
    "cudnn_log",
    "rounds",
    "reference_check",
)

#: ``run --cudnn-log`` and ``gpu-check --cudnn-log``.
CUDNN_LOG_HELP = (
    "record which cuDNN engine each convolution ran in each process, read from cuDNN's API log "
    "(a file per worker under DIR/logs, about 13 KB per cuDNN execution); the log slows every "
    "cuDNN call (a short conv step took 3x as long on an H100) and can change what "
    "cudnn.benchmark picks, so such a run's timings are not costs (off by default)"
)


def cuda_here() -> bool:
    """Whether torch sees a CUDA GPU here (imports torch: 1.3 s, so only where asked)."""
    import torch

    return bool(torch.cuda.is_available())


def run_config(args: argparse.Namespace, cuda: bool | None = None) -> RunConfig:
    """The run the options ask for (``--resume``: the run in DIR, with its own options).
    ``cuda``: whether a GPU is here; None: ask torch only where no device is named."""
    if args.resume is not None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in RUN_OPTIONS
            if getattr(args, name, None) is not None
        ]
        if given:
            raise UserError(
                f"--resume continues a run with its own options; give no {given[0]} with it"
            )
        return resume_config(Path(args.resume))
    devices = parse_devices(args.devices) if args.devices is not None else None
    kind = devices[0].split(":")[0] if devices else None
    if kind is not None and args.device is not None and args.device != kind:
        raise UserError(
            f"--devices {args.devices} runs on {kind}, but --device {args.device} says otherwise"
        )
    device = args.device or kind
    if device is None:  # the default: a GPU where torch sees one
        device = "cuda" if (cuda_here() if cuda is None else cuda) else "cpu"
    profile = args.profile or ("full" if device == "cuda" else "quick")
    modes, overrides = modes_of(args.mode or [m.name for m in MODES], args.set)
    for f in args.workload or []:
        check_file(f)  # a missing file: one line, before torch loads
    out = Path(args.out) if args.out else stamped_dir(f"{device}-{profile}")
    refuse_used(out)  # now, before anything is probed or planned
    config = RunConfig(
        out=out,
        suites=args.suite or [],
        workload_files=[Path(f) for f in args.workload or []],
        modes=modes,
        replicates=3 if args.replicates is None else args.replicates,
        profile=profile,
        device=device,
        seed=args.seed if args.seed is not None else 0,
        budget=args.budget,
        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
        fingerprint=args.fingerprint,
        startup_timeout=STARTUP_TIMEOUT if args.startup_timeout is None else args.startup_timeout,
        only=args.only,
        settings=dict(overrides),
        devices=devices,
        shard=parse_shard(args.shard) if args.shard is not None else None,
        cudnn_log=bool(getattr(args, "cudnn_log", None)),
        rounds=getattr(args, "rounds", None),
        reference_check=getattr(args, "reference_check", None) or 0.0,
    )
    check_options(config)  # before torch and the workloads load: a mistake is one line at once
    return config


def modes_of(names: list[str], assignments: list[str] | None) -> tuple[list[Mode], Overrides]:
    """The modes ``--mode`` names, each with every ``--set``; a mode given twice is refused."""
    overrides = parse_assignments(assignments or [])
    modes = [get_mode(n).with_settings(overrides) if overrides else get_mode(n) for n in names]
    if len({m.name for m in modes}) != len(modes):
        raise UserError("a --mode is given twice")
    return modes, overrides


def existing_dir(path: str) -> Path:
    d = Path(path)
    if not d.is_dir():
        raise UserError(f"no such results directory: {path}")
    return d


def selection(q: argparse.ArgumentParser) -> None:
    q.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="a built-in suite (repeatable; default: the device's matrix, which the plan "
        "names; all: every suite)",
    )
    q.add_argument(
        "--workload",
        action="append",
        metavar="FILE.py",
        help="a file of @detbench.workload functions (repeatable); alone, it "
        "replaces the built-in suites, with --suite it runs beside them",
    )


def mode_options(q: argparse.ArgumentParser) -> None:
    """The modes of a run and the settings applied to every one: ``run``'s and ``submit``'s."""
    q.add_argument(
        "--mode",
        action="append",
        metavar="NAME",
        help="a mode from 'detbench modes' (repeatable; default: all 10)",
    )
    q.add_argument(
        "--set",
        action="append",
        metavar="NAME=LEVEL",
        help="a setting from 'detbench settings' applied to every mode of the run (repeatable), "
        "e.g. --set fill_uninitialized_memory=off; the modes' names then carry it",
    )


def run_options(q: argparse.ArgumentParser) -> None:
    """The options of a run that `run` and `attribute` share."""
    selection(q)
    q.add_argument(
        "--replicates",
        type=int,
        metavar="N",
        help="fresh processes per mode (default: 3, at least 2)",
    )
    q.add_argument(
        "--profile",
        choices=("quick", "full"),
        help="workload sizes (default: full on cuda, quick on cpu)",
    )
    q.add_argument(
        "--device", choices=("cpu", "cuda"), help="default: cuda when a GPU is present, else cpu"
    )
    q.add_argument(
        "--devices",
        metavar="LIST",
        help="run workers side by side, one per device at a time: GPUs (cuda:0,cuda:1,...) or "
        "cpu entries (cpu,cpu: two CPU workers, each with its share of the cores); replicates "
        "of a mode spread over the devices, and records say where each ran (device_name)",
    )
    q.add_argument("--out", metavar="DIR", help="results directory (default: results/STAMP-...)")
    q.add_argument("--seed", type=int, help="the seed of every generator (default 0)")
    _timing_options(q)
    _course_options(q)


def _timing_options(q: argparse.ArgumentParser) -> None:
    """How a run times its costs: paired, every replicate's modes side by side."""
    q.add_argument(
        "--budget",
        "--min-run-time",
        dest="budget",
        type=float,
        metavar="SECONDS",
        help="the most seconds of a record's warm-up before its paired rounds, and half the "
        "rounds' seconds at most: it stops sooner once the step time settles, within 0.5%% "
        "(GPU) or 1.5%% (CPU) (default: 0.1 quick, 0.3 full)",
    )
    q.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="the paired timing's rounds per workload and replicate, each mode one block a "
        "round (default: 12 quick, 10 full)",
    )
    q.add_argument(
        "--reference-check",
        type=float,
        metavar="SECONDS",
        help="check the paired timing against a reference timer: after each round every worker "
        "also times its step for about SECONDS with torch.utils.benchmark (CUDA events on a "
        "GPU), alternating with the blocks; tools/steady_check.py DIR prints the two side by side",
    )


def _course_options(q: argparse.ArgumentParser) -> None:
    """How a run starts, is cut, resumed and ends."""
    q.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="kill a workload's worker after this long (default: 900)",
    )
    q.add_argument(
        "--startup-timeout",
        type=float,
        metavar="SECONDS",
        help="kill a worker that is not ready this long after its turn came: imports, CUDA "
        "initialisation (default: 300); two in a row stop the run",
    )
    q.add_argument(
        "--fingerprint",
        choices=("device", "sha256", "both"),
        help="how outputs are hashed: an integer digest on the device (default on cuda), "
        "sha256 on the host (default on cpu), or both (each record then carries both, to check "
        "one by the other)",
    )
    q.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (records, workers, estimated seconds) and write nothing",
    )
    q.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    q.add_argument(
        "--only",
        action="append",
        metavar="SUITE/NAME",
        help="run only this workload of the selection (repeatable; see 'detbench list')",
    )
    q.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the interrupted run in DIR with its own options, measuring only what "
        "has no record yet; refused if the GPU, driver, CUDA, cuDNN or torch changed",
    )
    q.add_argument(
        "--shard",
        metavar="K/N",
        help="run only shard K of N of the plan: whole (workload, replicate) groups, every mode "
        "of one timed side by side, dealt the same way on every machine; 'detbench merge' "
        "joins the N shards into one run",
    )
    q.add_argument(
        "--no-report", action="store_true", help="do not write report.md and report.html at the end"
    )
