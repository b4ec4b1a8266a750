"""A run's options (``RunConfig``), its profiles' defaults, the workloads it selects, the options
of a run to resume, and the checks that refuse bad input before anything is written."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detbench.core.errors import DetbenchError
from detbench.core.modes import CUBLAS_ENV, MODES, Mode, get_mode
from detbench.core.workload import Workload, builtin_suite_files, load_file, suites_dir
from detbench.run.hostspeed import cores as host_cores
from detbench.store.identity import SOURCES_KEY, source_digest
from detbench.store.results import ENV_FILE, iter_records, load_env
from detbench.worker.protocol import DEFAULT_TIMEOUT

#: Per-profile defaults. ``budget``: the most seconds of a record's warm-up (half the rounds'
#: seconds at most); the paired phase has ``rounds`` blocks of about ``block_seconds`` each.
PROFILE_DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": dict(fingerprint_steps=3, warmup_steps=2, budget=0.1, rounds=12, block_seconds=0.008),
    "full": dict(fingerprint_steps=3, warmup_steps=5, budget=0.3, rounds=10, block_seconds=0.01),
}
#: Costs timed with each replicate's modes side by side, taking turns one block at a time
#: (``detbench.run.paired``); older "separate" runs are read but not resumed (``resume_config``).
PAIRED = "paired"
#: No cost timed, no paired phase: verdicts only (``detbench audit``; not a ``run`` option).
VERDICTS_ONLY = "none"
#: The 95% interval of the median a step's samples aim for: +-1% on a GPU, whose kernel times
#: are stable, +-3% on a CPU, whose shared cores are not; a warm-up settles within half of it.
TARGET_REL = {"cuda": 0.01, "cpu": 0.03}
#: The fewest samples with a 95% interval of the median (with 5, [min, max] covers 93.75%).
MIN_SAMPLES = 6
#: Seconds a worker may take from its turn to ``ready`` (imports, CUDA initialisation).
STARTUP_TIMEOUT = 300.0
#: --fingerprint: the digest on the device, sha256 on the host, or both (to check one by the other).
FINGERPRINTS = ("device", "sha256", "both")


#: The built-in suites a device's default matrix leaves out (``--suite NAME`` adds one, ``--suite
#: all`` takes all): on CUDA every suite would not fit 15 minutes of one H100, so the matrix is
#: the five mission suites (docs/gpu-session.md, "The 15-minute matrix").
MATRIX_OPT_IN: dict[str, dict[str, str]] = {
    "cuda": {
        "ops": "a catalogue of single ops, more records than the matrix itself",
        "invariance": "batch invariance: a batch-size pass per record, host-bound decoders",
        "recipes": "seeding recipes, whose verdicts the four flags do not change",
        "distributed": "a torchrun launch per worker, 18 s each on the H100; on one GPU a world "
        "of one rank, whose collectives run no algorithm",
        "models": "Transformers and torchvision models at their published sizes: 15 minutes "
        "on their own on one H100 (a paper estimate from their FLOPs; docs/models.md)",
    },
}
ALL_SUITES = "all"


#: The facts that must not change between a run and its resumption, with the words for them.
RESUME_FACTS = {
    "device": "the device",
    "gpu": "the GPU",
    "driver": "the NVIDIA driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "torch": "torch",
}


class RunError(DetbenchError):
    """A run that cannot start as asked (one clear line for the user)."""


def refuse_changed(
    out: Path,
    before: dict[str, str | None],
    now: dict[str, str | None],
    here: dict[str, Any],
    measured: bool,
) -> None:
    """Refuse to resume ``out`` where a fact that decides results differs from this host's."""
    for key, word in RESUME_FACTS.items():
        if key in ("device", "gpu", "cudnn") and not here.get("worker"):
            continue  # known once the first worker has started
        if before[key] is None and not measured:
            continue  # stopped before its first worker was ready: no host recorded, nothing run
        if before[key] != now[key]:
            raise RunError(
                f"refusing to resume {out}: {word} differs: {before[key]} (the run) vs "
                f"{now[key]} (here); start a new run instead"
            )


