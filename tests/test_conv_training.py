"""The conv and training suites: FLOPs counted per step, losses recorded per step."""

from __future__ import annotations

import torch

from detbench.core.seeding import seed_all
from detbench.core.workload import Context, builtin_suite_files, load_file
from detbench.worker.flops import count_flops

CPU_QUICK = Context(torch.device("cpu"), "quick", 0)


def _workloads(suite: str) -> dict[str, object]:
    return {w.name: w for w in load_file(builtin_suite_files()[suite])}


def _conv_macs(batch: int, cout: int, cin_per_group: int, kernel: int, out_hw: int) -> int:
    return batch * cout * cin_per_group * kernel * kernel * out_hw * out_hw


def test_conv_flops_are_counted_forward_and_backward() -> None:
    convs = _workloads("conv")
    # Stem, quick: (2, 3, 64, 64) -> 64 channels, 7x7 stride 2 -> 32x32. Forward, grad input and
    # grad weight each cost the forward's multiply-adds (2 FLOPs each); the bias gradient is a sum.
    step = convs["conv2d_resnet50_stem"].factory(CPU_QUICK)  # type: ignore[attr-defined]
    assert count_flops(step) == 3 * 2 * _conv_macs(2, 64, 3, 7, 32)
    # Depthwise (groups == 96 channels): each output channel sees one input channel. torch's own
    # backward formula ignores groups; detbench's count must not.
    step = convs["conv2d_depthwise_mobilenetv2"].factory(CPU_QUICK)  # type: ignore[attr-defined]
    assert count_flops(step) == 3 * 2 * _conv_macs(4, 96, 1, 3, 14)


def test_training_steps_put_the_loss_first_and_learn() -> None:
    for name, w in _workloads("training").items():
        assert w.loss_output == 0, name  # type: ignore[attr-defined]
        seed_all(0)
        step = w.factory(CPU_QUICK)  # type: ignore[attr-defined]
        losses = [float(step()[0]) for _ in range(8)]
        assert all(torch.isfinite(torch.tensor(losses))), name
        # Eight steps on one fixed batch: the loss goes down (the optimizer step is really there).
        assert losses[-1] < losses[0], (name, losses)


def test_declared_rnn_flops_agree_with_torchs_counter_where_it_can_see() -> None:
    # On CPU, nn.RNN and nn.GRU run as plain matmuls that torch's FLOP formulas see; the declared
    # count (needed because cuDNN's fused RNN kernels are invisible to them) must agree.
    for name, w in _workloads("rnn").items():
        if name.startswith("lstm") and "packed" not in name:
            continue  # oneDNN's fused LSTM kernel: nothing to compare with on CPU either
        seed_all(0)
        step = w.factory(CPU_QUICK)  # type: ignore[attr-defined]
        declared = w.declared_flops(CPU_QUICK)  # type: ignore[attr-defined]
        counted = count_flops(step)
        assert counted is not None and abs(declared - counted) / counted < 0.02, name


def test_sparse_operands_are_not_counted_as_dense() -> None:
    i = torch.tensor([[0, 0, 1], [0, 5, 7], [3, 1, 2]])  # (batch, row, col) of 3 nonzeros
    sparse = torch.sparse_coo_tensor(i, torch.ones(3), (2, 8, 8), check_invariants=True)
    dense = torch.randn(2, 8, 4)
    assert count_flops(lambda: [torch.bmm(sparse, dense)]) is None
    assert count_flops(lambda: [torch.bmm(dense.transpose(1, 2), dense)]) == 2 * 2 * 4 * 8 * 4
