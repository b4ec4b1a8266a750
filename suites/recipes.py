"""recipes: the seeding recipes users copy, each an experiment with broken and fixed variants.

Every workload here is registered with ``seeding="recipe"``: detbench does **not** seed anything
before the factory runs. The worker first puts every generator in the state a fresh process
starts with (python ``random``, NumPy's global generator and torch all seeded from OS entropy), and
the variant then seeds, or fails to seed, exactly as its recipe says. Run-to-run equality in
fresh processes then measures the recipe itself.

- ``seeding``: a small training loop that uses every generator (shuffling with ``torch.randperm``,
  noise from NumPy, a sign flip from python ``random``, dropout on the device): no seed, only
  ``torch.manual_seed``, and every generator seeded.
- ``dataloader``: random augmentation inside ``DataLoader`` worker processes (``num_workers=2``):
  nothing seeded; ``worker_init_fn`` plus a seeded ``torch.Generator`` (the recipe of PyTorch's
  reproducibility notes); only the global seeds; and ``num_workers=0``, for the workers' cost.
- ``reshuffle``: a new order every epoch from a ``RandomSampler``: unseeded, and seeded per epoch
  with ``generator.manual_seed(base + epoch)``.
- ``resume``: training interrupted after 4 of 8 steps, checkpointed, and resumed as a restarted
  script would (its seeding lines run again), without and with the RNG states saved in the
  checkpoint (torch, CUDA with ``get_rng_state_all``/``set_rng_state_all``, NumPy, python); the
  question is whether it equals ``resume__uninterrupted`` bit for bit, so those three workloads
  name it in ``params["compare_with"]``.
- ``inference``: a model run eagerly and through ``torch.jit.trace``: the same bits or not.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

import detbench

N, DIM, CLASSES, BATCH = 512, 16, 4, 64
SEED = 0


def seed_everything(seed: int) -> None:
    """The recipe: every generator a training script touches."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def _data() -> tuple[np.ndarray, np.ndarray]:
    """The same samples in every process, from a private generator the recipes never touch."""
    rng = np.random.default_rng(1234)
    return (
        rng.standard_normal((N, DIM)).astype(np.float32),
        rng.integers(0, CLASSES, N).astype(np.int64),
    )


def _model(device: torch.device) -> nn.Module:
    return nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, CLASSES)).to(
        device
    )


def _augment(x: np.ndarray) -> np.ndarray:
    """Noise from NumPy's global generator and a sign flip from python's ``random``."""
    x = x + np.random.normal(0.0, 0.1, x.shape).astype(np.float32)
    return -x if random.random() < 0.5 else x


def _recipe(recipe: str, variant: str, items: int, **params: Any) -> Callable[[Any], Any]:
    return detbench.workload(
        suite="recipes",
        name=f"{recipe}__{variant}",
        items_per_step=items,
        params={"recipe": recipe, "variant": variant, **params},
        seeding="recipe",
    )


# --- seeding -----------------------------------------------------------------------------------


def _train_epoch(
    model: nn.Module, opt: torch.optim.Optimizer, x: np.ndarray, y: np.ndarray, device: torch.device
) -> list[torch.Tensor]:
    order = torch.randperm(N).numpy()  # torch's global generator
    losses = []
    for start in range(0, N, BATCH):
        idx = order[start : start + BATCH]
        xb = torch.from_numpy(_augment(x[idx])).to(device)
        yb = torch.from_numpy(y[idx]).to(device)
        loss = F.cross_entropy(model(xb), yb)  # dropout: the device's generator
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [torch.stack(losses), *(p.detach() for p in model.parameters())]


