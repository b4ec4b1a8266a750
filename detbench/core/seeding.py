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
    """Put every generator in the state a fresh process starts with: seeded from OS entropy
    (python ``random`` and NumPy's global generator at import, torch at start-up), so a recipe
    that seeds nothing sees what an unseeded script sees."""
    random.seed()
    np.random.seed()
    torch.seed()
    if torch.cuda.is_available():
        torch.cuda.seed_all()


def seed_workload(seeding: str, seed: int) -> None:
    """The generators as a workload's ``seeding`` asks: ``recipe`` (a recipe that seeds itself,
    or not) sees a fresh process's generators; every other workload sees ``seed`` everywhere."""
    if seeding == "recipe":
        fresh_generators()
    else:
        seed_all(seed)
