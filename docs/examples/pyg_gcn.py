"""A graph network of your own: a 2-layer PyTorch Geometric GCN, one node-classification step.

    detbench run --workload docs/examples/pyg_gcn.py --device cpu

The graph is a seeded random one (put your own ``x``, ``edge_index`` and labels there). On CUDA
its message passing scatter-adds every edge's message into its target node with atomic adds:
run it there to see whether that changes its bits from run to run. Without torch_geometric the
records are ``unsupported``, with the reason, rather than an error.
"""

import torch
import torch.nn.functional as F

import detbench

NODES, EDGES, FEATURES, CLASSES = 2000, 20000, 32, 8


@detbench.workload(suite="custom", items_per_step=NODES, loss_output=0)
def random_graph_gcn(ctx):
    try:
        from torch_geometric.nn import GCNConv
    except ImportError as exc:
        raise detbench.Unsupported(f"needs torch_geometric: {exc}") from None

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(FEATURES, 64)
            self.conv2 = GCNConv(64, CLASSES)

        def forward(self, x, edge_index):
            x = F.dropout(x, p=0.5, training=self.training)
            x = self.conv1(x, edge_index).relu()
            x = F.dropout(x, p=0.5, training=self.training)
            return self.conv2(x, edge_index)

    model = GCN().to(ctx.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    x = torch.randn(NODES, FEATURES, device=ctx.device)
    edge_index = torch.randint(0, NODES, (2, EDGES), device=ctx.device)
    y = torch.randint(0, CLASSES, (NODES,), device=ctx.device)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x, edge_index), y)
        loss.backward()
        opt.step()
        return [loss.detach(), *(p.detach() for p in model.parameters())]

    return step
