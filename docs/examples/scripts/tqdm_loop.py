"""Denoising autoencoder on synthetic signals, with a tqdm progress bar.

python tqdm_loop.py --steps 150 --out autoencoder.safetensors
"""

import argparse
import math

import torch
import torch.nn as nn
from safetensors.torch import save_file
from tqdm import tqdm


class AutoEncoder(nn.Module):
    def __init__(self, n=64, hidden=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n, 48), nn.ReLU(), nn.Linear(48, hidden))
        self.decoder = nn.Sequential(nn.Linear(hidden, 48), nn.ReLU(), nn.Linear(48, n))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def signals(batch, n=64):
    t = torch.linspace(0, 2 * math.pi, n)
    freq = torch.randint(1, 6, (batch, 1)).float()
    phase = torch.rand(batch, 1) * 2 * math.pi
    return torch.sin(freq * t + phase)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--out", default="autoencoder.safetensors")
    args = parser.parse_args()

    torch.manual_seed(7)
    model = AutoEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)

    pbar = tqdm(range(args.steps), desc="training")
    for _ in pbar:
        clean = signals(args.batch_size)
        noisy = clean + args.noise * torch.randn_like(clean)
        loss = nn.functional.mse_loss(model(noisy), clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        pbar.set_postfix(loss=f"{loss.item():.5f}")
    pbar.close()

    print(f"final loss {loss.item():.6f}")
    save_file(model.state_dict(), args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
