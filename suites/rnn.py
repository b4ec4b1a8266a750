"""rnn: recurrent layers (nn.RNN, nn.LSTM, nn.GRU) forward and backward, float32, multi-layer,
unidirectional and bidirectional, and one LSTM over packed variable-length sequences.

On CUDA these modules take cuDNN's RNN path (the native kernels when cuDNN is disabled). PyTorch
documents known run-to-run nondeterminism of the cuDNN RNN functions on some cuDNN and CUDA
versions, and its cure as cuBLAS's workspace setting (``CUBLAS_WORKSPACE_CONFIG=:16:8`` or
``:4096:2``), not ``cudnn.deterministic``. The modes with deterministic algorithms set that
variable to ``:4096:8`` unless the user has set it; whatever is in force is recorded.
The packed case adds the reordering of ``pack_padded_sequence(enforce_sorted=False)``: an
``index_select`` of the batch whose backward is an ``index_add``, which PyTorch lists among the CUDA
ops that ``use_deterministic_algorithms`` switches to a deterministic implementation. Here every
index occurs once (a permutation), so no two additions meet; the case shows what the switch costs.

Every case returns the output, the final hidden (and cell) state, and the gradients of the input
and of every parameter. One step is one batch of sequences: ``items_per_step`` counts sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import detbench


@dataclass(frozen=True)
class Size:
    batch: int
    seq: int  # time steps (the longest sequence in the packed case)
    input: int  # features per time step
    hidden: int  # per direction


@dataclass(frozen=True)
class Case:
    op: type[nn.Module]  # nn.RNN, nn.LSTM or nn.GRU
    source: str  # the kind of network the shape comes from
    layers: int
    bidirectional: bool
    quick: Size
    full: Size
    nonlinearity: str | None = None  # nn.RNN only: "tanh" or "relu"
    packed: bool = False  # variable lengths, through pack_padded_sequence


QUICK = Size(batch=8, seq=16, input=32, hidden=64)

CASES: dict[str, Case] = {
    # Elman RNN language model: two tanh layers, 1024 wide.
    "rnn_tanh_2layer": Case(
        nn.RNN,
        "Elman RNN language model",
        layers=2,
        bidirectional=False,
        quick=QUICK,
        full=Size(64, 256, 512, 1024),
        nonlinearity="tanh",
    ),
    # DeepSpeech2's recurrent layers: simple bidirectional RNNs with a ReLU.
    "rnn_relu_bidir_2layer": Case(
        nn.RNN,
        "DeepSpeech2 recurrent layers",
        layers=2,
        bidirectional=True,
        quick=QUICK,
        full=Size(64, 256, 1024, 1024),
        nonlinearity="relu",
    ),
    # GNMT-style stack: LSTM, 1024 wide, on 128-token sentences.
    "lstm_2layer": Case(
        nn.LSTM,
        "GNMT-style LSTM stack",
        layers=2,
        bidirectional=False,
        quick=QUICK,
        full=Size(64, 128, 1024, 1024),
    ),
    # Bidirectional LSTM encoder (speech frames or tokens), 512 per direction.
    "lstm_bidir_2layer": Case(
        nn.LSTM,
        "bidirectional LSTM encoder",
        layers=2,
        bidirectional=True,
        quick=QUICK,
        full=Size(64, 256, 512, 512),
    ),
    # GRU language model, 1024 wide.
    "gru_2layer": Case(
        nn.GRU,
        "GRU language model",
        layers=2,
        bidirectional=False,
        quick=QUICK,
        full=Size(64, 256, 512, 1024),
    ),
    # RNNsearch encoder widths (620-d embeddings, 1000 per direction), two layers.
    "gru_bidir_2layer": Case(
        nn.GRU,
        "RNNsearch-sized bidirectional GRU encoder",
        layers=2,
        bidirectional=True,
        quick=QUICK,
        full=Size(64, 128, 620, 1000),
    ),
    # The bidirectional LSTM encoder on a batch of unsorted, variable-length sequences.
    "lstm_bidir_packed": Case(
        nn.LSTM,
        "bidirectional LSTM encoder (variable lengths)",
        layers=2,
        bidirectional=True,
        quick=QUICK,
        full=Size(64, 256, 512, 512),
        packed=True,
    ),
}


GATES = {nn.RNN: 1, nn.LSTM: 4, nn.GRU: 3}


def _lengths(s: Size, seed: int) -> torch.Tensor:
    """Sequence lengths of the packed case: uniform in seq/4..seq, unsorted, the longest exactly
    seq, drawn from a generator of their own so the FLOP count below can draw the same ones."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(s.seq // 4, s.seq + 1, (s.batch,), generator=g)  # (N,)
    lengths[lengths.argmax()] = s.seq
    return lengths


