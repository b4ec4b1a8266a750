"""The table of switches beside the modes (one row each in ``SETTINGS``): levels, torch's
default, how a fresh worker applies and reads it, and its line in a mode's snippet. ``--set
NAME=LEVEL`` overrides one for every mode of a run (the 10 modes leave them at torch's default),
and the mode's name carries it: ``det-algos[fill_uninitialized_memory=off]``. A row whose torch
API is missing says why in ``unavailable()``; a run that asks for it records ``unsupported``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from detbench.core import torchstate as ts
from detbench.core.errors import DetbenchError
from detbench.core.torchstate import CUBLAS_ENV

CUBLAS_DEFAULT = ":4096:8"
ON_OFF = ("on", "off")
#: What a level string may also be written as on the command line.
_ALIASES = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}
#: The four flags the 10 modes are made of, as they are named in records.
MODE_FLAGS = ("benchmark", "cudnn_deterministic", "deterministic_algorithms", "cudnn_enabled")
#: The settings of inductor: they act only on compiled steps (execution=compile).
INDUCTOR = ("inductor_deterministic", "inductor_batch_invariant")


class SettingError(DetbenchError):
    """A ``--set`` that names no setting or no level of it (one line for the user)."""


@dataclass(frozen=True)
class Setting:
    """One switch: its record column is ``name``; a level is always a string on the command line
    and in mode names, a boolean in the record where the levels are on/off."""

    name: str
    levels: tuple[str, ...]
    #: torch's default, as documented; ``default()`` reads this installation's.
    torch_default: str
    doc: str
    #: "process": once in the fresh worker before CUDA starts (cuBLAS's workspace in its
    #: environment); "workload": around each workload's steps; "distributed": read by
    #: ``distributed.launch`` when it launches the ranks of a ``distributed=True`` workload.
    scope: str = "process"
    #: The level of the fully deterministic end of an attribution study; None: not a switch of it.
    strict: str | None = None
    #: Devices where the setting changes what runs; elsewhere it is inert (an attribution skips it).
    devices: tuple[str, ...] = ("cpu", "cuda")
    read: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    apply: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    snippet: Callable[[str], list[str]] = field(default=lambda level: [], compare=False, repr=False)
    unavailable: Callable[[], str | None] = field(default=ts.always, compare=False, repr=False)
    #: Its module, where an import is work of its own (``applied.read_all(loaded_only)``).
    module: str | None = None

    @property
    def boolean(self) -> bool:
        return self.levels == ON_OFF

    def column(self, level: str | None) -> Any:
        """The record's value for ``level``: a boolean for on/off, None for an unset variable."""
        if level is None:
            return None
        if self.boolean and level in ON_OFF:
            return level == "on"
        if self.name == "cublas_workspace_config" and level == "unset":
            return None
        return level

    def default(self) -> str:
        """The level a fresh process reads here (the documented default where it cannot)."""
        if self.read is None or self.unavailable() is not None:
            return self.torch_default
        try:
            return self.read()
        except Exception:
            return self.torch_default

    def to_json(self) -> dict[str, Any]:
        reason = self.unavailable()
        return {
            "name": self.name,
            "levels": list(self.levels),
            "default": self.default(),
            "doc": self.doc,
            "scope": self.scope,
            "devices": list(self.devices),
            "strict": self.strict,
            "available": reason is None,
            **({"unavailable": reason} if reason else {}),
        }


_MATMUL = "torch.backends.cuda.matmul"


def _reduction_setting(dt: str, split_k: bool) -> Setting:
    """The row of cuBLAS's reduced-precision reduction for ``dt``, or of its split-K half."""
    attr, suffix = f"allow_{dt}_reduced_precision_reduction", "_split_k" if split_k else ""
    read, apply = ts.reduction(dt, split_k)

    def snippet(level: str) -> list[str]:
        if not split_k:
            return [f"{_MATMUL}.{attr} = {level == 'on'}"]
        return [f"{_MATMUL}.{attr} = ({_MATMUL}.{attr}, {level == 'on'})"]

    if split_k:
        doc = (
            f"the split-K half of {_MATMUL}.{attr} (torch 2.8+): cuBLAS may split the K "
            f"dimension of a {dt} GEMM; off needs the reduced-precision reduction off too."
        )
    else:
        doc = f"{_MATMUL}.{attr}: {dt} GEMMs may reduce in {dt} instead of fp32 (on by default)."
    return Setting(
        f"{dt}_reduced_precision_reduction{suffix}",
        ON_OFF,
        "on",
        doc,
        strict="off",
        devices=("cuda",),
        read=read,
        apply=apply,
        snippet=snippet,
        unavailable=ts.needs(read, attr + suffix),
    )


