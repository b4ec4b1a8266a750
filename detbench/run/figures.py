"""What a plan's records, workers, launches and invariance passes take, per device and profile:
the figures ``run/estimate.py`` estimates a plan with. Each says where its value was measured (the
published run, the machine, the records it is the mean of), or that it is a guess or a paper
estimate until a GPU run measures it.
"""

from __future__ import annotations

#: Seconds a record takes beyond its timing budget, per device and profile: building the workload,
#: its fingerprint steps, the FLOP count, warm-up and clean-up. CPU quick: from a published CPU
#: matrix (build, fingerprint, count and clean-up 0.02 s per record, plus warm-up; README, "Plan
#: and estimate"). The others are guesses until a run measures them; on CUDA ``--dry-run`` says so.
RECORD_OVERHEAD_SECONDS = {
    ("cpu", "quick"): 0.035,
    ("cpu", "full"): 0.3,
    ("cuda", "quick"): 0.05,
    ("cuda", "full"): 0.15,
}
#: The share of its budget a record spends sampling before the stopping rule ends it, on average
#: (records that reach their target early spend less). CPU: from a published CPU matrix (README,
#: "Plan and estimate"). CUDA: a guess until a GPU run measures it: GPU kernel times are steady,
#: so +-1% should often come within 6-16 samples of budget/50 each.
BUDGET_SHARE = {"cpu": 0.75, "cuda": 0.5}
#: What the warm-up until steady (``worker/warmup.py``) adds to a record beyond the fixed warm-up
#: steps the figures above were measured with, as a share of its budget (the warm-up's ceiling).
#: CPU: 0.046 s per record at the quick profile's 0.1 s budget, so 0.45 (120 records on the 2-core
#: development CPU; docs/measured.md). CUDA: 0: simulated on the H100's recorded samples
#: (results/20261126-060355-cuda-full-h100-partial) it takes no more than the fixed warm-up the
#: suites' figures were measured with (docs/measured.md); a GPU run is to confirm it.
WARMUP_SHARE = {"cpu": 0.45, "cuda": 0.0}
#: Seconds of one torchrun launch, per device: a worker with distributed workloads makes one
#: (``detbench.distributed.launch``), whose ranks each import torch and join the process group. CPU:
#: 3.82 s, the mean ``phases.launch`` of the 30 launches of ``make bench`` on the host of
#: ``HOST_REFERENCE_SECONDS`` (20261129-033852-cpu-quick, below; ``python tools/plan_figures.py``
#: on its run), which a plan scales to its own host. CUDA: 17-19 s per launch of one NCCL rank on
#: the H100 (``phases.launch`` of results/20261124-084754-cuda-full-distributed-world1, 8-11 s of
#: it the rank's set-up, the measurement of its 3 workloads 0.3-1.1 s each): 18 s, the measurement
#: of the distributed records included (they are charged nothing beside it on CUDA).
LAUNCH_SECONDS = {"cpu": 3.82, "cuda": 18.0}
#: Seconds of one record by suite, per (device, profile), where a run measured them: the mean over
#: the suite's records of their phases summed (build + fingerprint + FLOP count + timing + clean-up;
#: the worker's start-up is counted apart). CUDA full: on the H200 (torch 2.11, all 10 modes, 824
#: records of ``make bench``, the warm-up of 5 fixed steps and the 0.3 s budget;
#: results/20261126-040517-cuda-full-h200-partial), in the modes with cuDNN on (the H100's:
#: docs/measured.md). cudnn.benchmark's autotuning is included (the bench modes ran). The modes
#: without cuDNN: below.
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
#: H200 (the run above, its 99 no-cudnn and 66 no-cudnn+det-algos records; the H100's:
#: docs/measured.md).
NO_CUDNN_RECORD_SECONDS: dict[tuple[str, str], dict[str, float]] = {
    ("cuda", "full"): {
        "conv": 0.66,
        "rnn": 3.85,
        "batchnorm": 0.233,
        "bmm": 0.365,
        "training": 5.30,
    },
}
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
#: convolutions run far below ResNet's rate, so theirs are low. The DDPM UNet's FLOPs (diffusers,
#: batch 128) were counted on the CPU at batch 1 times the batch; the graph networks' at full size
#: on the CPU, their linear layers alone: the gathers and scatter-adds over 1.17M edges are memory
#: traffic the count leaves out, so theirs are low too; timm's mobilenetv3_large_100 from its
#: published 0.22 G multiply-adds x 2 x 3. gpt2_generate is host-bound (one
#: kernel launch after another per token), so it is estimated from the decoder's measured 0.29 ms
#: per layer and token (results/20261124-084508-cuda-full-decoder: 37 ms per 32-token decode of 4
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
    "diffusers_unet2d": (4.80e12, 35.7e6, _H100_CONV_TF32),
    "pyg_gcn": (32.6e9, 43.3e3, _H100_MATMUL_FP32),
    "pyg_sage": (65.2e9, 86.3e3, _H100_MATMUL_FP32),
    "timm_mobilenetv3": (0.22e9 * 6 * 128, 5.5e6, _H100_CONV_TF32),
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
#: Seconds until the first worker is ready, where nothing measured it: a real run's plan line
#: (only a dry run starts a worker to measure it) and a CUDA dry run on a host without a GPU (the
#: paper estimate). CUDA: 9.8 s, what the H100 run of conv, rnn and training waited for its
#: workers' start-up in all (results/20261124-085144-cuda-full-conv-rnn-training/env.json,
#: ``run_stats.startup``: 8 workers, each later one ready before the one before it was done).
#: CPU: 1.6 s, three dry runs of ``make bench`` on the host of ``HOST_REFERENCE_SECONDS`` (1.59,
#: 1.62 and 1.67 s), which a real run's plan scales to its host; the earlier CPU figures are in
#: docs/measured.md ("From the code's comments").
PAPER_STARTUP_SECONDS = {"cuda": 9.8, "cpu": 1.6}
#: Seconds of the batch-invariance pass per declared batch size of a record (a build and one
#: step at that size). CPU quick: 0.00429 s, the invariance passes of ``make bench`` over their
#: 3,810 sizes (20261129-033852-cpu-quick, the run of ``HOST_REFERENCE_SECONDS``; another host's
#: figure: docs/measured.md, "From the code's comments"). The others are guesses until a run
#: measures them.
INVARIANCE_SECONDS_PER_SIZE = {
    ("cpu", "quick"): 0.00429,
    ("cpu", "full"): 0.1,
    ("cuda", "quick"): 0.01,
    ("cuda", "full"): 0.05,
}
#: A verdict record of the paired design (no timing pass: build, fingerprint, FLOP count and
#: clean-up), by suite, per (device, profile), where a run measured them. CUDA full: the mean of
#: those phases over the 452 ok records of results/20261128-011342-cuda-full-h200-partial (H200,
#: torch 2.11: each verdict made in the worker that then times the step; 361 records with cuDNN
#: on, 91 without). CPU quick: the same figure over the ok records of ``make bench`` on a fresh
#: clone of the 2-core VM (20261129-033852-cpu-quick, the run of ``HOST_REFERENCE_SECONDS``: an
#: AMD EPYC, family 26, torch 2.13; ``python tools/plan_figures.py DIR``), the cuDNN flags acting
#: on nothing there. Elsewhere a figure less the model's timing.
VERDICT_RECORD_SECONDS: dict[tuple[str, str, bool], dict[str, float]] = {
    ("cpu", "quick", True): {
        "batchnorm": 0.007,
        "bmm": 0.0077,
        "conv": 0.0172,
        "invariance": 0.0171,
        "models": 0.2005,
        "ops": 0.0134,
        "recipes": 0.0556,
        "rnn": 0.0155,
        "training": 0.0336,
        "distributed": 0.1487,
    },
    ("cuda", "full", True): {
        "conv": 0.321,
        "rnn": 0.326,
        "batchnorm": 0.108,
        "bmm": 0.211,
        "training": 1.875,
    },
    ("cpu", "quick", False): {
        "batchnorm": 0.0064,
        "bmm": 0.0081,
        "conv": 0.0162,
        "invariance": 0.0174,
        "models": 0.2012,
        "ops": 0.0135,
        "recipes": 0.0552,
        "rnn": 0.0145,
        "training": 0.032,
        "distributed": 0.1464,
    },
    ("cuda", "full", False): {
        "conv": 0.333,
        "rnn": 1.690,
        "batchnorm": 0.159,
        "bmm": 0.217,
        "training": 4.300,
    },
}
#: The paired phase (``run/paired.py``). A member's preparation of one workload: its build, its
#: first step (digested) and its warm-up until steady, whose ceiling there is half the seconds its
#: rounds sample (0.1 s at full). CUDA full, by suite: the mean over the same H100 run's ok records
#: of build + one median step + 0.1 s (a paper estimate: that run's warm-up was 5 fixed steps).
#: Elsewhere, per (device, profile): guesses.
PAIRED_PREPARE_SECONDS: dict[tuple[str, str], float] = {
    ("cpu", "quick"): 0.06,
    ("cpu", "full"): 0.3,
    ("cuda", "quick"): 0.1,
    ("cuda", "full"): 0.2,
}
SUITE_PREPARE_SECONDS: dict[tuple[str, str], dict[str, float]] = {
    ("cuda", "full"): {
        "conv": 0.148,
        "rnn": 0.256,
        "batchnorm": 0.102,
        "bmm": 0.183,
        "training": 0.375,
    },
}
#: The cores of the lent GPU hosts (an H100 or an H200 with 16 CPU cores): a paper estimate of a
#: CUDA plan starts a group's workers on them, not on this host's cores.
GPU_HOST_CORES = 16
#: A turn's seconds beyond its block and the one untimed step before it: the runner's line to the
#: worker, its wake-up and its message back. CUDA: 2.5 ms, measured on the H200
#: (results/20261128-011342-cuda-full-h200-partial: the median over its 45 groups of the rounds'
#: span less their blocks and untimed steps, per turn). CPU: 1.04 ms, the same measure over the
#: 12,449 turns of ``make bench`` on the 2-core VM (20261129-033852-cpu-quick: three workers a
#: round; ``tools/plan_figures.py``).
PAIRED_TURN_SECONDS = {"cpu": 0.00104, "cuda": 0.0025}
#: A member's mean block and step (seconds) per (suite, cuDNN on) and (device, profile), where a
#: run measured them: a turn takes its block (at least one step), the untimed step before it
#: (none before a block of one step of 0.1 s or more: ``worker.warmup.turn_steps``) and
#: PAIRED_TURN_SECONDS. CUDA full: the means over the paired lines of the same H200 run (495
#: lines). A mode without cuDNN runs a native kernel: the RNNs' and ResNet-18's steps are 0.3-1.2
#: s there, against 0.01-0.05 s with cuDNN, and those members set how long a group's rounds take.
#: Elsewhere (unmeasured) a turn is estimated at its block alone.
#: CPU quick: the means over the timed lines of ``make bench`` above (20261129-033852-cpu-quick;
#: the cuDNN flags act on nothing there: the figures stand for both).
PAIRED_BLOCK_STEP_SECONDS: dict[tuple[str, str], dict[tuple[str, bool], tuple[float, float]]] = {
    ("cpu", "quick"): {
        ("batchnorm", True): (0.0084, 0.0001),
        ("bmm", True): (0.008, 0.0006),
        ("conv", True): (0.0084, 0.0015),
        ("invariance", True): (0.0083, 0.0025),
        ("models", True): (0.0071, 0.0041),
        ("ops", True): (0.0087, 0.0016),
        ("recipes", True): (0.0175, 0.013),
        ("rnn", True): (0.0072, 0.003),
        ("training", True): (0.0072, 0.0023),
    },
    ("cuda", "full"): {
        ("conv", True): (0.0092, 0.0015),
        ("conv", False): (0.0441, 0.0428),
        ("rnn", True): (0.0347, 0.0347),
        ("rnn", False): (0.3993, 0.3993),
        ("batchnorm", True): (0.0098, 0.0004),
        ("batchnorm", False): (0.0090, 0.0005),
        ("bmm", True): (0.0116, 0.0061),
        ("bmm", False): (0.0109, 0.0061),
        ("training", True): (0.0466, 0.0466),
        ("training", False): (0.3049, 0.3049),
    },
}
#: The steps a verdict runs per suite (its fingerprint steps: the records' ``step_fingerprints``),
#: per (device, profile), where a run measured them. CUDA full: the H200 run above (every one of
#: its 452 records: 10 for training, 3 for the others). With a suite's mean step
#: (PAIRED_BLOCK_STEP_SECONDS) they price the verdicts a group makes side by side on a GPU
#: (``paired_plan.PairedPlan.held_saving``).
VERDICT_STEPS: dict[tuple[str, str], dict[str, int]] = {
    ("cuda", "full"): {"conv": 3, "rnn": 3, "batchnorm": 3, "bmm": 3, "training": 10},
}
#: The core suites' workloads whose step calls no convolution, so that ``cudnn.benchmark`` has
#: nothing to autotune and a GPU run makes the autotuned modes' verdicts side by side with the
#: others (``run.paired.PairedPhase.convolves``). What ``worker.ops.OpsSeen`` saw in one step of
#: each, on a CPU at the quick profile (``run.probe.probe_ops``; the ops a step calls from
#: Python do not depend on the device); tests/test_held_verdicts.py checks the set against a new
#: probe.
CONVOLUTION_FREE = frozenset(
    {
        "batchnorm/batchnorm1d_train_quartznet",
        "batchnorm/batchnorm1d_train_simclr_head",
        "batchnorm/batchnorm2d_eval_resnet50_stage1",
        "batchnorm/batchnorm2d_train_resnet50_stage1",
        "batchnorm/batchnorm2d_train_resnet50_stage1_channels_last",
        "batchnorm/batchnorm3d_eval_r3d18_stage1",
        "batchnorm/batchnorm3d_train_r3d18_stage1",
        "bmm/bmm_attention_scores_bf16",
        "bmm/bmm_attention_scores_fp16",
        "bmm/bmm_attention_scores_fp32",
        "bmm/bmm_moe_experts_fp32",
        "bmm/bmm_sparse_coo_fp32",
        "rnn/gru_2layer",
        "rnn/gru_bidir_2layer",
        "rnn/lstm_2layer",
        "rnn/lstm_bidir_2layer",
        "rnn/lstm_bidir_packed",
        "rnn/rnn_relu_bidir_2layer",
        "rnn/rnn_tanh_2layer",
        "training/lstm_language_model",
        "training/transformer_encoder",
    }
)
#: The share of its most rounds (``--rounds``) a paired group takes on average, the rounds stopping
#: once every mode's ratio settles (``run/paired_rounds.py``; at least 6 are taken). CPU: the 414
#: groups of ``make bench`` above (20261129-033852-cpu-quick). CUDA: the 45 groups of the H200 run
#: above; by suite in PAIRED_ROUNDS_BY_SUITE.
PAIRED_ROUNDS_TAKEN = {"cpu": 0.883, "cuda": 0.83}
#: The same share by suite, per (device, profile), where a run measured it. CUDA full, the H200
#: run above: steps of 10 ms and more (rnn, training) settle at the 6th round.
PAIRED_ROUNDS_BY_SUITE: dict[tuple[str, str], dict[str, float]] = {
    ("cpu", "quick"): {
        "batchnorm": 0.93,
        "bmm": 0.93,
        "conv": 0.84,
        "invariance": 0.88,
        "models": 0.81,
        "ops": 0.89,
        "recipes": 0.93,
        "rnn": 0.93,
        "training": 0.88,
    },
    ("cuda", "full"): {"conv": 0.88, "rnn": 0.6, "batchnorm": 1.0, "bmm": 0.9, "training": 0.6},
}
#: A paired group's start-up on a GPU host, all its workers spawned at once: (fixed seconds, seconds
#: per worker). CUDA: fitted to the H200's two runs, 23.2 s a group of 11
#: (results/20261128-011342-cuda-full-h200-partial, ``run_stats.paired.startup`` 46.3 s over 2
#: groups) and 10.0 s a group of 3 (results/20261128-013218-cuda-full-bmm-steady, 20 s over 2): 16
#: cores do not start 11 CUDA workers in one worker's time.
GROUP_START_SECONDS = {"cuda": (5.05, 1.65)}
#: What one member's ``--reference-check`` takes after a round, per device: (a share of the
#: seconds asked, blocks of its step), the larger. On a CPU ``torch.utils.benchmark``'s
#: ``blocked_autorange`` runs at least the seconds asked, and at least a block: 0.114 s for 0.1 s
#: asked on the 2-core VM (docs/measured.md). On a GPU
#: the reference is 8 blocks after an untimed one (``worker.paired.PairedTiming.reference``),
#: whatever is asked.
REFERENCE_CHECK_SECONDS = {"cpu": (1.14, 1.0), "cuda": (0.0, 9.0)}
#: Seconds of one pass of ``run.hostspeed``'s reference work on the host where each device's
#: figures above were measured: a plan multiplies them by this host's seconds over these. CPU:
#: 0.01212 s, what the plan of ``make bench`` measured on a fresh clone of the 2-core VM
#: (20261129-033852-cpu-quick: ``run_calls``' ``host_speed``), the run whose figures the CPU
#: quick tables above hold. No GPU plan is scaled (no lent GPU host has run the reference work).
HOST_REFERENCE_SECONDS = {"cpu": 0.01212}


def measured_here(device: str, profile: str) -> bool:
    """Whether a run has measured the suites' verdict records on ``device`` at ``profile``
    (``VERDICT_RECORD_SECONDS``); where none has, a plan prices its records at the model's guess
    and says so (``run.plantext``)."""
    return any((device, profile, cudnn) in VERDICT_RECORD_SECONDS for cudnn in (True, False))
