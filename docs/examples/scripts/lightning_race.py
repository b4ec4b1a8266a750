"""Matrix factorisation for ratings (user x item) with PyTorch Lightning.

    python lightning_race.py

User and item factors are plain parameter tables read by indexing; the rating is their dot
product plus biases. ModelCheckpoint keeps the best epoch by val_loss; logs go to lightning_logs/.
"""

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

USERS, ITEMS, RANK = 48, 32, 8


class MatrixFactorization(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.user_factors = nn.Parameter(torch.randn(USERS, RANK) * 0.1)
        self.item_factors = nn.Parameter(torch.randn(ITEMS, RANK) * 0.1)
        self.item_bias = nn.Parameter(torch.zeros(ITEMS))

    def forward(self, users, items):
        u, v = self.user_factors[users], self.item_factors[items]
        return (u * v).sum(-1) + self.item_bias[items]

    def training_step(self, batch, batch_idx):
        users, items, ratings = batch
        loss = F.mse_loss(self(users, items), ratings)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        users, items, ratings = batch
        self.log("val_loss", F.mse_loss(self(users, items), ratings), prog_bar=True)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            loss = self.trainer.callback_metrics["val_loss"]
            print(f"epoch {self.current_epoch} val_loss {loss:.6f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def ratings(n):
    true_u, true_v = torch.randn(USERS, RANK), torch.randn(ITEMS, RANK)
    users, items = torch.randint(0, USERS, (n,)), torch.randint(0, ITEMS, (n,))
    r = (true_u[users] * true_v[items]).sum(-1) / RANK**0.5 + 0.1 * torch.randn(n)
    return TensorDataset(users, items, r)


if __name__ == "__main__":
    L.seed_everything(42)
    data = ratings(60_000)
    train, val = torch.utils.data.random_split(data, [50_000, 10_000])
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        callbacks=[ModelCheckpoint(monitor="val_loss", save_top_k=1)],
        log_every_n_steps=2,
    )
    model = MatrixFactorization()
    trainer.fit(
        model, DataLoader(train, batch_size=8192, shuffle=True), DataLoader(val, batch_size=10_000)
    )
    print(f"best val_loss {trainer.checkpoint_callback.best_model_score.item():.6f}")
