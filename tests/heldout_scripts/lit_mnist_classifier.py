import torch

torch.set_float32_matmul_precision("high")

import argparse

import lightning as L
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class FakeMNISTDataModule(L.LightningDataModule):
    """MNIST-shaped synthetic digits: each class is a fixed random stroke pattern plus noise."""

    def __init__(self, batch_size: int = 64, num_samples: int = 3000):
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.num_samples = num_samples

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(7)
        prototypes = (torch.rand(10, 1, 28, 28, generator=g) > 0.8).float()
        prototypes = F.avg_pool2d(prototypes, 3, stride=1, padding=1)
        labels = torch.randint(0, 10, (self.num_samples,), generator=g)
        images = prototypes[labels] + 0.6 * torch.randn(self.num_samples, 1, 28, 28, generator=g)
        images = (images - 0.1307) / 0.3081
        full = TensorDataset(images, labels)
        n_test = self.num_samples // 6
        n_val = self.num_samples // 6
        self.train_set, self.val_set, self.test_set = random_split(
            full, [self.num_samples - n_val - n_test, n_val, n_test], generator=torch.Generator().manual_seed(42)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=256)


class LitClassifier(L.LightningModule):
    def __init__(self, hidden_dim: int = 128, learning_rate: float = 2e-3, dropout: float = 0.2):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, 10),
        )

    def forward(self, x):
        return self.classifier(self.features(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", acc, on_step=False, on_epoch=True)
        return loss

    def _shared_eval(self, batch, prefix):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log(f"{prefix}_loss", loss, prog_bar=True)
        self.log(f"{prefix}_acc", acc, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        self._shared_eval(batch, "val")

    def test_step(self, batch, batch_idx):
        self._shared_eval(batch, "test")

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_epochs", type=int, default=6)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden_dim", type=int, default=128)
    args = parser.parse_args()

    L.seed_everything(42)

    dm = FakeMNISTDataModule(batch_size=args.batch_size)
    model = LitClassifier(hidden_dim=args.hidden_dim, learning_rate=args.lr)

    logger = TensorBoardLogger(save_dir="tb_logs", name="mnist_cnn")
    checkpoint_cb = ModelCheckpoint(
        monitor="val_acc", mode="max", save_top_k=2, save_last=True, filename="mnist-{epoch:02d}-{val_acc:.3f}"
    )
    callbacks = [
        checkpoint_cb,
        EarlyStopping(monitor="val_loss", mode="min", patience=2, min_delta=1e-3),
        LearningRateMonitor(logging_interval="epoch"),
    ]
    trainer = L.Trainer(
        max_epochs=args.max_epochs,
        accelerator="auto",
        devices=1,
        logger=logger,
        callbacks=callbacks,
        log_every_n_steps=10,
    )
    trainer.fit(model, datamodule=dm)
    print(f"best checkpoint: {checkpoint_cb.best_model_path} (val_acc={checkpoint_cb.best_model_score:.4f})")
    trainer.test(model, datamodule=dm, ckpt_path="best")


if __name__ == "__main__":
    main()
