"""Train a small transformer encoder classifier with the "fast matmul" flags people copy into
their scripts: TF32 for cuBLAS and cuDNN and the "high" float32 matmul precision.

    python tf32_setter.py

On an Ampere-or-newer GPU these trade float32 precision for speed; on a CPU they change nothing.
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_float32_matmul_precision("high")

torch.manual_seed(3)
device = "cuda" if torch.cuda.is_available() else "cpu"

VOCAB, SEQ, D_MODEL, CLASSES = 64, 24, 32, 3
STEPS = 60


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, D_MODEL))
        layer = nn.TransformerEncoderLayer(D_MODEL, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(D_MODEL, CLASSES)

    def forward(self, ids):
        h = self.encoder(self.embed(ids) + self.pos)
        return self.head(h.mean(1))


def batch(n=32):
    ids = torch.randint(0, VOCAB, (n, SEQ))
    label = (ids < 8).sum(1).clamp(max=CLASSES - 1)  # how many "rare" tokens, capped
    return ids.to(device), label.to(device)


model = Classifier().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
start = time.time()
for step in range(1, STEPS + 1):
    ids, label = batch()
    logits = model(ids)
    loss = F.cross_entropy(logits, label)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        acc = (logits.argmax(1) == label).float().mean().item()
        print(
            f"step {step:3d} | loss {loss.item():.5f} | acc {acc:.3f} | {time.time() - start:.1f}s"
        )

torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "tf32_ckpt.pt")
print("saved tf32_ckpt.pt")
