"""Regression with PyTorch Lightning: a small MLP, ModelCheckpoint on the validation loss, a
TensorBoard logger (lightning_logs/version_N in the current folder).

    python lightning_ckpt.py
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class Regressor(L.LightningModule):
    def __init__(self, lr=1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), prog_bar=True)

    def on_train_epoch_end(self):
        loss = self.trainer.callback_metrics["train_loss"]
        print(f"epoch {self.current_epoch} train_loss {loss:.6f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    L.seed_everything(42)
    x = torch.randn(1200, 8)
    y = x @ torch.linspace(-1, 1, 8) + 0.1 * torch.randn(1200)
    train_set, val_set = random_split(TensorDataset(x, y), [1000, 200])
    train_loader = DataLoader(train_set, batch_size=50, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=100)

    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=2, mode="min", save_last=True)
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=TensorBoardLogger(save_dir="."),
        callbacks=[checkpoint],
        log_every_n_steps=5,
        enable_progress_bar=True,
    )
    model = Regressor()
    trainer.fit(model, train_loader, val_loader)
    print(f"best checkpoint {checkpoint.best_model_path}")
    print(f"best val_loss {checkpoint.best_model_score.item():.6f}")


if __name__ == "__main__":
    main()
