"""models: the models users train, from the libraries they train them with, where installed.

Hugging Face Transformers builds each architecture from a config alone (random weights from the
seeded generators, no download, no network); torchvision builds its models with ``weights=None``,
timm with ``pretrained=False``. Each workload is a full training step (forward with the loss,
backward, the optimizer's update) unless it says inference; at ``full`` its sizes are the
published models' own (GPT-2 small, BERT-base, ViT-B/16, ConvNeXt-T, Whisper-base, ResNet-50,
EfficientNet-B0, the DDPM CIFAR-10 UNet, MobileNetV3-Large; the graph networks on a random graph
of ogbn-arxiv's sizes), at ``quick`` tiny versions of the same architectures, for a CPU.

- Transformers (``params["library"] == "transformers"``): ``gpt2_lm`` (causal LM loss),
  ``llama_lm`` (RMSNorm, rotary positions, SwiGLU, grouped-query attention), ``bert_classify``
  (sequence classification over a padded batch: an attention mask), ``vit_classify``,
  ``convnext_classify`` (no attention: depthwise 7x7 convolutions and LayerNorm),
  ``whisper_seq2seq`` (an encoder-decoder on log-mel features), and ``gpt2_generate``
  (inference: greedy decoding with ``generate()`` and its KV cache).
- torchvision (``params["library"] == "torchvision"``): ``tv_resnet50``, ``tv_vit_b_16``,
  ``tv_efficientnet_b0``. Tested on the GPU host only: torchvision's CPU wheel needs a torch
  build this development machine does not use.
- Defined in ``_models_more.py`` and registered here: diffusers (``params["library"] ==
  "diffusers"``): ``diffusers_unet2d`` (a ``UNet2DModel``'s DDPM noise-prediction step);
  PyTorch Geometric (``"torch_geometric"``): ``pyg_gcn`` and ``pyg_sage`` (2-layer GCN and
  GraphSAGE, node classification on a seeded random graph: scatter-add aggregation); timm
  (``"timm"``): ``timm_mobilenetv3`` (``mobilenetv3_large_100``; timm needs torchvision, so it
  is tested where torchvision is).

A library that does not import makes its workloads' records ``unsupported`` with the reason
(``detbench.Unsupported``), never an error: the suite runs everywhere. The models attend through
``attn_implementation="sdpa"`` (torch's ``scaled_dot_product_attention``; the ``sdpa_backend``
setting picks its kernel), declare ``attention=True``, and note the implementation that ran for
the record (``attn_implementation``). Training steps return a dict (the loss, every parameter
after the update, every buffer; ``suites/_models.py``). All are float32 models users train under
automatic mixed precision (``autocast=True``).

``gpt2_generate`` declares batch sizes (``GEN_SIZES``): row 0 is the same prompt at every size,
the other rows the first ``b`` of one seeded set of prompts, so the batch-invariance verdict
(``batch_invariant``, ``batch_distinct_results``) applies to a real ``generate()``. It returns
the generated ids first, then the logits of the last generated token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import detbench

_m = detbench.suite_helper("_models")
TF = "transformers"
TV = "torchvision"
Sizes = dict[str, dict[str, Any]]


def _train(
    name: str,
    library: str,
    sizes: Sizes,
    items: Callable[[dict[str, Any]], int],
    what: dict[str, Any],
    attention: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``build(ctx, **sizes[profile]) -> step`` as ``models/NAME``, a training step of
    a model from ``library``; ``items(size)`` is what one step processes."""

    def deco(build: Callable[..., Any]) -> Callable[..., Any]:
        @detbench.workload(
            suite="models",
            name=name,
            items_per_step={p: items(s) for p, s in sizes.items()},
            loss_output=0,
            fingerprint_steps=_m.TRAIN_STEPS,
            autocast=True,
            attention=attention,
            params={"library": library, **what, **sizes},
        )
        def factory(ctx: detbench.Context) -> Any:
            return build(ctx, **sizes[ctx.profile])

        return build

    return deco


def _tokens(s: dict[str, Any]) -> int:
    return int(s["batch"] * s["seq"])


def _batch(s: dict[str, Any]) -> int:
    return int(s["batch"])


def _sizes(**quick_full: tuple[Any, Any]) -> Sizes:
    """The sizes of each profile, from each size's (quick, full) pair, in the order given."""
    return {
        "quick": {k: quick for k, (quick, _) in quick_full.items()},
        "full": {k: full for k, (_, full) in quick_full.items()},
    }


