"""The PyTorch Geometric side of the workloads (``torch_geometric.nn.GATv2Conv``).

Same shapes, float32, the same edges (self loops already present, so
``add_self_loops=False``), and the same upstream gradient as the gatfast
side. Features are dense tensors (PyG's ``Linear`` takes no sparse input);
for dense-feature workloads ``x.requires_grad`` is set, because gatfast
returns the input gradient too.
"""

from __future__ import annotations

import numpy as np
from workloads import Workload


def pyg_available():
    try:
        import torch  # noqa: F401
        import torch_geometric  # noqa: F401
    except ImportError:
        return False
    return True


class PygRunner:
    """One ``GATv2Conv`` (or the 2-layer recipe) on a workload, ready to time."""

    def __init__(self, w: Workload, seed=0):
        import scipy.sparse as sp
        import torch
        from torch_geometric.nn import GATv2Conv

        torch.manual_seed(seed)
        self.torch = torch
        self.w = w
        self.edge_index = torch.from_numpy(w.graph.to_edge_index())
        self.x = torch.from_numpy(np.ascontiguousarray(w.dense_x()))
        self.grad = torch.from_numpy(w.grad_out())
        self.x_grad = not sp.issparse(w.x)
        if w.kind == "train":
            self.model = _TwoLayer(w.in_features, w.out_features, w.extra["num_classes"], w.heads)
            self.y = torch.from_numpy(w.y)
            self.mask = torch.from_numpy(w.train_mask)
            self.opt = torch.optim.Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
        else:
            self.model = GATv2Conv(
                w.in_features, w.out_features, heads=w.heads, concat=w.concat, add_self_loops=False
            )
            self.opt = None

    def forward(self):
        with self.torch.no_grad():
            if self.w.kind == "train":
                self.model.eval()
            return self.model(self.x, self.edge_index)

    def forward_backward(self):
        if self.w.kind == "train":
            return self.train_step()
        x = self.x.requires_grad_(self.x_grad)
        self.model.zero_grad(set_to_none=True)
        x.grad = None
        out = self.model(x, self.edge_index)
        out.backward(self.grad)
        return out

    def forward_cache(self):
        """A forward pass with the autograd graph kept, for ``backward_only``."""
        x = self.x.requires_grad_(self.x_grad)
        self.model.zero_grad(set_to_none=True)
        x.grad = None
        return self.model(x, self.edge_index)

    def backward_only(self, out):
        out.backward(self.grad, retain_graph=True)

    def train_step(self):
        import torch.nn.functional as F

        if self.w.kind == "train":
            self.model.train()
            self.opt.zero_grad(set_to_none=True)
            logits = self.model(self.x, self.edge_index)
            loss = F.cross_entropy(logits[self.mask], self.y[self.mask])
            loss.backward()
            self.opt.step()
            return loss
        if self.opt is None:
            self.opt = self.torch.optim.Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
        self.opt.zero_grad(set_to_none=True)
        out = self.forward_backward()
        self.opt.step()
        return out


def _TwoLayer(in_features, hidden, num_classes, heads):
    """The GAT recipe: dropout 0.6 on features and attention, ELU, 8 heads then 1."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATv2Conv

    class TwoLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATv2Conv(in_features, hidden, heads=heads, dropout=0.6, add_self_loops=False)
            self.conv2 = GATv2Conv(hidden * heads, num_classes, heads=1, concat=False, dropout=0.6,
                                   add_self_loops=False)

        def forward(self, x, edge_index):
            x = F.dropout(x, p=0.6, training=self.training)
            x = F.elu(self.conv1(x, edge_index))
            x = F.dropout(x, p=0.6, training=self.training)
            return self.conv2(x, edge_index)

    return TwoLayer()
