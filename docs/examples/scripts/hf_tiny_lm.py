"""Train a tiny GPT-2 language model (built from its config, nothing downloaded) on synthetic
token ids with a plain PyTorch loop: AdamW, a linear warmup schedule, gradient clipping.

    python hf_tiny_lm.py --out ./out-hf_tiny_lm

Seeded with ``transformers.set_seed``; on a CPU two runs leave the same checkpoint bits.
"""

import argparse
import os
import time
from datetime import datetime

import torch
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup, set_seed

VOCAB, SEQ_LEN = 256, 32


def synthetic_batches(num_batches, batch_size, generator):
    """Token ids with some structure to learn: each sequence counts up from a random start."""
    for _ in range(num_batches):
        start = torch.randint(0, VOCAB, (batch_size, 1), generator=generator)
        step = torch.randint(1, 4, (batch_size, 1), generator=generator)
        ids = (start + step * torch.arange(SEQ_LEN)) % VOCAB
        noise = torch.rand(batch_size, SEQ_LEN, generator=generator) < 0.1
        ids[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=generator)
        yield ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="./out-hf_tiny_lm")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    start = time.time()
    print(f"started at {datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')}")
    set_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQ_LEN,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.1,
        embd_pdrop=0.1,
        attn_pdrop=0.1,
    )
    model = GPT2LMHeadModel(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e3:.1f}k parameters")

    no_decay = ("bias", "ln_", "wpe", "wte")
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
            "weight_decay": 0.01,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, args.steps // 10, args.steps)

    data_gen = torch.Generator().manual_seed(args.seed)
    model.train()
    progress = tqdm(
        enumerate(synthetic_batches(args.steps, args.batch_size, data_gen), start=1),
        total=args.steps,
        desc="train",
    )
    for step, input_ids in progress:
        input_ids = input_ids.to(device)
        outputs = model(input_ids=input_ids, labels=input_ids)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        progress.set_postfix(loss=f"{loss.item():.4f}")
        if step % 5 == 0:
            lr = scheduler.get_last_lr()[0]
            tqdm.write(f"step {step}/{args.steps}  loss {loss.item():.6f}  lr {lr:.2e}")

    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    torch.save(
        {
            "step": args.steps,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        os.path.join(args.out, "training_state.pt"),
    )
    print(f"saved model and training state to {args.out}")
    print(f"took {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
