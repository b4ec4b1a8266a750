"""MNIST-style classifier on synthetic 28x28 digits, logged to TensorBoard.

    python tb_mnist_like.py
    tensorboard --logdir runs

Logs the loss and learning rate every step and the weight histograms every epoch to the
SummaryWriter's default folder (runs/<date>_<host>), and saves the final weights to model.pt.
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(1)

EPOCHS = 3
BATCH_SIZE = 64
LR = 0.05


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc1 = nn.Linear(8 * 14 * 14, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def fake_mnist(n):
    labels = torch.randint(0, 10, (n,))
    images = torch.rand(n, 1, 28, 28) * 0.3
    # a bright bar whose row depends on the label
    for i, label in enumerate(labels.tolist()):
        images[i, 0, 2 + 2 * label : 4 + 2 * label, 4:24] += 0.7
    return images, labels


def main():
    t0 = time.time()
    images, labels = fake_mnist(1024)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    writer = SummaryWriter()
    print(f"logging to {writer.log_dir}")

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(len(images))
        for i in range(0, len(images), BATCH_SIZE):
            batch = perm[i : i + BATCH_SIZE]
            optimizer.zero_grad()
            out = model(images[batch])
            loss = F.cross_entropy(out, labels[batch])
            loss.backward()
            optimizer.step()
            writer.add_scalar("train/loss", loss.item(), step)
            writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
            if step % 5 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            step += 1
        with torch.no_grad():
            acc = (model(images).argmax(1) == labels).float().mean().item()
        writer.add_scalar("train/accuracy", acc, epoch)
        for name, param in model.named_parameters():
            writer.add_histogram(name, param, epoch)
        print(f"epoch {epoch} done, accuracy {acc:.4f}, lr {scheduler.get_last_lr()[0]}")
        scheduler.step()

    writer.close()
    torch.save(model.state_dict(), "model.pt")
    print(f"saved model.pt ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
