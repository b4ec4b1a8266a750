"""Train a small CNN on synthetic 3x32x32 images through a multi-worker DataLoader.

    python cnn_dataloader.py --out ./out-cnn_dataloader

Seeded the careful way (torch, random, numpy, a generator for the DataLoader's shuffling and a
worker_init_fn for its worker processes), so on a CPU two runs leave the same checkpoint bits.
Like many training scripts it turns on cuDNN's benchmark mode near the top: on a GPU that lets
cuDNN pick convolution algorithms by timing them, which can change results from run to run.
"""

import argparse
import os
import random
import time
from datetime import datetime

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.backends.cudnn.benchmark = True

SEED = 1234


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def seed_worker(worker_id):
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(32 * 8 * 8, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.dropout(torch.flatten(x, 1))
        return self.fc(x)


def make_dataset(n, generator):
    images = torch.randn(n, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (n,), generator=generator)
    # give the classes something to learn: shift each image by its label
    images += labels.view(-1, 1, 1, 1).float() * 0.1
    return TensorDataset(images, labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="./out-cnn_dataloader")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    start = time.time()
    print(f"started at {datetime.now().isoformat()}")
    seed_everything(SEED)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device: {device}")

    data_gen = torch.Generator().manual_seed(SEED)
    dataset = make_dataset(768, data_gen)
    loader_gen = torch.Generator()
    loader_gen.manual_seed(SEED)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=2,
        worker_init_fn=seed_worker,
        generator=loader_gen,
        persistent_workers=True,
    )

    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    steps_per_epoch = len(loader)
    total_steps = args.epochs * steps_per_epoch

    os.makedirs(args.out, exist_ok=True)
    step = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        running, correct, seen = 0.0, 0, 0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            optimizer.step()
            step += 1
            running += loss.item() * labels.size(0)
            correct += (logits.argmax(1) == labels).sum().item()
            seen += labels.size(0)
            if step % 4 == 0:
                print(f"step {step}/{total_steps}  loss {loss.item():.6f}")
        print(f"epoch {epoch}  train loss {running / seen:.6f}  acc {correct / seen:.4f}")
        torch.save(
            {
                "epoch": epoch,
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
            },
            os.path.join(args.out, "checkpoint.pt"),
        )

    print(f"saved {os.path.join(args.out, 'checkpoint.pt')}")
    print(f"took {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
