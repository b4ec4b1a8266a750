"""How each setting of ``detbench.core.settings`` reads, applies and probes itself in torch. Every
torch attribute is reached at call time, never at import, and a missing API is a reason string
(``unavailable``), never an exception."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"


def torch_module() -> Any:
    import torch

    return torch


def quiet(get: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy TF32 flags warn about their successors
        return get()


def onoff(value: Any) -> str:
    return "on" if bool(value) else "off"


def switch(owner: Callable[[], Any], attr: str) -> tuple[Callable[[], str], Callable[[str], None]]:
    """Reader and applier of the boolean ``attr`` of ``owner()``, as "on" or "off"."""

    def read() -> str:
        return onoff(getattr(owner(), attr))

    def apply(level: str) -> None:
        setattr(owner(), attr, level == "on")

    return read, apply


read_fill, apply_fill = switch(
    lambda: torch_module().utils.deterministic, "fill_uninitialized_memory"
)


def read_warn_only() -> str:
    return onoff(torch_module().is_deterministic_algorithms_warn_only_enabled())


def apply_warn_only(level: str) -> None:
    # warn_only is an argument of use_deterministic_algorithms: applied with the mode's flag.
    torch = torch_module()
    torch.use_deterministic_algorithms(
        torch.are_deterministic_algorithms_enabled(), warn_only=level == "on"
    )


def read_matmul_precision() -> str:
    return str(quiet(torch_module().get_float32_matmul_precision))


def apply_matmul_precision(level: str) -> None:
    torch_module().set_float32_matmul_precision(level)


def _cudnn_fp32_precision_api() -> tuple[Any, Any] | None:
    """cuDNN's per-op ``fp32_precision`` (conv, rnn) of torch 2.9+, or None (only ``allow_tf32``).
    Mixing the two APIs in one process can raise (pytorch#179445), so the new one wins."""
    cudnn = torch_module().backends.cudnn
    conv, rnn = getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None)
    if conv is None or rnn is None or not hasattr(conv, "fp32_precision"):
        return None
    return conv, rnn


def _effective(setting: Any, parent: Any, legacy: Callable[[], bool]) -> bool:
    """Whether an fp32_precision setting means TF32: its own value, else its parent's ("none"
    inherits), else the legacy flag's default."""
    for value in (
        getattr(setting, "fp32_precision", "none"),
        getattr(parent, "fp32_precision", "none"),
    ):
        if value != "none":
            return bool(value == "tf32")
    return bool(quiet(legacy))


def read_cudnn_tf32() -> str:
    """ "on" where cuDNN may run fp32 convolutions and RNNs in TF32 (both, with torch 2.9+)."""
    cudnn = torch_module().backends.cudnn
    legacy = lambda: cudnn.allow_tf32  # noqa: E731
    api = _cudnn_fp32_precision_api()
    if api is None:
        return onoff(quiet(legacy))
    return onoff(all(_effective(op, cudnn, legacy) for op in api))


def cudnn_tf32_snippet(level: str) -> list[str]:
    """The lines that set cuDNN's TF32 switch, in the API ``apply_cudnn_tf32`` uses here."""
    if _cudnn_fp32_precision_api() is None:
        return [f"torch.backends.cudnn.allow_tf32 = {level == 'on'}"]
    value = "tf32" if level == "on" else "ieee"
    return [f'torch.backends.cudnn.{op}.fp32_precision = "{value}"' for op in ("conv", "rnn")]


def apply_cudnn_tf32(level: str) -> None:
    """TF32 for cuDNN's fp32 convolutions and RNNs (conv and rnn together, so they never differ)."""
    torch = torch_module()
    api = _cudnn_fp32_precision_api()
    if api is None:
        quiet(lambda: setattr(torch.backends.cudnn, "allow_tf32", level == "on"))
        return
    for op in api:
        op.fp32_precision = "tf32" if level == "on" else "ieee"