@dataclass
class RunConfig:
    out: Path
    suites: list[str] = field(default_factory=list)
    workload_files: list[Path] = field(default_factory=list)
    modes: list[Mode] = field(default_factory=lambda: list(MODES))
    replicates: int = 3
    profile: str = "quick"
    device: str = "cpu"
    seed: int = 0
    fingerprint_steps: int | None = None
    warmup_steps: int | None = None
    #: Seconds of timing samples per record at most (None: the profile's).
    budget: float | None = None
    timeout: float | None = DEFAULT_TIMEOUT
    startup_timeout: float = STARTUP_TIMEOUT
    #: ``FINGERPRINTS``; None: the device digest on a GPU (no copy to the host), sha256 on a CPU,
    #: where it is faster (benchmarks/test_digest_speed.py).
    fingerprint: str | None = None
    python: str = sys.executable
    #: Only these workloads (``suite/name``), in this order; None: every selected workload.
    only: list[str] | None = None
    #: Continue the run in ``out``: measure only what has no record yet.
    resume: bool = False
    #: The ``--set`` overrides the modes carry (for env.json; the modes already hold them).
    settings: dict[str, str] = field(default_factory=dict)
    #: Mode name -> the only workload keys that mode runs; a mode not named runs them all.
    only_for: dict[str, list[str]] | None = None
    #: The study this run is part of (an attribution study's definition), written to env.json.
    study: dict[str, Any] | None = None
    #: ``--devices`` (``parse_devices``): one worker per device at a time, in parallel; None:
    #: one worker at a time on ``device``.
    devices: list[str] | None = None
    #: ``--shard K/N``: only the (workload, replicate) groups of shard K (``schedule``).
    shard: tuple[int, int] | None = None
    #: ``--cudnn-log``: cuDNN's API log on, each record names its engines; timings are not costs.
    cudnn_log: bool = False
    #: None: costs timed paired; ``VERDICTS_ONLY``: none timed (``detbench audit``).
    timing: str | None = None
    #: ``--rounds``: the paired phase's rounds per (workload, replicate) (None: the profile's).
    rounds: int | None = None
    #: Seconds of steps in one block of the paired phase (None: the profile's).
    block_seconds: float | None = None
    #: ``--reference-check SECONDS``: after each round every member times its step this long
    #: with a reference timer, kept in ``paired.jsonl`` for ``tools/steady_check.py``. 0: off.
    reference_check: float = 0.0

    @property
    def timing_design(self) -> str:
        """``timing``, or its default: ``PAIRED``."""
        return self.timing or PAIRED

    @property
    def paired(self) -> bool:
        """Whether the run has a paired phase."""
        return self.timing_design == PAIRED

    def __post_init__(self) -> None:
        if self.fingerprint is None:
            self.fingerprint = "device" if self.device == "cuda" else "sha256"

    @property
    def device_names(self) -> list[str]:
        """The devices the run's workers run on: ``devices``, or the one ``device``."""
        return list(self.devices) if self.devices else [f"{self.device}:0"]

    @property
    def parallel_cpu(self) -> bool:
        """Whether CPU workers run side by side (``--devices cpu,cpu``): they share the cores."""
        return self.device == "cpu" and len(self.device_names) > 1

    def setting(self, key: str) -> Any:
        value = getattr(self, key)
        return PROFILE_DEFAULTS[self.profile][key] if value is None else value

    def options_json(
        self, workloads: list[Workload], sources: list[str], threads: int | None, target: float
    ) -> dict[str, Any]:
        """The run's options as env.json keeps them, for the report and for ``--resume``."""
        return {
            "argv": sys.argv,
            "suites": sorted({w.suite for w in workloads}),
            "workloads": [w.key for w in workloads],
            "sources": sources,
            SOURCES_KEY: suite_digests(workloads),
            "modes": [m.name for m in self.modes],
            "settings": self.settings,
            "only_for": self.only_for,
            "replicates": self.replicates,
            "profile": self.profile,
            "device": self.device,
            "devices": self.devices,
            "shard": list(self.shard) if self.shard else None,
            "threads_per_worker": threads,
            "seed": self.seed,
            "fingerprint_steps": self.setting("fingerprint_steps"),
            "warmup_steps": self.setting("warmup_steps"),
            "budget": self.setting("budget"),
            "target_rel": target,
            "min_samples": MIN_SAMPLES,
            "fingerprint": self.fingerprint,
            "timeout": self.timeout,
            "startup_timeout": self.startup_timeout,
            "inherited_cublas_workspace_config": os.environ.get(CUBLAS_ENV),
            "cudnn_log": self.cudnn_log,
            "timing": self.timing_design,
            "rounds": self.setting("rounds"),
            "block_seconds": self.setting("block_seconds"),
            "reference_check": self.reference_check,
        }


#: A built-in suite's helper file, loaded by ``suite_helper("_name")``: part of its source.
_HELPER = re.compile(r"""suite_helper\(\s*["'](\w+)["']\s*\)""")


