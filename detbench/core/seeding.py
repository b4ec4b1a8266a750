"""Seeding every generator a workload may draw from, or leaving them as a fresh process has them."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_all(seed: int) -> None:
    """Seed python ``random``, NumPy, torch and every CUDA device identically."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def fresh_generators() -> None:
    """Every generator as a fresh process starts it: seeded from OS entropy."""
    random.seed()
    np.random.seed()
    torch.seed()
    if torch.cuda.is_available():
        torch.cuda.seed_all()


def seed_workload(seeding: str, seed: int) -> None:
    """The generators as ``seeding`` asks: a fresh process's for ``recipe``, else ``seed``."""
    if seeding == "recipe":
        fresh_generators()
    else:
        seed_all(seed)