def reduction(dtype: str, split_k: bool) -> tuple[Callable[[], str], Callable[[str], None]]:
    """Reader and applier of cuBLAS's reduced-precision reduction for fp16 or bf16, or of its
    split-K half (torch 2.8+: a second boolean of the same attribute)."""
    attr = f"allow_{dtype}_reduced_precision_reduction"

    def read() -> str:
        matmul = torch_module().backends.cuda.matmul
        return onoff(getattr(matmul, attr + ("_split_k" if split_k else "")))

    def apply(level: str) -> None:
        matmul = torch_module().backends.cuda.matmul
        if split_k:
            setattr(matmul, attr, (bool(getattr(matmul, attr)), level == "on"))
        else:  # keep the split-K half as it is, where the installed torch has one
            try:
                keep = bool(getattr(matmul, attr + "_split_k"))
            except AttributeError:
                setattr(matmul, attr, level == "on")
                return
            setattr(matmul, attr, (level == "on", keep))

    return read, apply


def read_cublas() -> str:
    return os.environ.get(CUBLAS_ENV) or "unset"


def apply_cublas(level: str) -> None:
    # The runner sets it in the worker's environment; this lets a restore undo a workload's change.
    if level == "unset":
        os.environ.pop(CUBLAS_ENV, None)
    else:
        os.environ[CUBLAS_ENV] = level


#: SDPA backend level -> the member of ``torch.nn.attention.SDPBackend`` it allows alone.
SDPA_BACKENDS = {
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}
#: The global flags ``sdpa_kernel`` sets, read back per backend.
_SDPA_FLAGS = {
    "math": "math_sdp_enabled",
    "flash": "flash_sdp_enabled",
    "efficient": "mem_efficient_sdp_enabled",
    "cudnn": "cudnn_sdp_enabled",
}
#: The process-wide ``sdpa_kernel`` context a worker holds open for its whole life.
_SDPA_STACK = contextlib.ExitStack()


def read_sdpa() -> str:
    cuda = torch_module().backends.cuda
    enabled = [lvl for lvl, fn in _SDPA_FLAGS.items() if getattr(cuda, fn, lambda: True)()]
    if len(enabled) == len(_SDPA_FLAGS):
        return "default"
    if len(enabled) == 1:
        return enabled[0]
    return "+".join(enabled) or "none"


def apply_sdpa(level: str) -> None:
    _SDPA_STACK.close()  # a restore re-enters from torch's own state
    if level == "default":
        cuda = torch_module().backends.cuda
        for fn in _SDPA_FLAGS.values():
            enable = getattr(cuda, "enable_" + fn.removesuffix("_enabled"), None)
            if enable is not None:
                enable(True)
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _SDPA_STACK.enter_context(sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[level])))


def sdpa_snippet(level: str) -> list[str]:
    """The process-wide form of ``with sdpa_kernel(SDPBackend.X):``: the flags it sets."""
    if level == "default":
        return []
    lines = [f"# as `with torch.nn.attention.sdpa_kernel(SDPBackend.{SDPA_BACKENDS[level]}):`"]
    for lvl, fn in _SDPA_FLAGS.items():
        lines.append(f"torch.backends.cuda.enable_{fn.removesuffix('_enabled')}({lvl == level})")
    return lines


INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def inductor_config() -> Any:
    """``torch._inductor.config``. Its import makes inductor's cache directory and puts its path
    in ``os.environ``; a process without a directory of its own (a worker has the runner's)
    imports it with a scratch one, removed at once, so no cache path reaches its workers."""
    import sys

    if "torch._inductor.config" in sys.modules or os.environ.get(INDUCTOR_CACHE_ENV):
        import torch._inductor.config as cfg

        return cfg
    import shutil
    import tempfile

    scratch = tempfile.mkdtemp(prefix="detbench-inductor-import-")
    os.environ[INDUCTOR_CACHE_ENV] = scratch
    try:
        import torch._inductor.config as cfg
    finally:
        os.environ.pop(INDUCTOR_CACHE_ENV, None)
        shutil.rmtree(scratch, ignore_errors=True)
    return cfg


