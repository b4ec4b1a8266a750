"""Node classification with a hand-written message-passing graph network (no PyG needed).

    python scatter_race.py --steps 40

Each layer gathers the source node's features for every edge (``h[src]``), transforms them and
sums the messages into their target nodes with ``index_add_``. Seeded with torch.manual_seed.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

NODES, EDGES, FEATURES, CLASSES = 256, 1 << 17, 16, 4


class MessagePassing(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.msg = nn.Linear(d_in, d_out)
        self.self_loop = nn.Linear(d_in, d_out)

    def forward(self, h, src, dst, deg):
        messages = self.msg(h[src])
        agg = torch.zeros(h.size(0), messages.size(1)).index_add_(0, dst, messages)
        return self.self_loop(h) + agg / deg[:, None]


class GNN(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.node_emb = nn.Parameter(torch.randn(NODES, FEATURES) * 0.1)
        self.conv1 = MessagePassing(2 * FEATURES, hidden)
        self.conv2 = MessagePassing(hidden, hidden)
        self.out = nn.Linear(hidden, CLASSES)

    def forward(self, x, src, dst, deg):
        h = torch.cat([x, self.node_emb], dim=1)
        h = F.relu(self.conv1(h, src, dst, deg))
        h = F.relu(self.conv2(h, src, dst, deg))
        return self.out(h)


def random_graph():
    labels = torch.randint(0, CLASSES, (NODES,))
    x = 2 * torch.randn(NODES, FEATURES) + F.one_hot(labels, FEATURES).float()
    src = torch.randint(0, NODES, (EDGES,))
    # homophily: some edges join two nodes of the same class
    same = torch.rand(EDGES) < 0.3
    candidates = torch.randint(0, NODES, (EDGES, 8))
    match = labels[candidates] == labels[src][:, None]
    pick = match.float().argmax(1)
    dst = torch.where(
        same, candidates[torch.arange(EDGES), pick], torch.randint(0, NODES, (EDGES,))
    )
    deg = torch.bincount(dst, minlength=NODES).clamp(min=1).float()
    return x, labels, src, dst, deg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, labels, src, dst, deg = random_graph()
    train_mask = torch.rand(NODES) < 0.6
    model = GNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)

    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        logits = model(x, src, dst, deg)
        loss = F.cross_entropy(logits[train_mask], labels[train_mask])
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            pred = logits.argmax(1)
            train_acc = (pred[train_mask] == labels[train_mask]).float().mean().item()
            val_acc = (pred[~train_mask] == labels[~train_mask]).float().mean().item()
            print(
                f"step {step:03d} loss {loss.item():.6f} train acc {train_acc:.4f} "
                f"val acc {val_acc:.4f}"
            )

    torch.save({"step": args.steps, "model": model.state_dict()}, "gnn.pt")
    print("saved gnn.pt")


if __name__ == "__main__":
    main()
