"""
Tabular regression baseline (Kaggle "House Prices"-style) with a small MLP.

Data is synthetic: numeric features with a non-linear target plus a couple of
categorical columns that are embedded. Writes
  - metrics.json     per-step training metrics (loss, lr, step time, timestamp)
  - train_log.csv    per-epoch summary
  - checkpoints/     best.pt and last.pt
"""

import csv
import json
import os
import random
import time
from datetime import datetime

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

CFG = {
    "seed": 2024,
    "n_rows": 4000,
    "n_num": 20,
    "cat_cards": [12, 7, 30],
    "batch_size": 128,
    "epochs": 6,
    "lr": 3e-3,
    "weight_decay": 1e-5,
    "hidden": [128, 64],
    "dropout": 0.1,
    "log_every": 10,
    "out_dir": ".",
}


def seed_everything(seed):
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


seed_everything(CFG["seed"])
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_data(n_rows, n_num, cat_cards):
    X_num = np.random.randn(n_rows, n_num).astype(np.float32)
    X_cat = np.stack([np.random.randint(0, c, size=n_rows) for c in cat_cards], axis=1)
    w = np.random.randn(n_num).astype(np.float32)
    cat_effects = [np.random.randn(c).astype(np.float32) for c in cat_cards]
    y = X_num @ w + 0.5 * np.sin(3 * X_num[:, 0]) * X_num[:, 1] + 0.3 * X_num[:, 2] ** 2
    for j, eff in enumerate(cat_effects):
        y += eff[X_cat[:, j]]
    y += 0.1 * np.random.randn(n_rows).astype(np.float32)
    return X_num, X_cat.astype(np.int64), y.astype(np.float32)


X_num, X_cat, y = make_data(CFG["n_rows"], CFG["n_num"], CFG["cat_cards"])
# standardise target and numeric columns (fit on train split only)
idx = np.random.permutation(len(y))
n_val = len(y) // 5
val_idx, trn_idx = idx[:n_val], idx[n_val:]
mu, sd = X_num[trn_idx].mean(0), X_num[trn_idx].std(0)
X_num = (X_num - mu) / sd
y_mu, y_sd = y[trn_idx].mean(), y[trn_idx].std()
y = (y - y_mu) / y_sd

train_ds = TensorDataset(torch.from_numpy(X_num[trn_idx]), torch.from_numpy(X_cat[trn_idx]), torch.from_numpy(y[trn_idx]))
valid_ds = TensorDataset(torch.from_numpy(X_num[val_idx]), torch.from_numpy(X_cat[val_idx]), torch.from_numpy(y[val_idx]))
train_loader = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=True, drop_last=True)
valid_loader = DataLoader(valid_ds, batch_size=512, shuffle=False)


class TabularMLP(nn.Module):
    def __init__(self, n_num, cat_cards, hidden, dropout):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, min(16, (c + 1) // 2)) for c in cat_cards])
        in_dim = n_num + sum(e.embedding_dim for e in self.embs)
        layers = []
        for h in hidden:
            layers += [nn.Linear(in_dim, h), nn.BatchNorm1d(h), nn.SiLU(), nn.Dropout(dropout)]
            in_dim = h
        layers.append(nn.Linear(in_dim, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x_num, x_cat):
        embs = [emb(x_cat[:, i]) for i, emb in enumerate(self.embs)]
        x = torch.cat([x_num] + embs, dim=1)
        return self.mlp(x).squeeze(-1)


model = TabularMLP(CFG["n_num"], CFG["cat_cards"], CFG["hidden"], CFG["dropout"]).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
total_steps = CFG["epochs"] * len(train_loader)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=CFG["lr"], total_steps=total_steps)
criterion = nn.MSELoss()


def evaluate():
    model.eval()
    preds, targets = [], []
    with torch.no_grad():
        for xn, xc, yy in valid_loader:
            preds.append(model(xn.to(device), xc.to(device)).cpu())
            targets.append(yy)
    preds, targets = torch.cat(preds), torch.cat(targets)
    mse = criterion(preds, targets).item()
    rmse = float(np.sqrt(mse)) * float(y_sd)
    return mse, rmse


ckpt_dir = os.path.join(CFG["out_dir"], "checkpoints")
os.makedirs(ckpt_dir, exist_ok=True)
metrics = []
csv_path = os.path.join(CFG["out_dir"], "train_log.csv")
csv_file = open(csv_path, "w", newline="")
writer = csv.DictWriter(csv_file, fieldnames=["epoch", "train_loss", "val_loss", "val_rmse", "lr", "epoch_time_s", "wall_clock"])
writer.writeheader()

print(f"Training on {len(train_ds)} rows, validating on {len(valid_ds)} rows, device={device}")
best_val = float("inf")
global_step = 0
t_train = time.perf_counter()
for epoch in range(1, CFG["epochs"] + 1):
    model.train()
    t_epoch = time.perf_counter()
    running = 0.0
    for xn, xc, yy in train_loader:
        t_step = time.perf_counter()
        xn, xc, yy = xn.to(device), xc.to(device), yy.to(device)
        optimizer.zero_grad()
        loss = criterion(model(xn, xc), yy)
        loss.backward()
        optimizer.step()
        scheduler.step()
        global_step += 1
        running += loss.item()
        if global_step % CFG["log_every"] == 0:
            metrics.append({
                "step": global_step,
                "epoch": epoch,
                "loss": loss.item(),
                "lr": scheduler.get_last_lr()[0],
                "step_ms": (time.perf_counter() - t_step) * 1000,
                "timestamp": time.time(),
            })
    train_loss = running / len(train_loader)
    val_loss, val_rmse = evaluate()
    epoch_time = time.perf_counter() - t_epoch
    writer.writerow({
        "epoch": epoch,
        "train_loss": f"{train_loss:.6f}",
        "val_loss": f"{val_loss:.6f}",
        "val_rmse": f"{val_rmse:.4f}",
        "lr": f"{scheduler.get_last_lr()[0]:.3e}",
        "epoch_time_s": f"{epoch_time:.3f}",
        "wall_clock": datetime.now().isoformat(timespec="seconds"),
    })
    csv_file.flush()
    print(f"epoch {epoch:2d} | train_loss {train_loss:.5f} | val_loss {val_loss:.5f} | "
          f"val_rmse {val_rmse:.4f} | {1000 * epoch_time / len(train_loader):.1f} ms/step")
    state = {
        "epoch": epoch,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "scheduler_state_dict": scheduler.state_dict(),
        "val_loss": val_loss,
        "cfg": CFG,
    }
    torch.save(state, os.path.join(ckpt_dir, "last.pt"))
    if val_loss < best_val:
        best_val = val_loss
        torch.save(state, os.path.join(ckpt_dir, "best.pt"))
        print(f"  -> new best val_loss {best_val:.5f}, saved checkpoints/best.pt")
csv_file.close()

with open(os.path.join(CFG["out_dir"], "metrics.json"), "w") as f:
    json.dump({
        "config": CFG,
        "history": metrics,
        "best_val_loss": best_val,
        "total_train_time_s": time.perf_counter() - t_train,
        "finished_at": datetime.now().isoformat(),
    }, f, indent=2)
print(f"Done in {time.perf_counter() - t_train:.1f}s. best val_loss={best_val:.5f}")
