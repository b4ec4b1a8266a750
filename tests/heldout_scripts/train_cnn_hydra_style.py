"""
Small ResNet-ish CNN on a synthetic 10-class image task.

Run-directory layout mimics Hydra:  outputs/YYYY-MM-DD/HH-MM-SS/
  .hydra/config.yaml   resolved config
  train.log            log file (same lines as the console)
  tb/                  TensorBoard event files
  checkpoints/         epoch_XXX.pt, best.pt

Override config values hydra-style:  python train_cnn_hydra_style.py optim.lr=0.05 trainer.epochs=5
"""

import logging
import os
import sys
import time
from datetime import datetime

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.tensorboard import SummaryWriter

torch.backends.cudnn.benchmark = True

log = logging.getLogger(__name__)

DEFAULT_CFG = {
    "seed": 1234,
    "data": {"num_train": 1536, "num_val": 384, "image_size": 16, "num_classes": 10, "num_workers": 2},
    "model": {"width": 16, "blocks_per_stage": 1},
    "optim": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "nesterov": True},
    "trainer": {"epochs": 4, "batch_size": 64, "label_smoothing": 0.1, "log_every_n_steps": 6},
}


def apply_overrides(cfg, overrides):
    for ov in overrides:
        key, value = ov.split("=", 1)
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        old = node[leaf]
        node[leaf] = type(old)(value) if not isinstance(old, bool) else value.lower() in ("1", "true", "yes")
    return cfg


def to_yaml(d, indent=0):
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(" " * indent + f"{k}:")
            lines.append(to_yaml(v, indent + 2))
        else:
            lines.append(" " * indent + f"{k}: {v}")
    return "\n".join(lines)


def setup_run_dir():
    now = datetime.now()
    run_dir = os.path.join("outputs", now.strftime("%Y-%m-%d"), now.strftime("%H-%M-%S"))
    os.makedirs(os.path.join(run_dir, ".hydra"), exist_ok=True)
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
    fmt = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
    logging.basicConfig(
        level=logging.INFO,
        format=fmt,
        handlers=[logging.StreamHandler(sys.stdout), logging.FileHandler(os.path.join(run_dir, "train.log"))],
    )
    return run_dir


class ShapesDataset(Dataset):
    """Class k = a bright blob at one of 10 positions on a noisy background, random colour."""

    def __init__(self, n, size, num_classes, seed, train=True):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, num_classes, (n,), generator=g)
        yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        # class layout is shared by all splits
        centers = torch.rand(num_classes, 2, generator=torch.Generator().manual_seed(0)) * (size - 6) + 3
        imgs = []
        for lbl in self.labels.tolist():
            cy, cx = centers[lbl]
            blob = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 6.0)
            colour = torch.rand(3, 1, 1, generator=g) * 0.8 + 0.2
            img = colour * blob + 0.35 * torch.randn(3, size, size, generator=g)
            imgs.append(img)
        self.images = torch.stack(imgs)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:
            # random brightness jitter + gaussian noise augmentation
            img = img * (0.8 + 0.4 * torch.rand(1)) + 0.05 * torch.randn_like(img)
            # random translation by up to 1 pixel
            dy, dx = np.random.randint(-1, 2, size=2)
            img = torch.roll(img, shifts=(int(dy), int(dx)), dims=(1, 2))
        return img, self.labels[i]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, width, blocks_per_stage, num_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for stage, mult in enumerate([1, 2, 4]):
            for b in range(blocks_per_stage):
                stride = 2 if (stage > 0 and b == 0) else 1
                layers.append(BasicBlock(cin, width * mult, stride))
                cin = width * mult
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def train(cfg, run_dir):
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    d, t = cfg["data"], cfg["trainer"]
    train_ds = ShapesDataset(d["num_train"], d["image_size"], d["num_classes"], seed=cfg["seed"], train=True)
    val_ds = ShapesDataset(d["num_val"], d["image_size"], d["num_classes"], seed=cfg["seed"] + 1, train=False)
    train_dl = DataLoader(train_ds, batch_size=t["batch_size"], shuffle=True, num_workers=d["num_workers"],
                          persistent_workers=d["num_workers"] > 0, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False, num_workers=0)

    model = SmallResNet(cfg["model"]["width"], cfg["model"]["blocks_per_stage"], d["num_classes"])
    n_params = sum(p.numel() for p in model.parameters())
    log.info(f"Model: SmallResNet with {n_params / 1e3:.1f}K parameters")
    o = cfg["optim"]
    optimizer = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"],
                                weight_decay=o["weight_decay"], nesterov=o["nesterov"])
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=t["epochs"] * len(train_dl))
    criterion = nn.CrossEntropyLoss(label_smoothing=t["label_smoothing"])
    writer = SummaryWriter(log_dir=os.path.join(run_dir, "tb"))

    best_acc, step = 0.0, 0
    for epoch in range(t["epochs"]):
        model.train()
        tic = time.time()
        seen, loss_sum, correct = 0, 0.0, 0
        for images, labels in train_dl:
            logits = model(images)
            loss = criterion(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            bs = labels.size(0)
            seen += bs
            loss_sum += loss.item() * bs
            correct += (logits.argmax(1) == labels).sum().item()
            if step % t["log_every_n_steps"] == 0:
                writer.add_scalar("train/loss", loss.item(), step)
                writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
        train_loss, train_acc = loss_sum / seen, correct / seen

        model.eval()
        v_loss, v_correct, v_seen = 0.0, 0, 0
        with torch.no_grad():
            for images, labels in val_dl:
                logits = model(images)
                v_loss += F.cross_entropy(logits, labels, reduction="sum").item()
                v_correct += (logits.argmax(1) == labels).sum().item()
                v_seen += labels.size(0)
        val_loss, val_acc = v_loss / v_seen, v_correct / v_seen
        writer.add_scalar("val/loss", val_loss, epoch)
        writer.add_scalar("val/acc", val_acc, epoch)
        writer.add_scalar("train/epoch_acc", train_acc, epoch)
        elapsed = time.time() - tic
        log.info(f"Epoch {epoch + 1}/{t['epochs']} - train loss={train_loss:.4f} acc={train_acc:.4f} | "
                 f"val loss={val_loss:.4f} acc={val_acc:.4f} | {elapsed:.1f}s ({seen / elapsed:.0f} img/s)")

        ckpt = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "val_acc": val_acc, "cfg": cfg}
        torch.save(ckpt, os.path.join(run_dir, "checkpoints", f"epoch_{epoch:03d}.pt"))
        if val_acc > best_acc:
            best_acc = val_acc
            torch.save(ckpt, os.path.join(run_dir, "checkpoints", "best.pt"))
            log.info(f"New best val acc={best_acc:.4f}")
    writer.close()
    return best_acc


def main():
    cfg = apply_overrides(DEFAULT_CFG, sys.argv[1:])
    run_dir = setup_run_dir()
    with open(os.path.join(run_dir, ".hydra", "config.yaml"), "w") as f:
        f.write(to_yaml(cfg) + "\n")
    log.info(f"Output directory: {os.path.abspath(run_dir)}")
    log.info("Config:\n" + to_yaml(cfg))
    best = train(cfg, run_dir)
    log.info(f"Finished. Best val acc={best:.4f}")


if __name__ == "__main__":
    main()
