"""The workload declarations that the settings act on (``autocast``, ``attention``), and the ops
suite's settings workloads: SDPA forward and backward per backend, split-K half GEMMs, and memory
from ``torch.empty`` written whole or returned unwritten. Real torch runs on this CPU, quick
profile; the only ``torch.compile`` here is the one of ``ops/cumsum``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch.nn.attention import SDPBackend, sdpa_kernel

import detbench
from detbench.core.seeding import seed_all
from detbench.core.workload import (
    Context,
    Step,
    Workload,
    WorkloadError,
    builtin_suite_files,
    load_file,
    registry,
)
from detbench.worker import fingerprint as fp
from detbench.worker.measure import UNSUPPORTED_MARKERS

from .conftest import ROOT

ALL: dict[str, Workload] = {
    w.key: w for path in builtin_suite_files().values() for w in load_file(path)
}
CPU_QUICK = Context(torch.device("cpu"), "quick", 0)
NEW = (
    "ops/sdpa_backward",
    "ops/sdpa_causal_backward",
    "ops/mm_fp16_splitk",
    "ops/mm_bf16_splitk",
    "ops/cat_into_empty",
    "ops/empty_uninitialized",
)
SDPA = ("ops/sdpa_backward", "ops/sdpa_causal_backward")
# Plain functions of tensors made at build time: torch.compile takes each whole (one graph).
COMPILABLE = (
    "ops/cumsum",
    "ops/scatter_reduce_sum",
    "ops/scatter_reduce_mean",
    "ops/scatter_reduce_prod",
)


def _build(key: str) -> Step:
    seed_all(0)
    return ALL[key].factory(CPU_QUICK)


@pytest.fixture
def deterministic() -> Iterator[None]:
    """``use_deterministic_algorithms(True)`` (the fill on, torch's default) for one test, and
    the process's settings as they were afterwards."""
    was = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
    )
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        torch.utils.deterministic.fill_uninitialized_memory = was[2]  # type: ignore[attr-defined]


# --- Declarations. -----------------------------------------------------------------------------
def test_training_workloads_declare_autocast_and_the_transformer_attention() -> None:
    training = {k: w for k, w in ALL.items() if w.suite == "training"}
    assert set(training) == {
        "training/resnet18_cifar",
        "training/lstm_language_model",
        "training/transformer_encoder",
    }
    assert all(w.autocast for w in training.values())
    assert {k for k, w in training.items() if w.attention} == {"training/transformer_encoder"}


def test_attention_is_declared_by_exactly_the_workloads_that_call_sdpa() -> None:
    # The invariance and models suites' attention cases are their own
    # (tests/test_suite_invariance.py, tests/test_models_suite.py).
    declared = {
        k for k, w in ALL.items() if w.attention and w.suite not in ("invariance", "models")
    }
    assert declared == {
        "training/transformer_encoder",
        "ops/scaled_dot_product_attention_backward",
        "distributed/ddp_transformer_block",
        *SDPA,
    }
    for key in SDPA:
        assert ALL[key].autocast, key


def test_autocast_is_declared_by_float32_conv_and_dense_bmm_only() -> None:
    conv = [w for w in ALL.values() if w.suite == "conv"]
    assert conv and all(w.autocast and w.params["dtype"] == "float32" for w in conv)
    bmm = {w.name: w.autocast for w in ALL.values() if w.suite == "bmm"}
    assert bmm == {
        "bmm_attention_scores_fp32": True,
        "bmm_attention_scores_fp16": False,
        "bmm_attention_scores_bf16": False,
        "bmm_moe_experts_fp32": True,
        "bmm_sparse_coo_fp32": False,  # no half-precision sparse-dense bmm (see suites/bmm.py)
    }
    # Undeclared means False: BatchNorm has nothing for autocast to cast.
    assert not any(w.autocast or w.attention for w in ALL.values() if w.suite == "batchnorm")


def test_the_sparse_bmm_cannot_run_under_autocast_on_cpu() -> None:
    # Why bmm_sparse_coo_fp32 does not declare autocast: autocast casts its sparse operand too.
    step = _build("bmm/bmm_sparse_coo_fp32")
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="bmm"):
        step()


def test_the_split_k_gemms_are_already_half_and_do_not_declare_autocast() -> None:
    assert not ALL["ops/mm_fp16_splitk"].autocast and not ALL["ops/mm_bf16_splitk"].autocast


@pytest.mark.parametrize("flag", ["autocast", "attention"])
def test_a_flag_that_is_not_a_bool_is_one_line_error(flag: str) -> None:
    with pytest.raises(WorkloadError) as err:
        detbench.workload(suite="flags", items_per_step=1, **{flag: "yes"})  # type: ignore[arg-type]
    assert str(err.value) == f"workload {flag} must be True or False, not 'yes'"
    assert not any(k.startswith("flags/") for k in registry())  # nothing was registered


# --- The new workloads, quick profile on CPU. ---------------------------------------------------
@pytest.mark.parametrize("key", NEW)
def test_params_say_what_each_setting_does_to_it(key: str) -> None:
    w = ALL[key]
    assert w.source.endswith("ops.py") and Path(w.source).name == "ops.py"
    assert isinstance(w.params["settings"], str) and w.params["settings"]
    assert isinstance(w.params["quick"], dict) and isinstance(w.params["full"], dict)
    quick, full = (Context(torch.device("cpu"), p, 0) for p in ("quick", "full"))
    assert 0 < w.items(quick) <= w.items(full)
    assert 0 < w.bytes(quick) < w.bytes(full)  # type: ignore[operator]


