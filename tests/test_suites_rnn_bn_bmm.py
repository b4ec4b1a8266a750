"""The rnn, batchnorm and bmm suites: every workload builds at the quick size, its steps return the
outputs and gradients they promise, and on CPU two seeded builds agree bitwise."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from detbench.core.seeding import seed_all
from detbench.core.workload import PROFILES, Context, Workload, builtin_suite_files, load_file
from detbench.worker import fingerprint as fp

from .conftest import requires_cuda

SUITES = ("rnn", "batchnorm", "bmm")
WORKLOADS: dict[str, Workload] = {
    w.key: w for suite in SUITES for w in load_file(builtin_suite_files()[suite])
}
CPU_QUICK = Context(torch.device("cpu"), "quick", 0)


def _case(w: Workload) -> Any:
    """The suite's CASES entry for ``w`` (None for a workload defined on its own)."""
    return getattr(sys.modules[w.factory.__module__], "CASES", {}).get(w.name)


def _expected_outputs(w: Workload) -> int:
    """How many tensors one step returns: outputs, then gradients (then running statistics)."""
    case = _case(w)
    if w.suite == "rnn":
        directions = 2 if case.bidirectional else 1
        states = 2 if case.op is torch.nn.LSTM else 1  # h_n (and c_n)
        weights = 4 * case.layers * directions  # w_ih, w_hh, b_ih, b_hh per layer and direction
        return 1 + states + 1 + weights  # output, states, grad of the input, grads of weights
    if w.suite == "batchnorm":
        # train: output, grads of input, weight and bias, running mean and variance
        return 6 if case.train else 2  # eval: output, grad of the input
    if case is None:  # bmm(sparse, dense): product, grad of the dense operand
        return 2
    return 3  # dense bmm: product, grads of both operands


def _gradients(w: Workload, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients among one step's outputs (see ``_expected_outputs`` for the order)."""
    case = _case(w)
    if w.suite == "rnn":
        return out[(3 if case.op is torch.nn.LSTM else 2) :]
    if w.suite == "batchnorm" and case.train:
        return out[1:4]
    return out[1:]


def _build(w: Workload, ctx: Context = CPU_QUICK) -> Any:
    seed_all(0)
    return w.factory(ctx)


def test_the_three_suites_are_loaded() -> None:
    counts = {s: sum(w.suite == s for w in WORKLOADS.values()) for s in SUITES}
    assert counts == {"rnn": 7, "batchnorm": 7, "bmm": 5}


@pytest.mark.parametrize("key", WORKLOADS)
def test_params_have_both_sizes_and_work_is_declared(key: str) -> None:
    w = WORKLOADS[key]
    for profile in PROFILES:
        sized = w.params.get(profile)
        assert isinstance(sized, dict) and sized, (key, profile)
        assert "batch" in sized
        ctx = Context(torch.device("cpu"), profile, 0)
        assert w.items(ctx) == sized["batch"]
        # The memory-bound cases declare bytes moved; the FLOP counter covers the others.
        memory_bound = w.suite == "batchnorm" or "sparse" in w.name
        assert (w.bytes(ctx) is not None) == memory_bound, key
        if memory_bound:
            assert w.bytes(ctx) > 0  # type: ignore[operator]
    # The full size is the larger one.
    assert w.items(Context(torch.device("cpu"), "full", 0)) > w.items(CPU_QUICK)


@pytest.mark.parametrize("key", WORKLOADS)
def test_quick_steps_return_outputs_and_gradients(key: str) -> None:
    w = WORKLOADS[key]
    step = _build(w)
    for _ in range(2):
        out = list(step())
        assert len(out) == _expected_outputs(w), key
        for i, t in enumerate(out):
            assert isinstance(t, torch.Tensor), (key, i)
            assert t.numel() > 0 and t.device.type == "cpu", (key, i)
            assert bool(torch.isfinite(t).all()), (key, i)
        # Every gradient was computed, and carries something.
        assert all(bool(g.ne(0).any()) for g in _gradients(w, out)), key


@pytest.mark.parametrize("key", [k for k in WORKLOADS if k.startswith("bmm/")])
def test_bmm_runs_in_its_own_dtype_on_cpu(key: str) -> None:
    w = WORKLOADS[key]
    out = _build(w)()
    assert {t.dtype for t in out} == {getattr(torch, w.params["dtype"])}, key


def test_packed_lstm_pads_short_sequences_with_zeros() -> None:
    out = _build(WORKLOADS["rnn/lstm_bidir_packed"])()[0]  # (T, N, 2 * H)
    seq, batch, _ = out.shape
    # Lengths are drawn in [seq/4, seq]: at the last step, sequences that ended are all zeros...
    ended = out[-1].eq(0).all(dim=-1)
    assert 0 < int(ended.sum()) < batch
    # ... while in the first quarter every sequence is still running.
    assert not out[: seq // 4].eq(0).all(dim=-1).any()


def test_batchnorm_training_updates_running_statistics() -> None:
    step = _build(WORKLOADS["batchnorm/batchnorm2d_train_resnet50_stage1"])
    first = [t.clone() for t in step()[-2:]]
    second = step()[-2:]
    assert all(not torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("key", WORKLOADS)
def test_two_seeded_builds_agree_bitwise_on_cpu(key: str) -> None:
    # Observed: every workload of these suites gave the same bits in every replicate and mode
    # (default, det-algos, cudnn-det+det-algos) on a 2-thread CPU.
    w = WORKLOADS[key]
    runs = []
    for _ in range(2):
        step = _build(w)
        runs.append([fp.step_digest(list(step())) for _ in range(2)])
    assert runs[0] == runs[1], key


@requires_cuda
@pytest.mark.parametrize("key", WORKLOADS)
def test_quick_steps_on_cuda(key: str) -> None:
    w = WORKLOADS[key]
    out = _build(w, Context(torch.device("cuda"), "quick", 0))()
    torch.cuda.synchronize()
    assert len(out) == _expected_outputs(w), key
    assert all(t.device.type == "cuda" and bool(torch.isfinite(t).all()) for t in out), key