def _seeding(ctx: detbench.Context, seed: Callable[[], None]) -> Any:
    seed()
    x, y = _data()
    model = _model(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return lambda: _train_epoch(model, opt, x, y, ctx.device)


@_recipe("seeding", "none", N)
def _seeding_none(ctx: detbench.Context) -> Any:
    return _seeding(ctx, lambda: None)


def _torch_seed_only() -> None:
    torch.manual_seed(SEED)


@_recipe("seeding", "torch_manual_seed_only", N)
def _seeding_torch(ctx: detbench.Context) -> Any:
    return _seeding(ctx, lambda: _torch_seed_only())


@_recipe("seeding", "every_generator", N)
def _seeding_all(ctx: detbench.Context) -> Any:
    return _seeding(ctx, lambda: seed_everything(SEED))


# --- DataLoader workers ------------------------------------------------------------------------


class AugmentedDataset(Dataset[tuple[torch.Tensor, int]]):
    """Random augmentation in ``__getitem__``: it runs inside the DataLoader's worker processes."""

    def __init__(self) -> None:
        self.x, self.y = _data()

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(_augment(self.x[i])), int(self.y[i])


def seed_worker(worker_id: int) -> None:
    """The ``worker_init_fn`` of PyTorch's reproducibility notes."""
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def _epoch(loader: DataLoader[Any]) -> list[torch.Tensor]:
    xs, ys = zip(*loader, strict=True)
    return [torch.cat(xs), torch.cat(ys)]


def _loader(workers: int, seeded_generator: bool, init_fn: bool) -> DataLoader[Any]:
    g = None
    if seeded_generator:
        g = torch.Generator()
        g.manual_seed(SEED)
    return DataLoader(
        AugmentedDataset(),
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        worker_init_fn=seed_worker if init_fn else None,
        generator=g,
    )


@_recipe("dataloader", "nothing_seeded", N, num_workers=2)
def _dl_unseeded(ctx: detbench.Context) -> Any:
    loader = _loader(2, seeded_generator=False, init_fn=False)
    return lambda: _epoch(loader)


@_recipe("dataloader", "global_seeds_only", N, num_workers=2)
def _dl_global(ctx: detbench.Context) -> Any:
    seed_everything(SEED)
    loader = _loader(2, seeded_generator=False, init_fn=False)
    return lambda: _epoch(loader)


@_recipe("dataloader", "worker_init_fn_and_generator", N, num_workers=2)
def _dl_recipe(ctx: detbench.Context) -> Any:
    loader = _loader(2, seeded_generator=True, init_fn=True)
    return lambda: _epoch(loader)


@_recipe("dataloader", "no_workers", N, num_workers=0)
def _dl_inline(ctx: detbench.Context) -> Any:
    seed_everything(SEED)
    loader = _loader(0, seeded_generator=True, init_fn=False)
    return lambda: _epoch(loader)


# --- per-epoch reshuffling ---------------------------------------------------------------------


@_recipe("reshuffle", "unseeded_sampler", N)
def _reshuffle_unseeded(ctx: detbench.Context) -> Any:
    sampler = RandomSampler(range(N))
    return lambda: [torch.tensor(list(sampler))]


@_recipe("reshuffle", "generator_seeded_per_epoch", N)
def _reshuffle_seeded(ctx: detbench.Context) -> Any:
    g = torch.Generator()
    sampler = RandomSampler(range(N), generator=g)
    epoch = [0]

    def step() -> list[torch.Tensor]:
        g.manual_seed(SEED + epoch[0])
        epoch[0] += 1
        return [torch.tensor(list(sampler))]

    return step


# --- resuming from a checkpoint ----------------------------------------------------------------

RESUME_STEPS, RESUME_AT = 8, 4


def _rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def _train_steps(
    model: nn.Module, opt: torch.optim.Optimizer, steps: int, device: torch.device
) -> list[torch.Tensor]:
    x, y = _data()
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, N, (BATCH,)).numpy()
        xb = torch.from_numpy(_augment(x[idx])).to(device)
        loss = F.cross_entropy(model(xb), torch.from_numpy(y[idx]).to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def _start(device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The top of the training script: seed everything, build the model and optimizer."""
    seed_everything(SEED)
    model = _model(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _resumed(device: torch.device, keep_rng: bool) -> list[torch.Tensor]:
    model, opt = _start(device)
    losses = _train_steps(model, opt, RESUME_AT, device)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    rng = _rng_states() if keep_rng else None
    del model, opt
    detbench.fresh_generators()  # the process ends here; a new one starts ...
    model, opt = _start(device)  # ... and runs the script's first lines again
    buf.seek(0)
    ckpt = torch.load(buf, map_location=device)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    if rng is not None:
        _set_rng_states(rng)
    losses += _train_steps(model, opt, RESUME_STEPS - RESUME_AT, device)
    return [torch.stack(losses), *(p.detach() for p in model.parameters())]


def _uninterrupted(device: torch.device) -> list[torch.Tensor]:
    model, opt = _start(device)
    losses = _train_steps(model, opt, RESUME_STEPS, device)
    return [torch.stack(losses), *(p.detach() for p in model.parameters())]


@_recipe("resume", "uninterrupted", RESUME_STEPS * BATCH)
def _resume_whole(ctx: detbench.Context) -> Any:
    return lambda: _uninterrupted(ctx.device)


@_recipe("resume", "without_rng_state", RESUME_STEPS * BATCH, compare_with="resume__uninterrupted")
def _resume_plain(ctx: detbench.Context) -> Any:
    return lambda: _resumed(ctx.device, keep_rng=False)


@_recipe("resume", "with_rng_state", RESUME_STEPS * BATCH, compare_with="resume__uninterrupted")
def _resume_rng(ctx: detbench.Context) -> Any:
    return lambda: _resumed(ctx.device, keep_rng=True)


# --- torch.jit.trace against eager -------------------------------------------------------------


def _convnet(device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    seed_everything(SEED)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    return model.to(device).eval(), torch.randn(8, 3, 32, 32, device=device)


@_recipe("inference", "eager", 8)
def _eager(ctx: detbench.Context) -> Any:
    model, x = _convnet(ctx.device)

    def step() -> list[torch.Tensor]:
        with torch.no_grad():
            return [model(x)]

    return step


@_recipe("inference", "jit_trace", 8, compare_with="inference__eager")
def _traced(ctx: detbench.Context) -> Any:
    model, x = _convnet(ctx.device)
    with torch.no_grad():
        traced = torch.jit.trace(model, x)

    def step() -> list[torch.Tensor]:
        with torch.no_grad():
            return [traced(x)]

    return step