def _check_steps(key: str, finite: bool = True) -> list[list[torch.Tensor]]:
    step = _build(key)
    runs = [list(step()) for _ in range(2)]
    for out in runs:
        assert out and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in out)
        if finite:
            assert all(bool(torch.isfinite(t).all()) for t in out), key
    return runs


@pytest.mark.parametrize("key", NEW)
def test_new_workloads_step_with_default_flags(key: str) -> None:
    _check_steps(key, finite=key != "ops/empty_uninitialized")


@pytest.mark.parametrize("key", NEW)
def test_new_workloads_step_under_deterministic_algorithms(key: str, deterministic: None) -> None:
    # empty_uninitialized is NaN here (its own test below); the others write every element.
    _check_steps(key, finite=key != "ops/empty_uninitialized")


@pytest.mark.parametrize(("key", "dtype"), [("ops/mm_fp16_splitk", torch.float16),
                                            ("ops/mm_bf16_splitk", torch.bfloat16)])  # fmt: skip
def test_split_k_gemms_are_half_precision_products(key: str, dtype: torch.dtype) -> None:
    sizes = ALL[key].params["quick"]
    assert sizes["k"] >= 16 * max(sizes["m"], sizes["n"])  # a long K: the split-K shape
    (out,) = _build(key)()
    assert out.dtype == dtype and out.shape == (sizes["m"], sizes["n"])
    assert ALL[key].params["dtype"] == str(dtype).removeprefix("torch.")


def test_empty_uninitialized_is_nan_under_deterministic_algorithms_with_the_fill(
    deterministic: None,
) -> None:
    step = _build("ops/empty_uninitialized")
    for _ in range(3):
        (out,) = step()
        assert out.numel() == ALL["ops/empty_uninitialized"].params["quick"]["n"]
        assert bool(out.isnan().all())


def _aslr() -> bool:
    knob = Path("/proc/sys/kernel/randomize_va_space")
    return knob.exists() and knob.read_text().strip() != "0"


@pytest.mark.skipif(not _aslr(), reason="needs address-space randomisation (Linux)")
def test_empty_uninitialized_differs_between_fresh_processes_by_default() -> None:
    # What the allocator's memory held: on this CPU, freed data and glibc's free-list pointers,
    # which depend on where the heap was mapped. Observed: a different digest in every process.
    code = (
        "import torch\n"
        "from detbench.worker import fingerprint as fp\n"
        "from detbench.core.seeding import seed_all\n"
        "from detbench.core.workload import Context, builtin_suite_files, load_file\n"
        "w = {x.name: x for x in load_file(builtin_suite_files()['ops'])}['empty_uninitialized']\n"
        "seed_all(0)\n"
        "step = w.factory(Context(torch.device('cpu'), 'quick', 0))\n"
        "print(fp.step_digest(list(step()), 'sha256'))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    digests = {p.communicate(timeout=300)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(digests) >= 2, digests


def test_cat_into_empty_gives_the_same_bits_with_the_fill_on_or_off(deterministic: None) -> None:
    digests = set()
    for fill in (True, False):
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
        digests.add(fp.step_digest(list(_build("ops/cat_into_empty")()), "sha256"))
    torch.use_deterministic_algorithms(False)
    digests.add(fp.step_digest(list(_build("ops/cat_into_empty")()), "sha256"))
    assert len(digests) == 1


# --- SDPA per backend on CPU. -------------------------------------------------------------------
@pytest.mark.parametrize("key", SDPA)
def test_sdpa_runs_under_math_and_flash_and_they_agree(key: str) -> None:
    results = {}
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend):
            results[backend] = list(_build(key)())
    assert len(results[SDPBackend.MATH]) == 4  # output, grads of q, k and v
    for a, b in zip(results[SDPBackend.MATH], results[SDPBackend.FLASH_ATTENTION], strict=True):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION])
def test_sdpa_backends_the_cpu_lacks_raise_what_is_recorded_unsupported(
    backend: SDPBackend,
) -> None:
    # The CPU has only the math and flash kernels: the memory-efficient and cuDNN levels of the
    # sdpa_backend setting raise, with the message that detbench records as `unsupported`.
    step = _build("ops/sdpa_backward")
    with sdpa_kernel(backend), pytest.raises(RuntimeError) as err:
        step()
    assert any(m in str(err.value) for m in UNSUPPORTED_MARKERS), err.value


def test_sdpa_runs_under_autocast_on_cpu() -> None:
    step = _build("ops/sdpa_backward")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, *grads = step()
    assert out.dtype == torch.bfloat16  # attention in bfloat16
    assert all(g.dtype == torch.float32 for g in grads)  # gradients of the float32 leaves


# --- torch.compile. ------------------------------------------------------------------------------
@pytest.mark.parametrize("key", COMPILABLE)
def test_cumsum_and_scatter_reduce_steps_trace_whole(key: str) -> None:
    explained = torch._dynamo.explain(_build(key))()  # traces only, no inductor compile
    torch._dynamo.reset()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), key


def test_compiled_cumsum_runs_on_cpu() -> None:
    step = _build("ops/cumsum")
    (eager,) = step()
    compiled = torch.compile(step)
    (first,), (second,) = compiled(), compiled()
    torch._dynamo.reset()
    torch.testing.assert_close(first, eager)
    assert torch.equal(first, second)
