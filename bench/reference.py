"""The PyTorch Geometric side of the workloads (``torch_geometric.nn.GATv2Conv``), with gatfast's weights.

Same shapes, float32, the same edges (self loops already present, so
``add_self_loops=False``), the same upstream gradient and **the same
weights** as the gatfast side: ``PygRunner(w, seed)`` builds
``GatfastRunner(w, seed)`` and copies its parameters into PyG's modules, so
``outputs()`` can be checked against gatfast's before anything is timed
(``agreement.check``). Features are dense tensors (PyG's ``Linear`` takes no
sparse input); for dense-feature workloads ``x`` (and ``x_dst``)
``requires_grad``, and for edge-feature workloads ``edge_attr`` too, because
gatfast returns those gradients as well.

The parameters map as: ``W_l``/``b_l`` -> ``lin_l``, ``W_r``/``b_r`` ->
``lin_r``, ``att`` (H, C) -> ``att`` (1, H, C), ``W_e`` -> ``lin_edge``
(no bias), ``W_res`` -> ``res``, ``bias`` -> ``bias``.
"""

from __future__ import annotations

import numpy as np
from workloads import DTYPE, GatfastRunner, Workload


def pyg_available():
    try:
        import torch  # noqa: F401
        import torch_geometric  # noqa: F401
    except ImportError:
        return False
    return True


# gatfast name -> (PyG submodule or None, parameter)
_NAMES = {"W_l": ("lin_l", "weight"), "b_l": ("lin_l", "bias"), "W_r": ("lin_r", "weight"),
          "b_r": ("lin_r", "bias"), "att": (None, "att"), "W_e": ("lin_edge", "weight"),
          "W_res": ("res", "weight"), "bias": (None, "bias")}


def _param(conv, name):
    mod, attr = _NAMES[name]
    return getattr(conv if mod is None else getattr(conv, mod), attr)


def conv_from_gatfast(layer):
    """A ``GATv2Conv`` of the same configuration as a ``gatfast.GATv2Layer``, holding its weights (float32/64)."""
    import torch
    from torch_geometric.nn import GATv2Conv

    if layer.attention_activation != "leaky_relu" or layer.root_weight is not None:
        raise ValueError("PyG's GATv2Conv has only the LeakyReLU score and no root weight")
    conv = GATv2Conv(
        layer.in_features, layer.out_features, heads=layer.heads, concat=layer.concat,
        negative_slope=layer.negative_slope, add_self_loops=False, bias=layer.bias,
        share_weights=layer.share_weights, dropout=layer.dropout, residual=layer.residual,
        edge_dim=layer.edge_dim,
    )
    conv.to(torch.float64 if layer.dtype == np.float64 else torch.float32)
    with torch.no_grad():
        for name, value in layer.params.items():
            dst = _param(conv, name)
            dst.copy_(torch.from_numpy(np.ascontiguousarray(value)).reshape(dst.shape))
    return conv


def conv_grads(conv, names):
    """The gradients held by a ``GATv2Conv``, under gatfast's parameter names."""
    out = {}
    for name in names:
        g = _param(conv, name).grad.detach().numpy()
        out[name] = g[0] if name == "att" else g  # PyG's att is (1, H, C)
    return out


def network_from_gatfast(model):
    """A node-level PyG network with the layers, activation and dropout of a ``gatfast.GATv2Network``."""
    import torch
    import torch.nn.functional as F

    if model.readout is not None or model.activation != "elu":
        raise ValueError("only node-level ELU networks are mapped")

    class Network(torch.nn.Module):
        """``drop -> conv -> elu`` per hidden layer, ``drop -> conv`` for the output layer (gatfast's stack)."""

        def __init__(self, convs, dropout):
            super().__init__()
            self.convs = torch.nn.ModuleList(convs)
            self.dropout = dropout

        def forward(self, x, edge_index):
            for l, conv in enumerate(self.convs):
                x = F.dropout(x, p=self.dropout, training=self.training)
                x = conv(x, edge_index)
                if l < len(self.convs) - 1:
                    x = F.elu(x)
            return x

    return Network([conv_from_gatfast(layer) for layer in model.layers], model.dropout)