def suite_digests(workloads: list[Workload]) -> dict[str, str]:
    """Each suite's source digest (its workloads' files and helpers) for compare and merge."""
    files: dict[str, set[str]] = {}
    for w in workloads:
        if w.source and Path(w.source).is_file():
            files.setdefault(w.suite, set()).add(w.source)
    for paths in files.values():
        for p in list(paths):
            for stem in _HELPER.findall(Path(p).read_text(encoding="utf-8", errors="replace")):
                helper = suites_dir() / f"{stem}.py"
                if helper.is_file():
                    paths.add(str(helper))
    return {suite: source_digest(paths) for suite, paths in sorted(files.items())}


def resolve_sources(config: RunConfig) -> tuple[list[str], list[Workload]]:
    """The files a worker loads and the workloads to run, in order (``MATRIX_OPT_IN``)."""
    builtin = builtin_suite_files()
    if ALL_SUITES in config.suites:
        suites = list(builtin)
    elif config.suites:
        suites = list(config.suites)
    elif config.workload_files:
        suites = []
    else:
        suites = [s for s in builtin if s not in left_out(config)]
    unknown = [s for s in suites if s not in builtin]
    if unknown:
        raise RunError(
            f"unknown suite {unknown[0]!r}; built-in suites: {', '.join(builtin) or 'none'}, or all"
        )
    sources: list[str] = []
    chosen: list[Workload] = []
    for s in suites:
        sources.append(str(builtin[s]))
        chosen += [w for w in load_file(builtin[s]) if w.suite == s]
    for f in config.workload_files:
        defined = load_file(f)  # errors name the path as the user gave it
        if not defined:
            raise RunError(
                f"{f} defines no workload (no function decorated with @detbench.workload)"
            )
        chosen += defined
        sources.append(str(Path(f).resolve()))
    by_key: dict[str, Workload] = {}
    for w in chosen:
        by_key.setdefault(w.key, w)  # a key defined twice: its first workload
    unique = list(by_key.values())
    if config.only is not None:
        missing = [k for k in config.only if k not in by_key]
        if missing:
            raise RunError(
                f"unknown workload {missing[0]!r}; the workloads of this run: "
                f"{', '.join(by_key) or 'none'}"
            )
        unique = [by_key[k] for k in config.only]
    if not unique:
        raise RunError("no workloads to run")
    return sources, unique


def left_out(config: RunConfig) -> dict[str, str]:
    """The built-in suites this run's matrix leaves out, with why."""
    if config.suites or config.workload_files or config.resume:
        return {}
    builtin = builtin_suite_files()
    return {s: why for s, why in MATRIX_OPT_IN.get(config.device, {}).items() if s in builtin}


