"""Train a 1-D CNN on synthetic sensor windows with numpy data augmentation (random gain, jitter,
time shift) in a multi-worker DataLoader.

    python numpy_workers.py --epochs 3
"""

import argparse
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 2024


class SensorWindows(Dataset):
    def __init__(self, n=512, length=128):
        rng = np.random.RandomState(0)  # a fixed data set
        self.labels = rng.randint(0, 3, n)
        t = np.linspace(0, 1, length)
        freqs = np.array([2.0, 5.0, 9.0])[self.labels]
        self.signals = np.sin(2 * np.pi * freqs[:, None] * t).astype(np.float32)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.signals[i] * np.random.uniform(0.8, 1.2)  # random gain
        x = x + np.random.normal(0, 0.3, x.shape)  # sensor noise
        x = np.roll(x, np.random.randint(-10, 10))  # random time shift
        return torch.from_numpy(x.astype(np.float32))[None], int(self.labels[i])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    random.seed(SEED)
    np.random.seed(SEED)

    loader = DataLoader(SensorWindows(), batch_size=32, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(
        nn.Conv1d(1, 8, 7, padding=3), nn.ReLU(), nn.MaxPool1d(4),
        nn.Conv1d(8, 16, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
        nn.Flatten(), nn.Linear(16, 3),
    )  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for epoch in range(args.epochs):
        total, correct, seen = 0.0, 0, 0
        for x, y in loader:
            out = model(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
        print(f"epoch {epoch}: train loss {total / seen:.5f}, acc {correct / seen:.4f}")

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "sensor_cnn.pth")
    print("saved sensor_cnn.pth")


if __name__ == "__main__":
    main()
