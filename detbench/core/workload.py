"""The public workload API: ``@detbench.workload``, the ``Context`` a workload is built in, and the
registry that the built-in suites and a user's own files fill alike. A workload is a factory:
``factory(ctx)`` builds models and inputs and returns ``step``, a callable that does one unit of
work and returns the tensors whose bits define its result.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from detbench.core.errors import DetbenchError

if TYPE_CHECKING:
    import torch

PROFILES: tuple[str, ...] = ("quick", "full")
#: Who seeds the generators before a workload is built: detbench, or the workload (a recipe).
SEEDING: tuple[str, ...] = ("detbench", "recipe")

#: A step returns its result: a tensor, or any nesting of lists, tuples, dicts and dataclasses
#: whose leaves are tensors or None (``worker.fingerprint.step_outputs`` flattens it).
Step = Callable[[], Any]
Factory = Callable[["Context"], Step]
# A count per step: a number, one per profile, or a function of the context.
PerStep = float | Mapping[str, float] | Callable[["Context"], float]


#: The facts a factory may note for its record (``Context.note``).
NOTES = ("attn_implementation",)


class Unsupported(Exception):
    """Raised by a factory whose workload cannot run here: recorded ``unsupported``."""


@dataclass(frozen=True)
class Context:
    """What a workload is built for: the device, the size profile and the seed already applied."""

    device: torch.device
    profile: str
    seed: int
    #: For a workload that declares ``batch_sizes``: the batch size to build at (None otherwise).
    batch_size: int | None = None
    #: A ``distributed`` workload's rank, world size and DDP ``bucket_cap_mb`` (0, 1 elsewhere).
    rank: int = 0
    world_size: int = 1
    bucket_cap_mb: float | None = None
    #: The modules ``ddp`` wrapped, compared across ranks after each step (``ranks_agree``).
    ddp_modules: list[Any] = field(default_factory=list, compare=False, repr=False)
    #: What the factory said about the workload it built (``note``), copied into its record.
    notes: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def note(self, **facts: str) -> None:
        """Facts of the built workload for its record: ``attn_implementation`` (``"eager"``,
        ``"sdpa"``, ...; a Hugging Face model's ``config._attn_implementation``). Without it a
        record says ``"sdpa"`` where its fingerprint pass saw SDPA run, else nothing."""
        for name, value in facts.items():
            if name not in NOTES:
                raise WorkloadError(f"ctx.note knows {', '.join(NOTES)}, not {name!r}")
            self.notes[name] = str(value)

    def ddp(self, module: Any, **kwargs: Any) -> Any:
        """``module`` in ``DistributedDataParallel`` on this rank's device, with the
        ``bucket_cap_mb`` setting; its parameters are compared across ranks after every step."""
        from torch.nn.parallel import DistributedDataParallel

        if self.device.type == "cuda":
            kwargs.setdefault("device_ids", [self.device.index])
        if self.bucket_cap_mb is not None:
            kwargs.setdefault("bucket_cap_mb", self.bucket_cap_mb)
        wrapped = DistributedDataParallel(module, **kwargs)
        self.ddp_modules.append(wrapped)
        return wrapped


@dataclass(frozen=True)
class Workload:
    """A workload's identity (suite, name, parameters) and its factory. Every field but
    ``factory`` and ``source`` is a keyword of ``@workload``, documented here once."""

    suite: str
    name: str
    factory: Factory = field(compare=False, repr=False)
    #: What one step processes: a number, one per profile, or a function of the ``Context``.
    items_per_step: PerStep = field(compare=False, repr=False)
    #: The case (shapes, dtypes) for listings; may hold ``quick`` and ``full`` sub-mappings.
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)
    source: str = field(default="", compare=False)
    #: Bytes per step (as ``items_per_step``), for memory-bound ops the FLOP counter misses.
    bytes_per_step: PerStep | None = field(default=None, compare=False, repr=False)
    #: Replaces the FLOP count where the counter misses work on some device (fused cuDNN RNNs).
    flops_per_step: PerStep | None = field(default=None, compare=False, repr=False)
    #: The index of the step output that is the scalar loss, recorded at every fingerprint step.
    loss_output: int | None = field(default=None, compare=False)
    #: Steps in the fingerprint pass (as ``items_per_step``), in place of the run's setting.
    fingerprint_steps: PerStep | None = field(default=None, compare=False, repr=False)
    #: ``"recipe"`` leaves the generators as a fresh process has them (``SEEDING``).
    seeding: str = field(default="detbench", compare=False)
    #: float32 steps that can run under ``torch.autocast`` (else unsupported at fp16 and bf16).
    autocast: bool = field(default=False, compare=False)
    #: The steps call SDPA: an attribution study varies ``sdpa_backend`` only for these.
    attention: bool = field(default=False, compare=False)
    #: The sizes the factory can build at (``ctx.batch_size``), ascending; row 0 of every
    #: batch-first output must be the same request at every size (``batch_invariant``).
    batch_sizes: tuple[int, ...] | None = field(default=None, compare=False)
    #: The size of the fingerprint and timing passes (the largest of ``batch_sizes`` by default).
    batch_size: int | None = field(default=None, compare=False)
    #: Each record is one fresh ``torchrun`` launch of ``world_size`` ranks, each running the
    #: factory; wrap models with ``ctx.ddp``. ``items_per_step`` is one rank's. See
    #: ``detbench.distributed.launch``.
    distributed: bool = field(default=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"

    def items(self, ctx: Context) -> float:
        return _per_step(self.items_per_step, ctx)

    def bytes(self, ctx: Context) -> float | None:
        return None if self.bytes_per_step is None else _per_step(self.bytes_per_step, ctx)

    def declared_flops(self, ctx: Context) -> float | None:
        return None if self.flops_per_step is None else _per_step(self.flops_per_step, ctx)

    def steps(self, ctx: Context, default: int) -> int:
        """Steps in the fingerprint pass: the workload's own count, else the run's."""
        if self.fingerprint_steps is None:
            return default
        return int(_per_step(self.fingerprint_steps, ctx))

    def params_for(self, profile: str) -> dict[str, Any]:
        """Parameters of the given profile: ``params`` may hold a ``quick``/``full`` split."""
        flat = {k: v for k, v in self.params.items() if k not in PROFILES}
        sized = self.params.get(profile)
        if isinstance(sized, Mapping):
            flat.update(sized)
        return flat


def _per_step(spec: PerStep, ctx: Context) -> float:
    if callable(spec):
        return float(spec(ctx))
    if isinstance(spec, Mapping):
        return float(spec[ctx.profile])
    return float(spec)


class WorkloadError(DetbenchError):
    """A workload definition or file that cannot be used (one clear line for the user)."""


def _batch_sizes(sizes: Sequence[int] | None, own: int | None) -> tuple[int, ...] | None:
    """``batch_sizes`` checked: at least two distinct positive integers, ascending."""
    if sizes is None:
        if own is not None:
            raise WorkloadError("workload batch_size needs batch_sizes (the sizes it can build)")
        return None
    if isinstance(sizes, str | bytes) or not all(
        isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in sizes
    ):
        raise WorkloadError(f"workload batch_sizes must be positive integers, not {sizes!r}")
    out = tuple(sorted(set(sizes)))
    if len(out) < 2:
        raise WorkloadError(
            f"workload batch_sizes needs two sizes or more to compare, not {sizes!r}"
        )
    if own is not None and own not in out:
        raise WorkloadError(f"workload batch_size {own!r} is not one of batch_sizes {out}")
    return out


_REGISTRY: dict[str, Workload] = {}


def workload(
    fn: Factory | None = None,
    *,
    suite: str,
    items_per_step: PerStep,
    name: str | None = None,
    params: Mapping[str, Any] | None = None,
    bytes_per_step: PerStep | None = None,
    flops_per_step: PerStep | None = None,
    loss_output: int | None = None,
    fingerprint_steps: PerStep | None = None,
    seeding: str = "detbench",
    autocast: bool = False,
    attention: bool = False,
    batch_sizes: Sequence[int] | None = None,
    batch_size: int | None = None,
    distributed: bool = False,
) -> Any:
    """Register a workload factory (``fn``: without decorating); each keyword is the
    ``Workload`` field of that name (``name``: the factory's by default)."""
    if seeding not in SEEDING:
        raise WorkloadError(f"seeding must be one of {', '.join(SEEDING)}, not {seeding!r}")
    flags = dict(autocast=autocast, attention=attention, distributed=distributed)
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise WorkloadError(f"workload {flag} must be True or False, not {value!r}")
    sizes = _batch_sizes(batch_sizes, batch_size)
    if distributed and sizes is not None:
        raise WorkloadError("a distributed workload cannot declare batch_sizes (not measured)")

    def register(factory: Factory) -> Factory:
        wname = name or factory.__name__
        if not suite or "/" in suite or not wname or "/" in wname:
            raise WorkloadError(
                f"workload suite and name must be non-empty, without '/': {suite!r}/{wname!r}"
            )
        w = Workload(
            suite=suite,
            name=wname,
            factory=factory,
            items_per_step=items_per_step,
            params=dict(params or {}),
            source=getattr(getattr(factory, "__code__", None), "co_filename", ""),
            bytes_per_step=bytes_per_step,
            flops_per_step=flops_per_step,
            loss_output=loss_output,
            fingerprint_steps=fingerprint_steps,
            seeding=seeding,
            autocast=autocast,
            attention=attention,
            batch_sizes=sizes,
            batch_size=None if sizes is None else (batch_size or sizes[-1]),
            distributed=distributed,
        )
        old = _REGISTRY.get(w.key)
        if old is not None and old.source != w.source:
            raise WorkloadError(
                f"workload {w.key} is defined twice: in {old.source} and in {w.source}"
            )
        _REGISTRY[w.key] = w
        return factory

    if fn is not None:
        return register(fn)
    return register


def registry() -> dict[str, Workload]:
    """Every registered workload, by ``suite/name``, in registration order."""
    return dict(_REGISTRY)


def check_file(path: str | Path) -> Path:
    """``path`` resolved, or the one line that says why it is no workload file."""
    p = Path(path).resolve()
    if not p.is_file():
        raise WorkloadError(f"workload file not found: {path}")
    if p.suffix != ".py":
        raise WorkloadError(f"workload file must be a .py file: {path}")
    return p


def load_file(path: str | Path) -> list[Workload]:
    """Import a Python file that defines workloads and return the workloads it registered."""
    p = check_file(path)
    # A stable, unique module name per path: a file loads once per process, named alike in workers.
    mod_name = "detbench_user_" + p.stem + "_" + hashlib.sha1(str(p).encode()).hexdigest()[:10]
    before = set(_REGISTRY)
    if mod_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(mod_name, p)
        if spec is None or spec.loader is None:
            raise WorkloadError(f"cannot import workload file: {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]
            if isinstance(exc, WorkloadError):
                raise
            raise WorkloadError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    new = [w for k, w in _REGISTRY.items() if k not in before]
    return new or [w for w in _REGISTRY.values() if Path(w.source).resolve() == p]


def suites_dir() -> Path:
    """The built-in suites: ``detbench/suites/`` where installed, else a checkout's ``suites/``."""
    package = Path(__file__).resolve().parent.parent
    shipped = package / "suites"
    return shipped if shipped.is_dir() else package.parent / "suites"


def suite_helper(stem: str) -> ModuleType:
    """Import ``suites/STEM.py``, a suite's helper file, by its path once per process."""
    mod_name = f"detbench_suites_{stem}"
    module = sys.modules.get(mod_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(mod_name, suites_dir() / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    return module


def builtin_suite_files() -> dict[str, Path]:
    """Built-in suite name -> file. A suite file is named after its suite."""
    d = suites_dir()
    if not d.is_dir():
        return {}
    return {p.stem: p for p in sorted(d.glob("*.py")) if not p.name.startswith("_")}


def select_target(target: str) -> tuple[Path, list[str]]:
    """``FILE.py[:WORKLOAD]`` (audit's and locate's argument) -> the file and the keys of the
    workloads it names: all of the file's, or those whose name or key is WORKLOAD."""
    path, _, name = target.partition(":") if not Path(target).is_file() else (target, "", "")
    workloads = load_file(path)
    if not workloads:
        raise WorkloadError(
            f"{path} defines no workload (no function decorated with @detbench.workload)"
        )
    if not name:
        return Path(path), [w.key for w in workloads]
    matches = [w.key for w in workloads if name in (w.name, w.key)]
    if not matches:
        raise WorkloadError(
            f"no workload {name!r} in {path}; its workloads: "
            + ", ".join(w.name for w in workloads)
        )
    return Path(path), matches
