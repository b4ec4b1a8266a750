#!/usr/bin/env python
"""
Fine-tune a (tiny, randomly initialised) BERT for binary sequence classification
with the Hugging Face Trainer. Adapted from run_glue.py, but the dataset is a
synthetic "sentiment" task so everything runs offline:
a sentence is positive iff it contains more "positive" tokens than "negative" ones.
"""

import argparse
import logging
import random
import sys

import numpy as np
import torch
import transformers
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    EvalPrediction,
    Trainer,
    TrainingArguments,
    set_seed,
)

logger = logging.getLogger(__name__)

PAD, CLS, SEP = 0, 1, 2
POS_TOKENS = list(range(10, 40))
NEG_TOKENS = list(range(40, 70))
FILLER_TOKENS = list(range(70, 500))


class SyntheticSentimentDataset(Dataset):
    def __init__(self, num_examples, max_length, seed):
        rng = random.Random(seed)
        self.features = []
        for _ in range(num_examples):
            length = rng.randint(8, max_length - 2)
            ids = [rng.choice(FILLER_TOKENS) for _ in range(length)]
            n_pos, n_neg = rng.randint(0, 4), rng.randint(0, 4)
            while n_pos == n_neg:
                n_neg = rng.randint(0, 4)
            slots = rng.sample(range(length), k=min(length, n_pos + n_neg))
            for j, s in enumerate(slots):
                ids[s] = rng.choice(POS_TOKENS if j < n_pos else NEG_TOKENS)
            ids = [CLS] + ids + [SEP]
            attention = [1] * len(ids) + [0] * (max_length - len(ids))
            ids = ids + [PAD] * (max_length - len(ids))
            self.features.append(
                {"input_ids": ids, "attention_mask": attention, "token_type_ids": [0] * max_length,
                 "labels": int(n_pos > n_neg)}
            )

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return {k: torch.tensor(v) for k, v in self.features[i].items()}


def compute_metrics(p: EvalPrediction):
    preds = np.argmax(p.predictions, axis=1)
    return {"accuracy": float((preds == p.label_ids).astype(np.float32).mean())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="output/tiny-bert-sentiment")
    parser.add_argument("--num_train", type=int, default=768)
    parser.add_argument("--num_eval", type=int, default=256)
    parser.add_argument("--max_length", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    logger.setLevel(logging.INFO)
    transformers.utils.logging.set_verbosity_warning()

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        learning_rate=args.lr,
        weight_decay=0.01,
        warmup_ratio=0.1,
        lr_scheduler_type="linear",
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=2,
        logging_strategy="steps",
        logging_steps=4,
        report_to=["tensorboard"],
        seed=args.seed,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    logger.info(f"Training/evaluation parameters: lr={training_args.learning_rate}, seed={training_args.seed}")

    set_seed(training_args.seed)

    config = BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        num_labels=2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    model = BertForSequenceClassification(config)
    logger.info(f"Model parameters: {model.num_parameters():,}")

    train_dataset = SyntheticSentimentDataset(args.num_train, args.max_length, seed=1)
    eval_dataset = SyntheticSentimentDataset(args.num_eval, args.max_length, seed=2)

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        compute_metrics=compute_metrics,
    )

    train_result = trainer.train()
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.save_model()
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    logger.info("*** Evaluate ***")
    metrics = trainer.evaluate()
    metrics["eval_samples"] = len(eval_dataset)
    metrics["perplexity"] = float(np.exp(metrics["eval_loss"]))
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
