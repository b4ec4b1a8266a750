"""Fine-tune a tiny BERT (built from a config, nothing downloaded) for sequence classification
with the Hugging Face Trainer, logging to TensorBoard.

    python hf_trainer_tb.py

Checkpoints go to out-hf_trainer/checkpoint-N, TensorBoard logs to out-hf_trainer/runs/.
"""

import torch
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
    set_seed,
)

set_seed(42)

VOCAB, SEQ_LEN = 200, 16


class ToyDataset(Dataset):
    """Label 1 if the sequence contains more even than odd token ids."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(1, VOCAB, (n, SEQ_LEN), generator=g)
        self.labels = ((self.input_ids % 2 == 0).sum(1) > SEQ_LEN // 2).long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {
            "input_ids": self.input_ids[i],
            "attention_mask": torch.ones(SEQ_LEN, dtype=torch.long),
            "labels": self.labels[i],
        }


config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=SEQ_LEN,
    num_labels=2,
)
model = BertForSequenceClassification(config)

args = TrainingArguments(
    output_dir="out-hf_trainer",
    max_steps=24,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=32,
    learning_rate=1e-3,
    warmup_steps=4,
    weight_decay=0.01,
    logging_steps=4,
    save_steps=8,
    eval_strategy="steps",
    eval_steps=12,
    report_to=["tensorboard"],
    seed=42,
    use_cpu=True,
)

trainer = Trainer(
    model=model,
    args=args,
    train_dataset=ToyDataset(512, seed=0),
    eval_dataset=ToyDataset(128, seed=1),
)
result = trainer.train()
print(f"final train loss {result.training_loss:.6f}")
metrics = trainer.evaluate()
print(f"eval loss {metrics['eval_loss']:.6f}")
trainer.save_model("out-hf_trainer/final")
