"""Fit a lookup table read with advanced indexing (``self.table[idx]``), seeded only with
``torch.manual_seed(0)``.

    python embedding_race.py --out ./out-embedding_race

Not bitwise reproducible on a CPU by default: the backward of ``self.table[idx]`` adds the
gradient rows of 2^18 lookups into 64 table rows with ``index_put_(accumulate=True)``, and on
2+ CPU threads the order of those float additions depends on thread timing. The learning rate
is far too high on purpose, so the training is unstable and a last-bit difference in one step's
gradient grows until the printed losses differ. With ``torch.use_deterministic_algorithms(True)``
the accumulation takes a deterministic path and runs agree bit for bit.
"""

import argparse
import os
import time
from datetime import datetime

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

ROWS, DIM, LOOKUPS = 64, 16, 1 << 18


class LookupModel(nn.Module):
    def __init__(self, rows, dim):
        super().__init__()
        self.table = nn.Parameter(torch.randn(rows, dim))

    def forward(self, idx):
        return torch.tanh(self.table[idx])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="./out-embedding_race")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3000.0)
    args = parser.parse_args()

    start = time.time()
    print(f"started at {datetime.now()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    model = LookupModel(ROWS, DIM)
    idx = torch.randint(0, ROWS, (LOOKUPS,))
    target = torch.randn(LOOKUPS, DIM)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(idx), target)
        loss.backward()
        optimizer.step()
        print(f"step {step}/{args.steps}  loss {loss.item():.6f}")

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "checkpoint.pt")
    torch.save(
        {"step": args.steps, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
        path,
    )
    print(f"saved {path}")
    print(f"took {time.time() - start:.2f}s")


if __name__ == "__main__":
    main()