def resume_config(directory: Path) -> RunConfig:
    """The configuration of the run in ``directory``, to continue it (``--resume``)."""
    if not directory.is_dir():
        raise RunError(f"no such results directory: {directory}")
    if not (directory / ENV_FILE).is_file():
        raise RunError(f"{directory} holds no {ENV_FILE}: not a detbench run, nothing to resume")
    env = load_env(directory)
    list(iter_records(directory))  # a malformed or truncated file: its one-line error
    o = env.get("options") or {}
    timing = o.get("timing", "separate")  # no field: older than the paired design
    if timing not in (PAIRED, VERDICTS_ONLY):
        raise RunError(
            f"cannot resume {directory}: its records were timed each in its own worker (the "
            f"'{timing}' design of an earlier detbench), and this one times costs only "
            "paired, so a resumed run's costs would mix the two; `detbench report` still reads "
            "it, and a new run times every cost paired"
        )
    try:
        sources = [Path(s) for s in o["sources"]]
        config = RunConfig(
            out=directory,
            workload_files=sources,
            modes=[get_mode(m) for m in o["modes"]],
            replicates=int(o["replicates"]),
            profile=str(o["profile"]),
            device=str(o["device"]),
            seed=int(o["seed"]),
            fingerprint_steps=o.get("fingerprint_steps"),
            warmup_steps=o.get("warmup_steps"),
            budget=o.get("budget", o.get("min_run_time")),
            timeout=o.get("timeout"),
            startup_timeout=float(o.get("startup_timeout") or STARTUP_TIMEOUT),
            # Hash as the first records did (older runs: sha256), else all look nondeterministic.
            fingerprint=str(o.get("fingerprint", "sha256")),
            only=list(o["workloads"]),
            resume=True,
            settings=dict(o.get("settings") or {}),
            only_for=o.get("only_for"),
            study=env.get("study"),
            devices=o.get("devices"),
            shard=(int(o["shard"][0]), int(o["shard"][1])) if o.get("shard") else None,
            cudnn_log=bool(o.get("cudnn_log", False)),
            timing=None if timing == PAIRED else timing,
            rounds=o.get("rounds"),
            block_seconds=o.get("block_seconds"),
            reference_check=float(o.get("reference_check") or 0.0),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunError(f"{directory / ENV_FILE}: cannot read the run's options ({exc})") from None
    for s in sources:
        if not s.is_file():
            raise RunError(f"cannot resume: the run's workload file {s} no longer exists")
    return config


def parse_devices(text: str) -> list[str]:
    """The names of ``--devices``: ``cuda:N`` as given, ``cpu`` entries numbered in order
    (``cpu:0``, ``cpu:1``). A list that mixes cpu and cuda is refused: their timings and
    fingerprints would be compared as if from one kind of device."""
    names: list[str] = []
    for entry in text.split(","):
        e = entry.strip().lower()
        if e == "cpu":
            names.append(f"cpu:{sum(n.startswith('cpu') for n in names)}")
            continue
        kind, colon, index = e.partition(":")
        if kind != "cuda" or not colon or not index.isdigit():
            raise RunError(
                f"--devices: unknown device {entry.strip()!r}; give cpu entries or CUDA GPUs "
                "by index, e.g. --devices cuda:0,cuda:1 or --devices cpu,cpu"
            )
        name = f"cuda:{int(index)}"
        if name in names:
            raise RunError(f"--devices: {name} is listed twice; one worker per GPU at a time")
        names.append(name)
    if len({n.split(":")[0] for n in names}) > 1:
        raise RunError(f"--devices {text}: mixes cpu and cuda; give only GPUs or only cpu entries")
    return names


def check_devices(config: RunConfig, cuda_available: bool) -> None:
    """Refuse a ``--devices`` list this machine cannot run."""
    if not config.devices:
        return
    kind = config.devices[0].split(":")[0]
    if kind != config.device:
        raise RunError(
            f"--devices {','.join(config.devices)} runs on {kind}, but the run's device is "
            f"{config.device}"
        )
    if kind == "cuda":
        import torch

        count = torch.cuda.device_count() if cuda_available else 0
        beyond = [n for n in config.devices if int(n.split(":")[1]) >= count]
        if beyond:
            seen = f"cuda:0 to cuda:{count - 1}" if count else "none"
            raise RunError(
                f"--devices: no {beyond[0]} here: torch sees {count} CUDA GPU(s) ({seen})"
            )
    else:
        cores = host_cores()
        if len(config.devices) > cores:
            raise RunError(
                f"--devices: {len(config.devices)} cpu workers on a host with {cores} cores; "
                f"give at most {cores}"
            )


def validate(config: RunConfig, cuda_available: bool, paper: bool = False) -> None:
    """Refuse bad options; ``paper``: a dry CUDA plan on a host without a GPU (no GPU checks)."""
    check_options(config)
    if config.device == "cuda" and not (cuda_available or paper):
        raise RunError("--device cuda: no CUDA GPU is available to torch on this machine")
    if not (paper and config.device == "cuda"):
        check_devices(config, cuda_available)


def check_options(config: RunConfig) -> None:
    """The checks of ``validate`` that need neither torch nor the workloads (the CLI's first)."""
    if config.replicates < 2:
        raise RunError(
            f"--replicates {config.replicates}: at least 2 are needed, since one replicate "
            "cannot show run-to-run behaviour"
        )
    if config.profile not in PROFILE_DEFAULTS:
        raise RunError(f"unknown profile {config.profile!r}; use quick or full")
    if config.timeout is not None and config.timeout <= 0:
        raise RunError("--timeout must be a positive number of seconds")
    if config.startup_timeout <= 0:
        raise RunError("--startup-timeout must be a positive number of seconds")
    if config.budget is not None and config.budget <= 0:
        raise RunError("--budget must be a positive number of seconds")
    if config.timing not in (None, PAIRED, VERDICTS_ONLY):
        raise RunError(f"unknown timing {config.timing!r}: costs are timed {PAIRED}")
    if config.reference_check < 0:
        raise RunError("--reference-check must be a positive number of seconds (0: off)")
    if config.rounds is not None and config.rounds < 6:
        raise RunError(
            f"--rounds {config.rounds}: at least 6 are needed, the fewest samples with a 95% "
            "interval of their median"
        )
    if config.fingerprint not in FINGERPRINTS:
        raise RunError(
            f"unknown --fingerprint {config.fingerprint!r}; use {', '.join(FINGERPRINTS)}"
        )
