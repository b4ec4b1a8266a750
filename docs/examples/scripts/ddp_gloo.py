"""Data-parallel training on CPUs with DistributedDataParallel and the gloo backend.

    torchrun --nproc_per_node 2 ddp_gloo.py --epochs 3

Each process trains on its shard of the data (DistributedSampler); gradients are averaged with
all-reduce. Rank 0 prints the losses and saves checkpoint.pt.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    # every rank builds the same data set; the sampler gives each its own part
    x = torch.randn(2048, 16)
    y = torch.sin(x[:, :4]).sum(1, keepdim=True) + 0.05 * torch.randn(2048, 1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"world size {world_size}, {len(loader)} batches per rank per epoch")

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for step, (inputs, targets) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * len(inputs), len(inputs)])
            if rank == 0 and step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.6f}")
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch} mean train loss {(total[0] / total[1]).item():.6f}")

    if rank == 0:
        torch.save(
            {
                "epoch": args.epochs,
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
            },
            "checkpoint.pt",
        )
        print(f"rank 0 saved checkpoint.pt (pid {os.getpid()})")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
