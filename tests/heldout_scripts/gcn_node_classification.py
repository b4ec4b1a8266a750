"""
Semi-supervised node classification with a 2-layer GCN (Kipf & Welling, 2017),
implemented from scratch in plain PyTorch (no torch_geometric install needed).

The graph is a synthetic stochastic block model: nodes of the same community
are much more likely to be connected, and node features are noisy community
centroids.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description="GCN from scratch")
parser.add_argument("--num_nodes", type=int, default=2000)
parser.add_argument("--num_classes", type=int, default=6)
parser.add_argument("--num_features", type=int, default=128)
parser.add_argument("--avg_degree", type=int, default=5)
parser.add_argument("--hidden_channels", type=int, default=16)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--weight_decay", type=float, default=5e-4)
parser.add_argument("--dropout", type=float, default=0.5)
parser.add_argument("--epochs", type=int, default=60)
parser.add_argument("--seed", type=int, default=12345)
args = parser.parse_args()
print(args)

torch.manual_seed(args.seed)


def make_sbm_graph(num_nodes, num_classes, num_features, avg_degree, p_intra=0.5):
    y = torch.randint(0, num_classes, (num_nodes,))
    # each node draws `avg_degree` neighbours, most of them from its own community
    src = torch.arange(num_nodes).repeat_interleave(avg_degree)
    order = torch.argsort(y)
    counts = torch.bincount(y, minlength=num_classes)
    offsets = torch.cumsum(counts, 0) - counts
    pick = offsets[y[src]] + (torch.rand(src.numel()) * counts[y[src]]).long()
    dst_same = order[pick]
    dst_rand = torch.randint(0, num_nodes, (src.numel(),))
    dst = torch.where(torch.rand(src.numel()) < p_intra, dst_same, dst_rand)
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    centroids = torch.randn(num_classes, num_features)
    x = 0.15 * centroids[y] + torch.randn(num_nodes, num_features)
    return x, y, edge_index


def random_split(num_nodes, train=0.1, val=0.2):
    perm = torch.randperm(num_nodes)
    n_tr, n_va = int(train * num_nodes), int(val * num_nodes)
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[:n_tr]] = True
    masks[1][perm[n_tr : n_tr + n_va]] = True
    masks[2][perm[n_tr + n_va :]] = True
    return masks


def gcn_norm(edge_index, num_nodes):
    # add self loops and compute D^-1/2 (A + I) D^-1/2
    loops = torch.arange(num_nodes)
    edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    row, col = edge_index
    deg = torch.bincount(col, minlength=num_nodes).float()
    deg_inv_sqrt = deg.pow(-0.5)
    deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
    edge_weight = deg_inv_sqrt[row] * deg_inv_sqrt[col]
    return edge_index, edge_weight


class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))
        nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, x, edge_index, edge_weight):
        x = self.lin(x)
        row, col = edge_index
        # message passing: sum_{j in N(i)} w_ij * x_j
        out = torch.zeros_like(x)
        out.index_put_((col,), x[row] * edge_weight.view(-1, 1), accumulate=True)
        return out + self.bias


class GCN(nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, dropout):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)
        self.dropout = dropout

    def forward(self, x, edge_index, edge_weight):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.conv1(x, edge_index, edge_weight).relu()
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index, edge_weight)


x, y, edge_index = make_sbm_graph(
    args.num_nodes, args.num_classes, args.num_features, args.avg_degree
)
train_mask, val_mask, test_mask = random_split(args.num_nodes)
edge_index, edge_weight = gcn_norm(edge_index, args.num_nodes)
print(
    f"Graph: {args.num_nodes} nodes, {edge_index.size(1)} edges (incl. self loops), "
    f"{int(train_mask.sum())} training nodes"
)

model = GCN(args.num_features, args.hidden_channels, args.num_classes, args.dropout)
optimizer = torch.optim.Adam(
    [
        dict(params=model.conv1.parameters(), weight_decay=args.weight_decay),
        dict(params=model.conv2.parameters(), weight_decay=0),
    ],
    lr=args.lr,
)


def train():
    model.train()
    optimizer.zero_grad()
    out = model(x, edge_index, edge_weight)
    loss = F.cross_entropy(out[train_mask], y[train_mask])
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def test():
    model.eval()
    pred = model(x, edge_index, edge_weight).argmax(dim=-1)
    accs = []
    for mask in [train_mask, val_mask, test_mask]:
        accs.append(int((pred[mask] == y[mask]).sum()) / int(mask.sum()))
    return accs


best_val_acc = test_acc = 0
times = []
for epoch in range(1, args.epochs + 1):
    start = time.time()
    loss = train()
    train_acc, val_acc, tmp_test_acc = test()
    if val_acc > best_val_acc:
        best_val_acc = val_acc
        test_acc = tmp_test_acc
        torch.save(model.state_dict(), "gcn_best.pt")
    times.append(time.time() - start)
    if epoch % 10 == 0 or epoch == 1:
        print(
            f"Epoch: {epoch:03d}, Loss: {loss:.4f}, Train Acc: {train_acc:.4f}, "
            f"Val Acc: {val_acc:.4f}, Test Acc: {tmp_test_acc:.4f}"
        )
print(f"Median time per epoch: {torch.tensor(times).median():.4f}s")
print(f"Best Val Acc: {best_val_acc:.4f}, Test Acc: {test_acc:.4f}")
print(f"Final train loss: {loss:.6f}")
torch.save(
    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": args.epochs},
    "gcn_last.pt",
)
