"""Train a hashed bag-of-tokens text classifier (a fastText-style model written as a plain
nn.Module) with the Hugging Face Trainer.

    python hf_trainer_race.py

Token ids are hashed into a small table of buckets; a document is the mean of its tokens' bucket
vectors. Checkpoints go to out-hf_trainer_race/checkpoint-N.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments, set_seed

set_seed(42)

VOCAB, SEQ_LEN, BUCKETS, DIM = 5000, 256, 64, 16


class HashedBagClassifier(nn.Module):
    def __init__(self, num_labels=2):
        super().__init__()
        self.buckets = nn.Parameter(torch.randn(BUCKETS, DIM) * 0.1)
        self.classifier = nn.Linear(DIM, num_labels)

    def forward(self, input_ids, labels=None):
        vectors = self.buckets[input_ids % BUCKETS]  # (batch, seq, dim)
        logits = self.classifier(vectors.mean(1))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class Reviews(Dataset):
    """Synthetic "reviews": positive ones use a few "positive words" more often."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        words = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=g)
        positive = torch.randint(0, VOCAB // BUCKETS, (n, SEQ_LEN), generator=g) * BUCKETS + 7
        use = torch.rand(n, SEQ_LEN, generator=g) < 0.05 * self.labels[:, None].float()
        self.input_ids = torch.where(use, positive, words)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


args = TrainingArguments(
    output_dir="out-hf_trainer_race",
    max_steps=20,
    per_device_train_batch_size=32,
    learning_rate=0.05,
    lr_scheduler_type="constant",
    logging_steps=2,
    save_steps=10,
    report_to=["tensorboard"],
    seed=42,
    use_cpu=True,
)
trainer = Trainer(model=HashedBagClassifier(), args=args, train_dataset=Reviews(640, seed=0))
result = trainer.train()
print(f"train loss {result.training_loss:.6f}")