def _bool_line(expr: str) -> Callable[[str], list[str]]:
    return lambda level: [f"{expr} = {level == 'on'}"]


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "fill_uninitialized_memory",
        ON_OFF,
        "on",
        "with deterministic algorithms on, torch fills every torch.empty with NaN (floats) or "
        "the largest integer; off spares the fill. Acts only with deterministic algorithms.",
        strict="on",
        read=ts.read_fill,
        apply=ts.apply_fill,
        snippet=_bool_line("torch.utils.deterministic.fill_uninitialized_memory"),
        unavailable=ts.needs(ts.read_fill, "torch.utils.deterministic.fill_uninitialized_memory"),
    ),
    Setting(
        "warn_only",
        ON_OFF,
        "off",
        "use_deterministic_algorithms(..., warn_only=True): an op without a deterministic "
        "implementation warns and runs its nondeterministic kernel instead of raising.",
        read=ts.read_warn_only,
        apply=ts.apply_warn_only,
        snippet=lambda level: [
            "torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(), "
            f"warn_only={level == 'on'})"
        ],
        unavailable=ts.needs(ts.read_warn_only, "warn_only for use_deterministic_algorithms"),
    ),
    Setting(
        "float32_matmul_precision",
        ("highest", "high", "medium"),
        "highest",
        "torch.set_float32_matmul_precision: 'high' lets fp32 matmuls run in TF32 on a GPU (the "
        "same switch as torch.backends.cuda.matmul.allow_tf32 = True), 'medium' in bf16.",
        strict="highest",
        read=ts.read_matmul_precision,
        apply=ts.apply_matmul_precision,
        snippet=lambda level: [f'torch.set_float32_matmul_precision("{level}")'],
    ),
    Setting(
        "cudnn_tf32",
        ON_OFF,
        "on",
        "fp32 cuDNN convolutions and RNNs in TF32 (on by default): torch 2.9+'s "
        "torch.backends.cudnn.{conv,rnn}.fp32_precision where this torch has them, else "
        "torch.backends.cudnn.allow_tf32 (never both: mixing them raises).",
        strict="off",
        devices=("cuda",),
        read=ts.read_cudnn_tf32,
        apply=ts.apply_cudnn_tf32,
        snippet=ts.cudnn_tf32_snippet,
    ),
    *(_reduction_setting(dt, sk) for dt in ("fp16", "bf16") for sk in (False, True)),
    Setting(
        "cublas_workspace_config",
        ("unset", ":4096:8", ":16:8"),
        "unset",
        "the CUBLAS_WORKSPACE_CONFIG environment variable, read by cuBLAS when its handle is "
        "created: ':4096:8' or ':16:8' make cuBLAS deterministic; the modes with deterministic "
        "algorithms set ':4096:8' (or the user's value), the others leave it unset.",
        strict=":4096:8",
        devices=("cuda",),
        read=ts.read_cublas,
        apply=ts.apply_cublas,
        snippet=lambda level: (
            [f'os.environ.pop("{CUBLAS_ENV}", None)  # before any CUDA work']
            if level == "unset"
            else [f'os.environ["{CUBLAS_ENV}"] = "{level}"  # before any CUDA work']
        ),
    ),
    Setting(
        "sdpa_backend",
        ("default", "math", "flash", "efficient", "cudnn"),
        "default",
        "the scaled_dot_product_attention backend, through torch.nn.attention.sdpa_kernel: "
        "'default' lets torch choose; a backend the device lacks is recorded as unsupported.",
        strict="math",
        read=ts.read_sdpa,
        apply=ts.apply_sdpa,
        snippet=lambda level: ts.sdpa_snippet(level),
        unavailable=ts.needs(
            lambda: __import__("torch.nn.attention").nn.attention.sdpa_kernel,
            "torch.nn.attention.sdpa_kernel",
        ),
    ),
    Setting(
        "autocast",
        ("off", "fp16", "bf16"),
        "off",
        "automatic mixed precision: each step runs under torch.autocast(device, dtype); only "
        "for workloads that declare autocast=True (others are recorded as unsupported).",
        scope="workload",
        snippet=lambda level: (
            []
            if level == "off"
            else [
                f"# each step: with torch.autocast(device.type, dtype=torch."
                f"{'float16' if level == 'fp16' else 'bfloat16'}): ..."
            ]
        ),
    ),
    Setting(
        "execution",
        ("eager", "compile"),
        "eager",
        "eager, or each workload's step through torch.compile (inductor) with fresh compile "
        "caches in every worker; the compile time is recorded apart from the throughput.",
        scope="workload",
        snippet=lambda level: (
            [] if level == "eager" else ["step = torch.compile(step)  # inductor"]
        ),
        unavailable=ts.compile_unavailable,
    ),
    Setting(
        "inductor_deterministic",
        ON_OFF,
        "off",
        "torch._inductor.config.deterministic: inductor avoids the choices (autotuning by "
        "measurement among them) that can change bits from run to run. Acts only with "
        "execution=compile. Where torch ties it to deterministic algorithms (2.13: "
        "use_deterministic_algorithms sets it, and dynamo calls that after compiling each "
        "frame), a level other than deterministic algorithms' is recorded as unsupported.",
        strict="on",
        read=ts.read_inductor_det,
        apply=ts.apply_inductor_det,
        snippet=_bool_line("torch._inductor.config.deterministic"),
        unavailable=ts.needs(ts.read_inductor_det, "torch._inductor.config.deterministic"),
        module="torch._inductor.config",
    ),
    Setting(
        "inductor_batch_invariant",
        ON_OFF,
        "off",
        "torch._inductor.config.batch_invariant (env TORCHINDUCTOR_BATCH_INVARIANT): in the "
        "Triton kernels inductor generates, persistent reductions get the same configuration "
        "at every batch size (the batch dimension's size hint is raised to at least 4096) and "
        "their configurations are chosen as in inductor's deterministic mode; inductor's CPU "
        "(C++) code does not read it. Acts only with execution=compile.",
        devices=("cuda",),
        read=ts.read_inductor_batch_invariant,
        apply=ts.apply_inductor_batch_invariant,
        snippet=_bool_line("torch._inductor.config.batch_invariant"),
        unavailable=ts.needs(
            ts.read_inductor_batch_invariant, "torch._inductor.config.batch_invariant"
        ),
        module="torch._inductor.config",
    ),
    Setting(
        "world_size",
        ts.WORLD_SIZES,
        "2",
        "ranks of a distributed workload: one torchrun launch of this many processes, one per "
        "GPU on CUDA (more ranks than GPUs is recorded as unsupported), gloo on CPU. Unset: 2 "
        "on CPU, min(2, visible GPUs) on CUDA (world_size_default).",
        scope="distributed",
        snippet=lambda level: [f"# torchrun --standalone --nnodes 1 --nproc-per-node {level} ..."],
    ),
    Setting(
        "bucket_cap_mb",
        ts.BUCKET_CAPS,
        "25",
        "DistributedDataParallel(bucket_cap_mb=...): the size of the gradient buckets that are "
        "all-reduced together, which decides how the additions of a gradient are grouped.",
        scope="distributed",
        snippet=lambda level: [f"# DistributedDataParallel(model, bucket_cap_mb={level})"],
    ),
    Setting(
        "nccl_algo",
        ts.NCCL_ALGOS,
        "unset",
        "the NCCL_ALGO environment variable of the ranks: the all-reduce algorithm NCCL may use "
        "(Ring is what deterministic training stacks pin; NVLS is known to be nondeterministic); "
        "a level this NCCL or GPU rejects is recorded as unsupported. Inert at world size 1. "
        "The record holds the variable as rank 0 read it after init_process_group.",
        scope="distributed",
        devices=("cuda",),
        snippet=lambda level: ts.env_snippet("NCCL_ALGO", level),
    ),
    Setting(
        "nccl_proto",
        ts.NCCL_PROTOS,
        "unset",
        "the NCCL_PROTO environment variable of the ranks: the protocol of NCCL's collectives; "
        "a level this NCCL rejects is recorded as unsupported. Inert at world size 1.",
        scope="distributed",
        devices=("cuda",),
        snippet=lambda level: ts.env_snippet("NCCL_PROTO", level),
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def get(name: str) -> Setting:
    if name not in BY_NAME:
        raise SettingError(f"unknown setting {name!r}; known settings: {', '.join(NAMES)}")
    return BY_NAME[name]


def canonical_level(setting: Setting, level: str) -> str:
    text = str(level).strip()
    if setting.boolean:
        text = _ALIASES.get(text.lower(), text.lower())
    if text not in setting.levels:
        raise SettingError(
            f"setting {setting.name} has no level {level!r}; its levels: "
            + ", ".join(setting.levels)
        )
    return text


Overrides = tuple[tuple[str, str], ...]


def normalise(overrides: Mapping[str, str] | Iterable[tuple[str, str]]) -> Overrides:
    """Overrides as a canonical tuple in table order; a name given two levels is an error."""
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    chosen: dict[str, str] = {}
    for name, level in items:
        s = get(name)
        lvl = canonical_level(s, level)
        if chosen.get(name, lvl) != lvl:
            raise SettingError(f"setting {name} given twice: {chosen[name]} and {lvl}")
        chosen[name] = lvl
    check_combination(chosen)
    return tuple((n, chosen[n]) for n in NAMES if n in chosen)


def check_combination(chosen: Mapping[str, str]) -> None:
    """Combinations torch refuses, refused before anything runs."""
    for dt in ("fp16", "bf16"):
        base = f"{dt}_reduced_precision_reduction"
        if chosen.get(base + "_split_k") == "off" and chosen.get(base, "on") == "on":
            raise SettingError(
                f"{base}_split_k=off needs {base}=off as well: torch refuses split-K off while "
                "reduced-precision reductions are allowed"
            )


def parse_assignment(text: str) -> tuple[str, str]:
    """``NAME=LEVEL`` from the command line, checked."""
    name, sep, level = text.partition("=")
    if not sep or not name.strip() or not level.strip():
        raise SettingError(f"--set takes NAME=LEVEL, not {text!r}")
    s = get(name.strip())
    return s.name, canonical_level(s, level)


def parse_assignments(texts: Iterable[str]) -> Overrides:
    return normalise([parse_assignment(t) for t in texts])


def label(overrides: Overrides) -> str:
    """``[name=level,...]`` as it follows a mode's name; empty without overrides."""
    if not overrides:
        return ""
    return "[" + ",".join(f"{n}={v}" for n, v in overrides) + "]"


def parse_label(text: str) -> tuple[str, Overrides]:
    """``det-algos[fill_uninitialized_memory=off]`` -> (``det-algos``, overrides)."""
    base, sep, rest = text.partition("[")
    if not sep:
        return text, ()
    if not rest.endswith("]"):
        raise SettingError(f"mode name {text!r}: settings must end with ']'")
    parts = [p for p in rest[:-1].split(",") if p.strip()]
    return base, normalise([parse_assignment(p) for p in parts])


def snippet_lines(overrides: Overrides) -> list[str]:
    """The snippet's lines for ``overrides``, less a setting this torch lacks: its line would
    raise here, and a run that asked for it recorded ``unsupported``."""
    return [
        line
        for name, level in overrides
        if BY_NAME[name].unavailable() is None
        for line in BY_NAME[name].snippet(level)
    ]


#: Why the NCCL settings cannot act at one rank.
NCCL_ONE_RANK = "NCCL's one-rank path runs no algorithm, so {name} is inert at world size 1"


def visible_gpus() -> int:
    """CUDA GPUs torch sees here (0 without CUDA, or where it cannot tell)."""
    try:
        torch = ts.torch_module()
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:
        return 0


def world_size_default(device: str, gpus: int | None = None) -> str:
    """The ranks of a distributed workload without ``--set world_size``: 2 on a CPU; on CUDA
    ``min(2, gpus)`` (visible GPUs when None, at least one), so a one-GPU host runs them at 1."""
    if device != "cuda":
        return "2"
    n = visible_gpus() if gpus is None else gpus
    return str(min(2, max(1, n)))


def default_level(name: str, device: str, gpus: int | None = None) -> str:
    """The level a mode without setting ``name`` runs at on ``device``."""
    if name == "world_size":
        return world_size_default(device, gpus)
    return get(name).torch_default


def inert_settings(
    names: Iterable[str], device: str, levels: Mapping[str, str], deterministic_algorithms: bool
) -> dict[str, str] | None:
    """Setting -> ``inert_reason`` for those of ``names`` that cannot act; None when all can."""
    out = {n: inert_reason(n, device, levels, deterministic_algorithms) for n in names}
    return {n: r for n, r in out.items() if r is not None} or None


def inert_reason(
    name: str, device: str, levels: Mapping[str, str], deterministic_algorithms: bool
) -> str | None:
    """Why setting ``name`` cannot change what runs on ``device`` at these levels, or None."""
    s = get(name)
    if device not in s.devices:
        return f"{name} acts only on {', '.join(s.devices)}"
    if name in ("fill_uninitialized_memory", "warn_only") and not deterministic_algorithms:
        return f"{name} acts only with deterministic algorithms"
    if name in INDUCTOR and levels.get("execution", "eager") != "compile":
        return f"{name} acts only with execution=compile"
    if name in ts.NCCL_ENV and str(levels.get("world_size") or world_size_default(device)) == "1":
        return NCCL_ONE_RANK.format(name=name)
    return None