# --- Transformers: decoders --------------------------------------------------------------------

# At full, GPT-2 small: 124M parameters.
GPT2: Sizes = _sizes(
    batch=(2, 8),
    seq=(32, 1024),
    n_embd=(32, 768),
    n_layer=(2, 12),
    n_head=(2, 12),
    vocab=(256, 50257),
)


def _gpt2(ctx: detbench.Context, s: dict[str, Any]) -> Any:
    config = _m.library(TF).GPT2Config(
        n_embd=s["n_embd"],
        n_layer=s["n_layer"],
        n_head=s["n_head"],
        vocab_size=s["vocab"],
        n_positions=max(1024, s["seq"]),
    )
    return _m.hf_model(ctx, "AutoModelForCausalLM", config, "sdpa")


@_train(
    "gpt2_lm",
    TF,
    GPT2,
    _tokens,
    {
        "model": "GPT-2 (GPT2LMHeadModel), dropout 0.1",
        "task": "causal LM",
        "optimizer": "AdamW(lr=3e-4)",
        "dtype": "float32",
    },
)
def gpt2_lm(ctx: detbench.Context, **s: Any) -> Any:
    model = _gpt2(ctx, s)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ids = torch.randint(0, s["vocab"], (s["batch"], s["seq"]), device=ctx.device)  # (N, T)
    return _m.training_step(model, opt, lambda: model(input_ids=ids, labels=ids).loss)


# At full, 125M parameters.
LLAMA: Sizes = _sizes(
    batch=(2, 8),
    seq=(32, 1024),
    hidden=(32, 768),
    intermediate=(64, 2048),
    layers=(2, 12),
    heads=(4, 12),
    kv_heads=(2, 4),
    vocab=(256, 32000),
)


