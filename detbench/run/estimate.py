"""How long a plan should take: the cost model behind ``--dry-run``, the plan line of every run
and the progress line's first guess. Every record costs its overhead plus the expected share of
its timing budget; the first worker's start-up (measured by a dry run), what later workers'
start-ups cannot hide and their device stages (which wait for the last timing sample before
them) are added, and so are torchrun launches and invariance passes. Each
constant says where its value was measured, or that it is a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from detbench.core import settings as st

if TYPE_CHECKING:
    from detbench.core.modes import Mode
    from detbench.run.schedule import Plan, Slot

#: Seconds a record costs beyond its timing budget, per device and profile: building the workload,
#: its fingerprint steps, the FLOP count, warm-up and clean-up. CPU quick: from the published CPU
#: matrix of the version before (build, fingerprint, count and clean-up 0.02 s per record, plus
#: warm-up), set before the stopping rule existed and checked against later runs (README, "Plan
#: and estimate"). The others are guesses until a run measures them; on CUDA ``--dry-run`` says
#: so.
RECORD_OVERHEAD_SECONDS = {
    ("cpu", "quick"): 0.035,
    ("cpu", "full"): 0.3,
    ("cuda", "quick"): 0.05,
    ("cuda", "full"): 0.15,
}
#: The share of its budget a record spends sampling before the stopping rule ends it, on average
#: (records that reach their target early spend less). CPU: set from the matrix run before the
#: stopping rule existed, and checked since (README, "Plan and estimate"). CUDA: a guess until a
#: GPU run measures it: GPU kernel times are steady, so +-1% should often come within 6-16
#: samples of budget/50 each.
BUDGET_SHARE = {"cpu": 0.75, "cuda": 0.5}
#: What the warm-up until steady (issue 29, ``worker/warmup.py``) costs a record beyond the fixed
#: warm-up steps the figures above were measured with, as a share of its budget (the warm-up's
#: ceiling). CPU: 0.046 s per record at the quick profile's 0.1 s budget (the mean over the 120
#: records of conv, bmm, batchnorm and rnn, 2 modes x 2 replicates, on the 2-core development
#: CPU on 2026-11-26: warm-up 0.071 s against 3 of the record's median steps; 100 of 120
#: settled), so 0.45. CUDA: 0, from the H100's recorded samples
#: (results/20261126-060355-cuda-full-h100-partial): the new warm-up, simulated on them, costs 126
#: ms per record on average against the old 5 steps' and block-size step's 146 ms (the H200's:
#: 124 against 146), so the suites' measured figures stand; a GPU run is to confirm it.
WARMUP_SHARE = {"cpu": 0.45, "cuda": 0.0}
#: Seconds of one torchrun launch, per device: a worker with distributed workloads makes one
#: (``detbench.distributed.launch``), whose ranks each import torch and join the process group. CPU:
#: 4.9-5.3 s per launch of 2 gloo ranks running the distributed suite, measured on the 2-core VM
#: (README, "Distributed"). CUDA: 17-19 s per launch of one NCCL rank on the H100 (``phases.launch``
#: of results/20261124-084754-cuda-full-distributed-world1, 8-11 s of it the rank's set-up, the
#: measurement of its 3 workloads 0.3-1.1 s each): 18 s, the measurement of the distributed
#: records included (they are charged nothing beside it on CUDA).
LAUNCH_SECONDS = {"cpu": 5.0, "cuda": 18.0}
#: Seconds of one record by suite, per (device, profile), where a run measured them: the mean over
#: the suite's records of their phases summed (build + fingerprint + FLOP count + timing +
#: clean-up; the worker's start-up is counted apart). CUDA full: on the H200 (torch 2.11, all 10
#: modes, 824 records of ``make bench``, the warm-up of 5 fixed steps and the 0.3 s budget;
#: /work/shared/gpu-runs/20261126-040517-cuda-full-h200-partial/results.jsonl), in the modes with
#: cuDNN on: conv 0.307 s (220 records), rnn 0.70 s (140), batchnorm 0.218 s (140), bmm 0.371 s
#: (100), training 1.90 s (59). The H100 of the same code and options
#: (results/20261126-060355-cuda-full-h100-partial, 736 records): conv 0.287, rnn 0.697,
#: batchnorm 0.183, bmm 0.375, training 1.96 s. cudnn.benchmark's autotuning is included (the
#: bench modes ran). The modes without cuDNN: below.
SUITE_RECORD_SECONDS: dict[tuple[str, str], dict[str, float]] = {
    ("cuda", "full"): {
        "conv": 0.307,
        "rnn": 0.70,
        "training": 1.90,
        "batchnorm": 0.218,
        "bmm": 0.371,
    },
}
#: Seconds of one record by suite in the modes with cuDNN off (``no-cudnn``,
#: ``no-cudnn+det-algos``: ``cudnn.enabled`` off), where a run measured them: native convolutions
#: and RNNs are slower, and training's ResNet-18 runs native convolutions too. CUDA full, on the
#: H200 (the run above, its 99 no-cudnn and 66 no-cudnn+det-algos records): conv 0.66 s (55
#: records), rnn 3.85 s (35), batchnorm 0.233 s (35), bmm 0.365 s (25), training 5.30 s (15). The
#: H100's (the run above): conv 0.661, rnn 4.26, batchnorm 0.187, bmm 0.344, training 5.98 s.
NO_CUDNN_RECORD_SECONDS: dict[tuple[str, str], dict[str, float]] = {
    ("cuda", "full"): {
        "conv": 0.66,
        "rnn": 3.85,
        "batchnorm": 0.233,
        "bmm": 0.365,
        "training": 5.30,
    },
}
#: Seconds the timing rule of issue 29 (items 3 and 4) adds to a record whose figure above was
#: measured before it, per (device, profile): sampling past the budget towards its ceiling while
#: the target is in reach (``worker/budget.py``), 0.069 s a record on the H100's recorded samples
#: and 0.075 s on the H200's (``tools/sample_budget.py`` on the two runs above, replayed), and the
#: sustained-clock probe's extension of a pass shorter than 0.25 s (``worker/sustain.py``), about
#: 33 s over the core matrix's 990 records (0.033 s a record). Estimates until a GPU run measures
#: them. Not included: the hold where the power limit acts (about 2.9 s for each record it holds),
#: since how many records it holds is known only after a GPU run.
TIMING_RULE_ADDED_SECONDS = {("cuda", "full"): 0.072 + 0.033}
#: Seconds of one record of a workload, its batch-invariance pass included, where known. CUDA full,
#: estimates from the one H100 record of decoder_greedy_invariant at batch 64
#: (results/20261124-084508-cuda-full-decoder: build 0.19 s, FLOP count 9.46 s, fingerprint
#: 8.07 s, invariance pass 3.99 s, timing 28.7 s; 2.35 s per step of 64 decodes, 37 ms per
#: decode): at batch 4 and 2 fingerprint steps (suites/invariance.py), 0.19 + 9.46 / 16 (count)
#: + 2 x 0.147 (fingerprint) + 3.99 (invariance, its sizes unchanged) + 11 x 0.147 (5 warm-up
#: steps and at least 6 samples) = 6.7 s. decoder_greedy (one batched decode per step, host-bound
#: as well): a step about one decode, 37 ms; 0.19 + 0.15 (count) + 3 x 0.037 + 12 sizes x 0.2
#: (a build and a step at each) + 0.3 (its budget) = 3.2 s. Both are paper estimates. The
#: recipes suite's DataLoader epochs with 2 worker processes (its sizes are the same in every
#: profile): 1.27 s per record of dataloader__global_seeds_only on the H100 in cuda quick
#: (results/20261124-082858-cuda-gpu-check: build 0.002, FLOP count 0.1 in the first worker,
#: fingerprint 0.31-0.46, timing 0.80-0.87 s at 0.083-0.095 s per step, its 6 samples and 2
#: warm-up steps outlasting the budget), plus the 3 more warm-up steps of full at 0.09 s = 1.55 s,
#: an estimate for each of the three variants with workers.
_DATALOADER = 1.55
#: The models suite at full size on one H100: paper estimates (no GPU has run it), from each
#: step's FLOPs and the rates the H100 reached on the training suite
#: (results/20261124-085144-cuda-full-conv-rnn-training, default mode): 41.3 TFLOP/s for the
#: fp32 Transformer encoder (cuBLAS, IEEE fp32 matmuls), 61.2 TFLOP/s for ResNet-18 (cuDNN's
#: convolutions in TF32, torch's default). A record: the build, 10 fingerprint steps each with
#: its digest of the returned parameters (that run's Transformer: (3.26 s - 0.18 s first step) /
#: 19 steps = 0.162 s against 0.114 s timed, 0.048 s for its 66M parameters: 0.73 ns per
#: parameter), the timing pass (1.41 s = 12.4 of its steps: 5 warm-up, 6 samples and the
#: blocks' overshoot) and the FLOP count's step in one replicate of 3; the build at that run's
#: 0.61 s. ``_MODELS``: FLOPs per step (counted here with the FLOP counter: on the meta device
#: for GPT-2, ViT, ConvNeXt and Whisper, on the CPU at batch 1 times the batch for Llama and
#: BERT, the CPU's flash attention counted as the GPU's; torchvision's published multiply-adds
#: x 2 x 3 for its models), parameters, and the rate. ConvNeXt's and EfficientNet's depthwise
#: convolutions run far below ResNet's rate, so theirs are low; gpt2_generate is host-bound (one
#: kernel launch after another per token), so it is costed from the decoder's measured 0.29 ms per
#: layer and token (results/20261124-084508-cuda-full-decoder: 37 ms per 32-token decode of 4
#: layers) x 12 layers x 32 tokens = 0.11 s per generate() at any batch up to 16, its 3 fingerprint
#: steps, 12.4 timed, and an invariance pass of 5 sizes (a build and a generate() each).
_H100_MATMUL_FP32, _H100_CONV_TF32 = 41.3e12, 61.2e12
_MODELS = {
    "gpt2_lm": (7.00e12, 124.4e6, _H100_MATMUL_FP32),
    "llama_lm": (6.00e12, 124.7e6, _H100_MATMUL_FP32),
    "bert_classify": (2.15e12, 109.5e6, _H100_MATMUL_FP32),
    "vit_classify": (3.36e12, 86.6e6, _H100_MATMUL_FP32),
    "convnext_classify": (0.855e12, 28.6e6, _H100_CONV_TF32),
    "whisper_seq2seq": (2.68e12, 72.6e6, _H100_MATMUL_FP32),
    "tv_resnet50": (4.09e9 * 6 * 64, 25.6e6, _H100_CONV_TF32),
    "tv_efficientnet_b0": (0.39e9 * 6 * 64, 5.3e6, _H100_CONV_TF32),
    "tv_vit_b_16": (17.56e9 * 6 * 32, 86.6e6, _H100_MATMUL_FP32),
}
_BUILD, _DIGEST_PER_PARAMETER, _TIMED_STEPS = 0.61, 0.73e-9, 12.4


def _paper_record(flops: float, parameters: float, rate: float) -> float:
    step = flops / rate
    return _BUILD + 10 * (step + _DIGEST_PER_PARAMETER * parameters) + (_TIMED_STEPS + 1 / 3) * step


_GENERATE_STEP = 0.29e-3 * 12 * 32
_GENERATE = _BUILD + (3 + _TIMED_STEPS) * _GENERATE_STEP + 5 * (_BUILD + _GENERATE_STEP)
WORKLOAD_RECORD_SECONDS: dict[tuple[str, str], dict[str, float]] = {
    ("cuda", "full"): {
        "invariance/decoder_greedy_invariant": 6.7,
        "invariance/decoder_greedy": 3.2,
        "recipes/dataloader__nothing_seeded": _DATALOADER,
        "recipes/dataloader__global_seeds_only": _DATALOADER,
        "recipes/dataloader__worker_init_fn_and_generator": _DATALOADER,
        **{f"models/{k}": _paper_record(*v) for k, v in _MODELS.items()},
        "models/gpt2_generate": _GENERATE,
    },
}
#: Seconds until the first worker of a CUDA run is ready, where a dry run cannot measure it (no
#: GPU here: the paper estimate): 9.8 s, what the H100 run of conv, rnn and training waited for its
#: workers' start-up in all (results/20261124-085144-cuda-full-conv-rnn-training/env.json,
#: ``run_stats.startup``: 8 workers, each later one ready before the one before it was done).
PAPER_STARTUP_SECONDS = {"cuda": 9.8, "cpu": 2.0}
#: Seconds each later worker's device stage adds to a run, per device: the stage (CUDA's
#: initialisation, its context, cuBLAS's and cuDNN's handles) begins only once the worker before
#: it has taken its last timing sample (issue 29), so it no longer hides behind that worker's
#: measuring; what the worker before it does after that sample (its last record's clean-up, its
#: exit) hides part of it. CUDA: 1 s, a guess until a GPU run measures it (``run_stats``:
#: ``device_stage`` over ``workers``); the H100's process watch of 2026-11-26
#: (results/20261126-h100-experiments/watch.jsonl) saw a worker's context go from its first 14 MiB
#: to ~700 MiB, libraries warmed, within 0.2 s, and CUDA's initialisation comes before that. CPU:
#: nothing to initialise (``run_stats.device_stage``: 0.002 s over the 4 workers of a CPU run of
#: conv, bmm, batchnorm and rnn on the development CPU, 2026-11-26), charged nothing.
HANDOVER_SECONDS = {"cuda": 1.0, "cpu": 0.0}
#: Seconds of the batch-invariance pass per declared batch size of a record (a build and one
#: step at that size). CPU quick: 54 s over the 3960 sizes of the invariance suite's 750
#: records, measured on the 2-core VM (results/20261124-024157-cpu-quick-invariance). The
#: others are guesses until a run measures them.
INVARIANCE_SECONDS_PER_SIZE = {
    ("cpu", "quick"): 0.014,
    ("cpu", "full"): 0.1,
    ("cuda", "quick"): 0.01,
    ("cuda", "full"): 0.05,
}


@dataclass(frozen=True)
class Estimate:
    """Seconds a plan should take: its records at the budget-based cost of one record, plus the
    start-up of the first worker, plus what each later worker's start-up (begun while the one
    before it measures) outlasts that worker's measuring: a worker with one or two workloads (an
    attribution study's attention-backend variants) is done before the next is ready."""

    records: int
    workers: int
    startup_seconds: float
    per_record_seconds: float
    measured_startup: bool
    #: Seconds of later workers' start-up not hidden behind the worker before them.
    startup_waits: float = 0.0
    #: Records whose step is compiled (execution=compile): their compile time is not estimated.
    compiled_records: int = 0
    #: Per device (``--devices``): its records and its start-up waits; empty: one device.
    lane_records: tuple[int, ...] = ()
    lane_waits: tuple[float, ...] = ()
    #: torchrun launches (one per worker with distributed workloads), per device, and the
    #: seconds of one.
    lane_launches: tuple[int, ...] = ()
    launch_seconds: float = 0.0
    #: Per device: the batch sizes its records' invariance passes build, and the seconds of one.
    lane_sizes: tuple[int, ...] = ()
    size_seconds: float = 0.0
    #: Per device: the seconds of its records (each at its suite's or workload's measured cost
    #: where known, else ``per_record_seconds``); empty: records x ``per_record_seconds``.
    lane_record_seconds: tuple[float, ...] = ()
    #: Records that will be ``unsupported`` (known when planning: more ranks than GPUs, a setting
    #: this torch lacks), charged nothing; and records costed from a measured or declared figure.
    unsupported_records: int = 0
    costed_records: int = 0
    #: "measured start-up" (a dry run started a worker here), "model" (a real run's first guess),
    #: or "paper" (a CUDA plan on a host without a GPU: nothing here could be measured).
    basis: str = "model"
    #: Per device: its workers after the first, each of whose device stage waits for the last
    #: timing sample before it; and the seconds of one such stage (``HANDOVER_SECONDS``).
    lane_handovers: tuple[int, ...] = ()
    handover_seconds: float = 0.0
    #: Records costed by a probe worker on this host (a user's own workloads).
    probed_records: int = 0
    #: Per worker (replicate, mode name): the seconds it costs beyond its records (start-up or
    #: wait, device stage, launch, invariance passes) and each record's seconds: the progress
    #: line's plan (``schedule.Progress``), the same figures as the estimate's.
    slot_costs: Mapping[tuple[int, str], tuple[float, Mapping[str, float]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def handovers(self) -> int:
        return sum(self.lane_handovers)

    @property
    def record_seconds(self) -> float:
        if self.lane_record_seconds:
            return sum(self.lane_record_seconds)
        return self.records * self.per_record_seconds

    @property
    def invariance_seconds(self) -> float:
        return sum(self.lane_sizes) * self.size_seconds

    @property
    def launches(self) -> int:
        return sum(self.lane_launches)

    @property
    def lane_seconds(self) -> tuple[float, ...]:
        """Each device's share: its records, its waits and the start-up of its first worker."""
        launches = self.lane_launches or (0,) * len(self.lane_records)
        sizes = self.lane_sizes or (0,) * len(self.lane_records)
        handovers = self.lane_handovers or (0,) * len(self.lane_records)
        costs = self.lane_record_seconds or tuple(
            n * self.per_record_seconds for n in self.lane_records
        )
        return tuple(
            (self.startup_seconds if n else 0.0)
            + w
            + c
            + k * self.launch_seconds
            + b * self.size_seconds
            + h * self.handover_seconds
            for n, w, c, k, b, h in zip(
                self.lane_records, self.lane_waits, costs, launches, sizes, handovers, strict=True
            )
        )

    @property
    def seconds(self) -> float:
        """The run's seconds: with several devices side by side, the busiest device's."""
        if len(self.lane_records) > 1:
            return max(self.lane_seconds)
        return (
            self.startup_seconds
            + self.startup_waits
            + self.record_seconds
            + self.launches * self.launch_seconds
            + self.invariance_seconds
            + self.handovers * self.handover_seconds
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "workers": self.workers,
            "estimated_seconds": round(self.seconds, 1),
            "startup_seconds": round(self.startup_seconds, 3),
            "startup_measured": self.measured_startup,
            "per_record_seconds": round(self.per_record_seconds, 4),
            "startup_waits_seconds": round(self.startup_waits, 1),
            "handovers": self.handovers,
            "handover_seconds": self.handover_seconds,
            "compiled_records": self.compiled_records,
            "torchrun_launches": self.launches,
            "invariance_sizes": sum(self.lane_sizes),
            "invariance_seconds": round(self.invariance_seconds, 1),
            "record_seconds": round(self.record_seconds, 1),
            "unsupported_records": self.unsupported_records,
            "costed_records": self.costed_records,
            "probed_records": self.probed_records,
            "estimate_basis": self.basis,
            **(
                {"device_seconds": [round(x, 1) for x in self.lane_seconds]}
                if len(self.lane_records) > 1
                else {}
            ),
        }


def timing_seconds(device: str, budget: float) -> float:
    """Seconds the model charges a record for its timing pass: its warm-up and its samples, as
    shares of its budget. The one place the estimate prices the sampling budget: a budget that
    adapts to the step time (issue 29, item 3) changes this function and nothing else; the model's
    records, ``per_record_seconds``, and what a later worker's start-up cannot hide behind
    (``hidden_seconds``) follow it. The suites' measured figures and a probed workload's record
    include their own timing as measured."""
    return (BUDGET_SHARE[device] + WARMUP_SHARE[device]) * budget


def per_record_seconds(device: str, profile: str, budget: float) -> float:
    """The model's cost of one record: its overhead and its timing pass (``timing_seconds``)."""
    return RECORD_OVERHEAD_SECONDS[(device, profile)] + timing_seconds(device, budget)


@dataclass(frozen=True)
class Probed:
    """A workload with no measured figure (a user's own), costed by a probe worker on this host
    (``run.costprobe``): one record's phases summed, that record's FLOP count (a run counts FLOPs
    in its first replicate only) and its timing pass (a later worker's start-up is paused while
    a worker times, so it cannot hide behind it)."""

    seconds: float
    count: float = 0.0
    timing: float = 0.0

    def record(self, replicate: int) -> float:
        return self.seconds - (self.count if replicate else 0.0)


def planned_unsupported(
    workloads: Sequence[Any], device: str, gpus: int
) -> Callable[[Mode, str], bool]:
    """Whether a record (mode, workload key) will be ``unsupported``, as far as a plan can know:
    a ``--set`` setting this torch lacks, autocast for a workload that does not declare it, and
    on CUDA a distributed workload with more ranks than ``gpus`` (its world size as the mode sets
    it, else ``min(2, gpus)``)."""
    by_key = {w.key: w for w in workloads}

    def unsupported(mode: Mode, key: str) -> bool:
        w = by_key.get(key)
        if any(st.get(n).unavailable() is not None for n, _ in mode.settings):
            return True
        if w is None:
            return False
        if mode.overrides.get("autocast", "off") != "off" and not w.autocast:
            return True
        if w.distributed and device == "cuda":
            world = mode.overrides.get("world_size") or st.world_size_default(device, gpus)
            return int(world) > gpus
        return False

    return unsupported


def record_cost(
    key: str,
    device: str,
    profile: str,
    per_record: float,
    cudnn: bool = True,
    probed: Mapping[str, Probed] | None = None,
    replicate: int = 0,
) -> tuple[float, bool]:
    """Seconds of one record of ``key`` (SUITE/NAME) in a mode with cuDNN on or off, and whether
    the figure is measured (a probe's here, the workload's or its suite's) rather than the
    model's ``per_record``. A workload's figure includes its invariance pass."""
    if probed and key in probed:
        return probed[key].record(replicate), True
    own = WORKLOAD_RECORD_SECONDS.get((device, profile), {})
    if key in own:
        return own[key], True
    suite = key.partition("/")[0]
    native = NO_CUDNN_RECORD_SECONDS.get((device, profile), {})
    added = TIMING_RULE_ADDED_SECONDS.get((device, profile), 0.0)
    if not cudnn and suite in native:
        return native[suite] + added, True
    suites = SUITE_RECORD_SECONDS.get((device, profile), {})
    if suite in suites:
        return suites[suite] + added, True
    return per_record, False


def estimate(
    plan: Plan,
    device: str,
    profile: str,
    budget: float,
    startup_seconds: float,
    measured: bool,
    distributed: frozenset[str] = frozenset(),
    batch_sizes: Mapping[str, int] | None = None,
    unsupported: Callable[[Mode, str], bool] | None = None,
    basis: str | None = None,
    probed: Mapping[str, Probed] | None = None,
) -> Estimate:
    """``distributed``: the keys of the plan's distributed workloads (each worker that has any
    that will run makes one torchrun launch; on CUDA the launch's figure includes their
    measurement). ``batch_sizes``: per workload key that declares batch sizes, how many (each of
    its records builds and steps it at every one, unless the workload's own figure includes
    it). ``unsupported(mode, key)``: whether that record will be ``unsupported`` (charged
    nothing, and a launch of nothing but such records is not made). ``probed``: the workloads a
    probe worker costed on this host (their figure includes their invariance pass)."""
    sizes = batch_sizes or {}
    per_record = per_record_seconds(device, profile, budget)
    skip = unsupported or (lambda mode, key: False)
    own = {**WORKLOAD_RECORD_SECONDS.get((device, profile), {}), **(probed or {})}

    def runs(s: Slot) -> list[str]:
        return [k for k in s.keys if not skip(s.mode, k)]

    def key_cost(s: Slot, k: str) -> float:
        if skip(s.mode, k) or (k in distributed and device == "cuda"):
            return 0.0  # unsupported, or in the launch's measured figure
        cudnn = s.mode.cudnn_enabled
        return record_cost(k, device, profile, per_record, cudnn, probed, s.replicate)[0]

    def cost(slots: Sequence[Slot]) -> float:
        return sum(key_cost(s, k) for s in slots for k in s.keys)

    def costed(s: Slot) -> int:
        return sum(
            1 for k in runs(s) if record_cost(k, device, profile, per_record, True, probed)[1]
        )

    def hidden(before: Slot) -> float:
        """What a worker does while the next one may start up: its records but their timing
        passes, during which the next one is paused (issue 29)."""
        timing = sum(
            probed[k].timing if probed and k in probed else timing_seconds(device, budget)
            for k in runs(before)
        )
        return max(0.0, cost([before]) - timing)

    def waits(slots: Sequence[Slot]) -> float:
        """What each worker's start-up outlasts the measuring of the worker before it."""
        return sum(max(0.0, startup_seconds - hidden(before)) for before in slots[:-1])

    def overhead(slots: Sequence[Slot], i: int) -> float:
        """The seconds slot ``i`` of a device costs beyond its records: the first worker's
        start-up, or a later one's wait and device stage; its launch and invariance passes."""
        s = slots[i]
        start = (
            startup_seconds
            if i == 0
            else (
                max(0.0, startup_seconds - hidden(slots[i - 1])) + HANDOVER_SECONDS.get(device, 0.0)
            )
        )
        launch = LAUNCH_SECONDS.get(device, 0.0) if distributed & set(runs(s)) else 0.0
        size = INVARIANCE_SECONDS_PER_SIZE.get((device, profile), 0.0)
        return start + launch + size * sum(sizes.get(k, 0) for k in runs(s) if k not in own)

    lanes = [plan.lane_slots(d) for d in range(plan.lanes)]
    return Estimate(
        records=plan.records,
        workers=plan.workers,
        startup_seconds=startup_seconds if plan.workers else 0.0,
        per_record_seconds=per_record,
        measured_startup=measured,
        startup_waits=waits(plan.slots) if plan.lanes == 1 else max(map(waits, lanes)),
        compiled_records=sum(
            len(s.keys) for s in plan.slots if s.mode.overrides.get("execution") == "compile"
        ),
        lane_records=tuple(sum(len(s.keys) for s in ss) for ss in lanes),
        lane_waits=tuple(waits(ss) for ss in lanes),
        lane_launches=tuple(sum(1 for s in ss if distributed & set(runs(s))) for ss in lanes),
        launch_seconds=LAUNCH_SECONDS.get(device, 0.0),
        lane_sizes=tuple(
            sum(sizes.get(k, 0) for s in ss for k in runs(s) if k not in own) for ss in lanes
        ),
        size_seconds=INVARIANCE_SECONDS_PER_SIZE.get((device, profile), 0.0),
        lane_record_seconds=tuple(cost(ss) for ss in lanes),
        unsupported_records=sum(len(s.keys) - len(runs(s)) for s in plan.slots),
        costed_records=sum(costed(s) for s in plan.slots),
        basis=basis or ("measured start-up" if measured else "model"),
        lane_handovers=tuple(max(0, len(ss) - 1) for ss in lanes),
        handover_seconds=HANDOVER_SECONDS.get(device, 0.0),
        probed_records=sum(1 for s in plan.slots for k in runs(s) if probed and k in probed),
        slot_costs={
            (s.replicate, s.mode.name): (overhead(ss, i), {k: key_cost(s, k) for k in s.keys})
            for ss in lanes
            for i, s in enumerate(ss)
        },
    )
