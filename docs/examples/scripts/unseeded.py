"""Fit a small MLP to a noisy 2-D spiral and save the weights.

python unseeded.py --epochs 20
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def spiral(n_per_class=200, classes=3):
    xs, ys = [], []
    for c in range(classes):
        r = torch.linspace(0.05, 1.0, n_per_class)
        theta = torch.linspace(
            c * 2 * math.pi / classes, c * 2 * math.pi / classes + 4, n_per_class
        )
        theta = theta + 0.2 * torch.randn(n_per_class)
        xs.append(torch.stack([r * torch.sin(theta), r * torch.cos(theta)], 1))
        ys.append(torch.full((n_per_class,), c))
    return torch.cat(xs), torch.cat(ys)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    x, y = spiral()
    model = nn.Sequential(
        nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 50):
            batch = perm[i : i + 50]
            loss = F.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 4 == 0:
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            print(f"epoch {epoch:2d}  loss {loss.item():.4f}  accuracy {acc:.3f}")

    torch.save(model.state_dict(), "spiral_mlp.pt")
    print("saved spiral_mlp.pt")


if __name__ == "__main__":
    main()