@_train(
    "llama_lm",
    TF,
    LLAMA,
    _tokens,
    {
        "model": "Llama (LlamaForCausalLM): RMSNorm, rotary, SwiGLU, grouped-query attention",
        "task": "causal LM",
        "optimizer": "AdamW(lr=3e-4)",
        "dtype": "float32",
    },
)
def llama_lm(ctx: detbench.Context, **s: Any) -> Any:
    config = _m.library(TF).LlamaConfig(
        hidden_size=s["hidden"],
        intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        vocab_size=s["vocab"],
        max_position_embeddings=max(2048, s["seq"]),
    )
    model = _m.hf_model(ctx, "AutoModelForCausalLM", config, "sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ids = torch.randint(0, s["vocab"], (s["batch"], s["seq"]), device=ctx.device)
    return _m.training_step(model, opt, lambda: model(input_ids=ids, labels=ids).loss)


# --- Transformers: encoders --------------------------------------------------------------------

# At full, BERT-base, GLUE-style fine-tuning.
BERT: Sizes = _sizes(
    batch=(4, 32),
    seq=(32, 128),
    hidden=(32, 768),
    layers=(2, 12),
    heads=(2, 12),
    intermediate=(64, 3072),
    vocab=(256, 30522),
)


@_train(
    "bert_classify",
    TF,
    BERT,
    _batch,
    {
        "model": "BERT (BertForSequenceClassification), dropout 0.1",
        "task": "2-class sequence classification, padded batch (lengths seq/2 to seq)",
        "optimizer": "AdamW(lr=2e-5)",
        "dtype": "float32",
    },
)
def bert_classify(ctx: detbench.Context, **s: Any) -> Any:
    config = _m.library(TF).BertConfig(
        hidden_size=s["hidden"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        intermediate_size=s["intermediate"],
        vocab_size=s["vocab"],
        num_labels=2,
    )
    model = _m.hf_model(ctx, "AutoModelForSequenceClassification", config, "sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    n, t = s["batch"], s["seq"]
    ids = torch.randint(1, s["vocab"], (n, t), device=ctx.device)
    lengths = torch.randint(t // 2, t + 1, (n,), device=ctx.device)
    mask = (torch.arange(t, device=ctx.device) < lengths[:, None]).long()  # (N, T), 1 = token
    ids = ids * mask  # padding is token 0
    labels = torch.randint(0, 2, (n,), device=ctx.device)

    def loss() -> torch.Tensor:
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    return _m.training_step(model, opt, loss)


# At full, ViT-B/16.
VIT: Sizes = _sizes(
    batch=(4, 32),
    image=(32, 224),
    patch=(8, 16),
    hidden=(32, 768),
    layers=(2, 12),
    heads=(2, 12),
    intermediate=(64, 3072),
    classes=(10, 1000),
)


def _images(ctx: detbench.Context, s: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(s["batch"], 3, s["image"], s["image"], device=ctx.device)  # (N, C, H, W)
    return x, torch.randint(0, s["classes"], (s["batch"],), device=ctx.device)


@_train(
    "vit_classify",
    TF,
    VIT,
    _batch,
    {
        "model": "ViT (ViTForImageClassification)",
        "task": "image classification",
        "optimizer": "AdamW(lr=1e-4)",
        "dtype": "float32",
    },
)
def vit_classify(ctx: detbench.Context, **s: Any) -> Any:
    config = _m.library(TF).ViTConfig(
        image_size=s["image"],
        patch_size=s["patch"],
        hidden_size=s["hidden"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        intermediate_size=s["intermediate"],
        num_labels=s["classes"],
    )
    model = _m.hf_model(ctx, "AutoModelForImageClassification", config, "sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = _images(ctx, s)
    return _m.training_step(model, opt, lambda: model(pixel_values=x, labels=y).loss)


# At full, ConvNeXt-T.
CONVNEXT: Sizes = _sizes(
    batch=(4, 32),
    image=(32, 224),
    depths=([1, 1, 1, 1], [3, 3, 9, 3]),
    widths=([8, 16, 32, 64], [96, 192, 384, 768]),
    classes=(10, 1000),
)


@_train(
    "convnext_classify",
    TF,
    CONVNEXT,
    _batch,
    {
        "model": "ConvNeXt (ConvNextForImageClassification): depthwise 7x7 convolutions, LayerNorm",
        "task": "image classification",
        "optimizer": "AdamW(lr=1e-4)",
        "dtype": "float32",
    },
    attention=False,
)
def convnext_classify(ctx: detbench.Context, **s: Any) -> Any:
    config = _m.library(TF).ConvNextConfig(
        depths=s["depths"],
        hidden_sizes=s["widths"],
        num_labels=s["classes"],
        image_size=s["image"],
    )
    # ConvNeXt has no attention: nothing to note.
    model = _m.on_device(ctx, lambda: _m.library(TF).ConvNextForImageClassification(config))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = _images(ctx, s)
    return _m.training_step(model, opt, lambda: model(pixel_values=x, labels=y).loss)


# --- Transformers: an encoder-decoder ----------------------------------------------------------

# At full, Whisper-base: 30 s of audio.
WHISPER: Sizes = _sizes(
    batch=(2, 8),
    d_model=(32, 512),
    layers=(1, 6),
    heads=(2, 8),
    ffn=(64, 2048),
    mels=(16, 80),
    frames=(64, 3000),
    target=(8, 128),
    vocab=(256, 51865),
)


@_train(
    "whisper_seq2seq",
    TF,
    WHISPER,
    _batch,
    {
        "model": "Whisper (WhisperForConditionalGeneration), encoder-decoder",
        "task": "speech to text on random log-mel features",
        "optimizer": "AdamW(lr=1e-4)",
        "dtype": "float32",
    },
)
def whisper_seq2seq(ctx: detbench.Context, **s: Any) -> Any:
    config = _m.library(TF).WhisperConfig(
        d_model=s["d_model"],
        encoder_layers=s["layers"],
        decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"],
        decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"],
        num_mel_bins=s["mels"],
        max_source_positions=s["frames"] // 2,
        max_target_positions=max(448, s["target"]),
        vocab_size=s["vocab"],
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    model = _m.hf_model(ctx, "AutoModelForSpeechSeq2Seq", config, "sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    feats = torch.randn(s["batch"], s["mels"], s["frames"], device=ctx.device)  # (N, mels, T)
    labels = torch.randint(3, s["vocab"], (s["batch"], s["target"]), device=ctx.device)
    return _m.training_step(model, opt, lambda: model(input_features=feats, labels=labels).loss)


# --- Transformers: inference, greedy generation with the KV cache -------------------------------

#: The batch sizes ``gpt2_generate`` is built at (the batch-invariance verdict); the fingerprint
#: and timing passes use the largest.
GEN_SIZES = (1, 2, 4, 8, 16)
GENERATE: Sizes = {
    "quick": {**GPT2["quick"], "prompt": 8, "new_tokens": 8},
    "full": {
        **{k: v for k, v in GPT2["full"].items() if k not in ("batch", "seq")},
        "prompt": 128,
        "new_tokens": 32,
    },
}
GENERATE["quick"] = {k: v for k, v in GENERATE["quick"].items() if k not in ("batch", "seq")}


@detbench.workload(
    suite="models",
    # tokens generated
    items_per_step=lambda ctx: (
        (ctx.batch_size or GEN_SIZES[-1]) * GENERATE[ctx.profile]["new_tokens"]
    ),
    batch_sizes=GEN_SIZES,
    autocast=True,
    attention=True,
    params={
        "library": TF,
        "model": "GPT-2 (GPT2LMHeadModel), eval",
        "task": "inference: greedy generate() with the KV cache, prompts of equal length",
        "dtype": "float32",
        **GENERATE,
    },
)
def gpt2_generate(ctx: detbench.Context) -> Any:
    s = GENERATE[ctx.profile]
    model = _gpt2(ctx, {**s, "seq": s["prompt"] + s["new_tokens"]}).eval()
    b = ctx.batch_size or GEN_SIZES[-1]
    # The first b of one seeded set of prompts, drawn after the weights: row 0 is the same
    # request at every batch size.
    prompts = torch.randint(0, s["vocab"], (GEN_SIZES[-1], s["prompt"]), device=ctx.device)[:b]
    mask = torch.ones_like(prompts)
    new = s["new_tokens"]

    def step() -> list[torch.Tensor]:
        out = model.generate(
            input_ids=prompts,
            attention_mask=mask,
            do_sample=False,
            use_cache=True,
            max_new_tokens=new,
            min_new_tokens=new,
            eos_token_id=None,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_logits=True,
        )
        return [out.sequences[:, prompts.shape[1] :], out.logits[-1]]

    return step


# --- torchvision --------------------------------------------------------------------------------

TV_CNN: Sizes = _sizes(
    batch=(2, 64),
    image=(32, 224),
    classes=(10, 1000),
)
# At full, vit_b_16's own sizes.
TV_VIT: Sizes = _sizes(
    batch=(2, 32),
    image=(32, 224),
    patch=(8, 16),
    layers=(2, 12),
    heads=(2, 12),
    hidden=(32, 768),
    mlp=(64, 3072),
    classes=(10, 1000),
)


def _cnn(name: str, model_fn: str, what: str) -> None:
    @_train(
        name,
        TV,
        TV_CNN,
        _batch,
        {
            "model": what,
            "task": "image classification",
            "optimizer": "SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)",
            "dtype": "float32",
        },
        attention=False,
    )
    def build(ctx: detbench.Context, **s: Any) -> Any:
        models = _m.library(TV).models
        model = _m.on_device(
            ctx, lambda: getattr(models, model_fn)(weights=None, num_classes=s["classes"])
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        x, y = _images(ctx, s)
        return _m.training_step(model, opt, lambda: F.cross_entropy(model(x), y))


_cnn("tv_resnet50", "resnet50", "torchvision resnet50 (BatchNorm)")
_cnn(
    "tv_efficientnet_b0",
    "efficientnet_b0",
    "torchvision efficientnet_b0 (depthwise convolutions, squeeze-excitation, BatchNorm)",
)


@_train(
    "tv_vit_b_16",
    TV,
    TV_VIT,
    _batch,
    {
        "model": "torchvision VisionTransformer (vit_b_16 at full; nn.MultiheadAttention)",
        "task": "image classification",
        "optimizer": "AdamW(lr=1e-4)",
        "dtype": "float32",
    },
)
def tv_vit_b_16(ctx: detbench.Context, **s: Any) -> Any:
    vit = _m.library(TV).models.vision_transformer.VisionTransformer
    model = _m.on_device(
        ctx,
        lambda: vit(
            image_size=s["image"],
            patch_size=s["patch"],
            num_layers=s["layers"],
            num_heads=s["heads"],
            hidden_dim=s["hidden"],
            mlp_dim=s["mlp"],
            num_classes=s["classes"],
        ),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = _images(ctx, s)
    return _m.training_step(model, opt, lambda: F.cross_entropy(model(x), y))


# --- diffusers, PyTorch Geometric, timm: in _models_more.py, registered from here ----------------

detbench.suite_helper("_models_more").define(_train, _m)
