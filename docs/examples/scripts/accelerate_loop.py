"""A plain training loop made device-agnostic with Hugging Face Accelerate.

    python accelerate_loop.py            # or: accelerate launch accelerate_loop.py

Trains a small MLP classifier on synthetic data, then saves the full training state
(model, optimizer, scheduler, RNG states) with accelerator.save_state and the weights with
accelerator.save_model.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 3
OUT = "out-accelerate"


def main():
    accelerator = Accelerator(cpu=True)
    set_seed(0)

    x = torch.randn(2048, 20)
    w = torch.randn(20, 4)
    y = (x @ w + 0.5 * torch.randn(2048, 4)).argmax(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)

    model = nn.Sequential(
        nn.Linear(20, 64),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(64, 64),
        nn.GELU(),
        nn.Linear(64, 4),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=3e-3, total_steps=EPOCHS * len(loader)
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    step = 0
    for epoch in range(EPOCHS):
        model.train()
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), targets)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            if step % 16 == 0:
                lr = scheduler.get_last_lr()[0]
                accelerator.print(f"epoch {epoch} step {step} loss {loss.item():.5f} lr {lr:.6f}")
        model.eval()
        with torch.no_grad():
            acc = (model(x.to(accelerator.device)).argmax(1) == y.to(accelerator.device)).float()
        accelerator.print(f"epoch {epoch} accuracy {acc.mean().item():.4f}")

    accelerator.wait_for_everyone()
    accelerator.save_state(f"{OUT}/state")
    accelerator.save_model(model, f"{OUT}/model")
    accelerator.print(f"saved to {OUT}")


if __name__ == "__main__":
    main()