read_inductor_det, apply_inductor_det = switch(inductor_config, "deterministic")
# batch_invariant is missing from dir(config) on torch 2.13, but reading and setting it work.
read_inductor_batch_invariant, apply_inductor_batch_invariant = switch(
    inductor_config, "batch_invariant"
)


@functools.cache
def inductor_tied() -> bool:
    """Whether ``use_deterministic_algorithms`` sets ``torch._inductor.config.deterministic``
    here (torch 2.13 does, and dynamo calls it after each frame, so a level of its own does not
    hold): probed by re-stating the flag and seeing whether inductor's follows, then restored."""
    torch = torch_module()
    try:
        cfg = inductor_config()
        before = bool(cfg.deterministic)
    except (AttributeError, ImportError, RuntimeError):
        return False
    det = torch.are_deterministic_algorithms_enabled()
    warn = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        cfg.deterministic = not det
        torch.use_deterministic_algorithms(det, warn_only=warn)
        return bool(cfg.deterministic) == det
    finally:
        cfg.deterministic = before


def inductor_tie_reason(level: str) -> str:
    """Why ``inductor_deterministic=level`` cannot hold here (``inductor_tied``)."""
    other = "off" if level == "on" else "on"
    return (
        f"torch {torch_module().__version__} ties torch._inductor.config.deterministic to "
        f"deterministic algorithms (use_deterministic_algorithms sets it, and dynamo calls that "
        f"after compiling each frame), so inductor_deterministic={level} cannot hold with "
        f"deterministic algorithms {other}"
    )


def needs(probe: Callable[[], Any], what: str) -> Callable[[], str | None]:
    """Why this torch lacks ``what`` (``probe`` failed), or None; asked once per process."""

    @functools.cache
    def unavailable() -> str | None:
        try:
            quiet(probe)
        except (AttributeError, ImportError, RuntimeError) as exc:
            return f"torch {torch_module().__version__} has no {what} ({type(exc).__name__})"
        return None

    return unavailable


def always() -> str | None:
    return None


def compile_unavailable() -> str | None:
    if not hasattr(torch_module(), "compile"):
        return f"torch {torch_module().__version__} has no torch.compile"
    return None


#: World sizes a run may ask for (ranks per launch, one node).
WORLD_SIZES = ("1", "2", "4", "8")
#: DDP bucket sizes in MiB: torch's default 25, one bucket per few layers (1), one for all (100).
BUCKET_CAPS = ("1", "25", "100")
#: NCCL_ALGO values that NCCL documents (CollNet needs a SHARP network, NVLS NVSwitch, PAT 2.23+).
NCCL_ALGOS = ("unset", "Ring", "Tree", "NVLS", "NVLSTree", "CollnetDirect", "CollnetChain", "PAT")
#: NCCL_PROTO values that NCCL documents.
NCCL_PROTOS = ("unset", "Simple", "LL", "LL128")
#: Setting name -> the environment variable of the ranks it sets.
NCCL_ENV = {"nccl_algo": "NCCL_ALGO", "nccl_proto": "NCCL_PROTO"}


def nccl_read_back(rec: dict[str, Any], read_back: Any) -> None:
    """Into a distributed record: ``nccl_env`` as rank 0 read it after ``init_process_group``,
    and with NCCL the columns from it (torch may set ``NCCL_ALGO`` itself, e.g. ``^NVLS``)."""
    if not isinstance(read_back, dict):
        return
    rec["nccl_env"] = read_back
    if rec.get("backend") == "nccl":
        for name, var in NCCL_ENV.items():
            rec[name] = read_back.get(var)


def env_snippet(var: str, level: str) -> list[str]:
    if level == "unset":
        return [f"# {var} unset in the ranks' environment"]
    return [f"# in the ranks' environment, before torchrun: {var}={level}"]


def nccl_environment(env: dict[str, str], levels: dict[str, str]) -> dict[str, str]:
    """``env`` with the NCCL variables the levels ask for; ``unset`` removes an inherited one."""
    out = dict(env)
    for name, var in NCCL_ENV.items():
        level = levels.get(name, "unset")
        if level == "unset":
            out.pop(var, None)
        else:
            out[var] = level
    return out
