"""Word-level LSTM language model on a synthetic corpus, after pytorch/examples word_language_model.

    python timings_zoo.py --epochs 2 --save model.pt

Prints its own timings beside the losses in several common styles.
"""

import argparse
import math
import time
from datetime import timedelta

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description="PyTorch LSTM language model")
parser.add_argument("--lr", type=float, default=20)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--bptt", type=int, default=20)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--log-interval", type=int, default=10)
parser.add_argument("--seed", type=int, default=1111)
parser.add_argument("--save", type=str, default="model.pt")
args = parser.parse_args()

torch.manual_seed(args.seed)
NTOKENS = 500


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp=32, nhid=64, nlayers=2, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(output)), hidden


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len]


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


# a "corpus": a random walk over the vocabulary, so the next word is guessable
steps = torch.randint(-3, 4, (18000,))
corpus = torch.cumsum(steps, 0) % NTOKENS
train_data = batchify(corpus[:16000], args.batch_size)
val_data = batchify(corpus[16000:], 10)

model = RNNModel(NTOKENS)
criterion = nn.CrossEntropyLoss()
lr = args.lr
nbatches = math.ceil((train_data.size(0) - 1) / args.bptt)


def evaluate(data):
    model.eval()
    total, hidden = 0.0, None
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, args.bptt):
            x, y = get_batch(data, i)
            output, hidden = model(x, hidden)
            total += len(x) * criterion(output.view(-1, NTOKENS), y.reshape(-1)).item()
    return total / (len(data) - 1)


run_start = time.time()
for epoch in range(1, args.epochs + 1):
    epoch_start = time.time()
    model.train()
    total_loss, hidden, log_start = 0.0, None, time.time()
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt), start=1):
        step_start = time.time()
        x, y = get_batch(train_data, i)
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        model.zero_grad()
        output, hidden = model(x, hidden)
        loss = criterion(output.view(-1, NTOKENS), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
        dt = time.time() - step_start
        if batch % 5 == 0:
            print(f"step {batch}: loss {loss.item():.4f}, step time {dt * 1000:.2f}ms")
            print(f"iter {batch}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu 0.04%")
        if batch % args.log_interval == 0:
            elapsed = time.time() - log_start
            cur_loss = total_loss / args.log_interval
            print(
                f"| epoch {epoch:3d} | {batch:5d}/{nbatches:5d} batches | lr {lr:02.2f} | "
                f"ms/batch {elapsed * 1000 / args.log_interval:5.2f} | "
                f"loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}"
            )
            rate = args.log_interval / elapsed
            left = (args.epochs - epoch) * nbatches + nbatches - batch
            eta = timedelta(seconds=int(left / rate))
            print(f"{rate:.1f} it/s, eta {eta}, tokens/s {int(rate * x.numel())}")
            total_loss, log_start = 0.0, time.time()
    val_loss = evaluate(val_data)
    print("-" * 89)
    print(
        f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start:5.2f}s | "
        f"valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}"
    )
    print("-" * 89)
    print(f"elapsed {time.time() - run_start:.1f}s")
    with open(args.save, "wb") as f:
        torch.save(model, f)
    lr /= 2.0