class PygRunner:
    """PyG's ``GATv2Conv`` (or the network) on a workload, with gatfast's weights, ready to time."""

    def __init__(self, w: Workload, seed=0):
        import scipy.sparse as sp
        import torch

        torch.manual_seed(seed)  # dropout masks
        self.torch = torch
        self.w = w
        self.edge_index = torch.from_numpy(w.graph.to_edge_index())
        self.x = torch.from_numpy(np.ascontiguousarray(w.dense_x(), dtype=DTYPE))
        self.x_dst = None if w.x_dst is None else torch.from_numpy(np.ascontiguousarray(w.x_dst))
        self.edge_attr = None if w.edge_attr is None else torch.from_numpy(np.ascontiguousarray(w.edge_attr))
        self.grad = torch.from_numpy(w.grad_out())
        self.x_grad = not sp.issparse(w.x)
        ref = GatfastRunner(w, seed)
        if w.kind == "train":
            self.model = network_from_gatfast(ref.model)
            self.names = list(ref.model.parameters())
            if w.extra["task"] == "regression":
                self.y = torch.from_numpy(w.y)
            else:
                self.y, self.mask = torch.from_numpy(w.y), torch.from_numpy(w.train_mask)
            self.opt = torch.optim.Adam(self.model.parameters(), **w.extra["optim"])
        else:
            self.model = conv_from_gatfast(ref.layer)
            self.names = list(ref.layer.params)
            self.opt = None

    # -- single layer
    def _inputs(self):
        """The layer's inputs with ``requires_grad`` set and old gradients cleared."""
        x = self.x.requires_grad_(self.x_grad)
        x.grad = None
        if self.x_dst is not None:
            x_dst = self.x_dst.requires_grad_(True)
            x_dst.grad = None
            x = (x, x_dst)
        if self.edge_attr is not None:
            self.edge_attr.requires_grad_(True)
            self.edge_attr.grad = None
        return x

    def _layer(self, x):
        return self.model(x, self.edge_index, self.edge_attr)

    def forward(self):
        with self.torch.no_grad():
            if self.w.kind == "train":
                self.model.eval()
                return self.model(self.x, self.edge_index)
            x = self.x if self.x_dst is None else (self.x, self.x_dst)
            return self._layer(x)

    def forward_backward(self):
        if self.w.kind == "train":
            return self.train_step()
        self.model.zero_grad(set_to_none=True)
        out = self._layer(self._inputs())
        out.backward(self.grad)
        return out

    def forward_cache(self):
        """A forward pass with the autograd graph kept, for ``backward_only``."""
        self.model.zero_grad(set_to_none=True)
        return self._layer(self._inputs())

    def backward_only(self, out):
        out.backward(self.grad, retain_graph=True)

    # -- network
    def loss(self, out):
        import torch.nn.functional as F

        if self.w.extra["task"] == "regression":
            return F.mse_loss(out, self.y)
        return F.cross_entropy(out[self.mask], self.y[self.mask])

    def train_step(self):
        if self.w.kind == "train":
            self.model.train()
            self.opt.zero_grad(set_to_none=True)
            loss = self.loss(self.model(self.x, self.edge_index))
            loss.backward()
            self.opt.step()
            return loss
        if self.opt is None:
            self.opt = self.torch.optim.Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
        self.opt.zero_grad(set_to_none=True)
        out = self.forward_backward()
        self.opt.step()
        return out

    def outputs(self):
        """The output and gradients under gatfast's names (see ``GatfastRunner.outputs``): no dropout, no step."""
        self.model.zero_grad(set_to_none=True)
        if self.w.kind == "train":
            self.model.eval()
            out = self.model(self.x, self.edge_index)
            self.loss(out).backward()
            got = {"out": out.detach().numpy()}
            for l, conv in enumerate(self.model.convs):
                names = [n.split(".", 2)[2] for n in self.names if n.startswith(f"layers.{l}.")]
                got.update({f"layers.{l}.{k}": v for k, v in conv_grads(conv, names).items()})
            return got
        x = self._inputs()
        out = self._layer(x)
        out.backward(self.grad)
        got = {"out": out.detach().numpy(), **conv_grads(self.model, self.names)}
        if self.x_dst is not None:
            got["x_src"], got["x_dst"] = x[0].grad.numpy(), x[1].grad.numpy()
        elif self.x_grad:
            got["x"] = x.grad.numpy()
        if self.edge_attr is not None:
            got["edge_attr"] = self.edge_attr.grad.numpy()
        return got