def _flops(case: Case, s: Size, seed: int) -> int:
    """Matrix-multiply FLOPs of one forward and backward step, from the shapes.

    Each layer and direction does, per time step and sequence, ``gates`` projections of its input
    (I features in layer 0, D*H above) and of its hidden state (H): 2*gates*H*(I + H) FLOPs.
    The backward pass computes the gradients of the inputs and of the weights, each as costly as
    the forward: 3x in all. Elementwise gate arithmetic is not counted, as in
    ``torch.utils.flop_counter``, which cannot see inside cuDNN's fused RNN kernels at all.
    """
    steps = int(_lengths(s, seed).sum()) if case.packed else s.seq * s.batch
    directions = 2 if case.bidirectional else 1
    per_step = 0
    for layer in range(case.layers):
        features = s.input if layer == 0 else directions * s.hidden
        per_step += directions * 2 * GATES[case.op] * s.hidden * (features + s.hidden)
    return 3 * steps * per_step


def _register(name: str, case: Case) -> None:
    sizes = {"quick": case.quick, "full": case.full}
    params: dict[str, Any] = {
        "op": case.op.__name__,
        "from": case.source,
        "layers": case.layers,
        "bidirectional": case.bidirectional,
        **({"nonlinearity": case.nonlinearity} if case.nonlinearity else {}),
        **({"lengths": "random in seq/4..seq (unsorted)"} if case.packed else {}),
        "dtype": "float32",
        **{
            p: {"batch": s.batch, "seq": s.seq, "input": s.input, "hidden": s.hidden}
            for p, s in sizes.items()
        },
    }

    @detbench.workload(
        suite="rnn",
        name=name,
        params=params,
        items_per_step={p: s.batch for p, s in sizes.items()},
        flops_per_step=lambda ctx: _flops(case, sizes[ctx.profile], ctx.seed),
    )
    def factory(ctx: detbench.Context) -> Any:
        s = sizes[ctx.profile]
        options: dict[str, Any] = {"nonlinearity": case.nonlinearity} if case.nonlinearity else {}
        rnn = case.op(
            s.input, s.hidden, num_layers=case.layers, bidirectional=case.bidirectional, **options
        ).to(ctx.device)  # training mode: cuDNN's RNN backward refuses eval mode
        params = list(rnn.parameters())
        # (T, N, I): time-major, the layout cuDNN's RNN takes without a transpose.
        x = torch.randn(s.seq, s.batch, s.input, device=ctx.device, requires_grad=True)
        directions = 2 if case.bidirectional else 1
        # (T, N, D * H): a gradient for every output, padding included (the packed case drops it).
        grad_out = torch.randn(s.seq, s.batch, directions * s.hidden, device=ctx.device)

        if case.packed:
            # Lengths on the CPU (pack_padded_sequence wants them there), unsorted: the module
            # sorts the batch by length and restores the order afterwards.
            lengths = _lengths(s, ctx.seed)

            def run() -> tuple[torch.Tensor, Any]:
                packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
                out_packed, state = rnn(packed)
                # (T, N, D * H), zeros past each sequence's length
                out, _ = pad_packed_sequence(out_packed, total_length=s.seq)
                return out, state
        else:

            def run() -> tuple[torch.Tensor, Any]:
                return rnn(x)

        def step() -> list[torch.Tensor]:
            out, state = run()
            # h_n (L * D, N, H), and c_n of the same shape for an LSTM
            states = list(state) if isinstance(state, tuple) else [state]
            grads = torch.autograd.grad(out, [x, *params], grad_out)
            return [out.detach(), *(h.detach() for h in states), *grads]

        return step


for _name, _case in CASES.items():
    _register(_name, _case)
