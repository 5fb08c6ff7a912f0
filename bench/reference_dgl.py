"""The DGL 2.1 side of the workloads (``dgl.nn.GATv2Conv``), a benchmark anchor only.

Runs under the DGL environment's python (``bench/setup_dgl_env.sh``), never in
gatfast's own: DGL 2.1 wants torch 2.2 and numpy < 2. gatfast is imported from
the checkout (PYTHONPATH), for the workloads and for the weights.
``DglRunner.outputs()`` is checked against gatfast's with ``agreement.check``
before any timing (``compare.py``'s workers, the pytest-benchmark suites).

How DGL's ``GATv2Conv`` maps onto gatfast's ``GATv2Layer`` (and PyG's ``GATv2Conv``):

- ``fc_src`` is the projection of the *source* node, the one that is both in
  the score and in the message: gatfast's ``W_l``/``b_l`` (PyG's ``lin_l``).
  ``fc_dst`` projects the target node: ``W_r``/``b_r`` (PyG's ``lin_r``).
  With ``share_weights`` DGL makes ``fc_dst`` the same module as ``fc_src``.
- ``attn`` (1, H, C) is ``att`` (H, C).
- DGL has **no output bias**: its ``bias`` flag only gives ``fc_src``,
  ``fc_dst`` (and a linear ``res_fc``) their biases. gatfast and PyG add a
  learned ``bias`` after concatenating or averaging the heads, so
  :class:`DglGATv2` adds it after the convolution (equal work, same function).
- DGL returns (N, H, C) and never concatenates or averages: the wrapper does.
- DGL's residual is per head and gets a bias of its own when ``bias=True``, and
  is the identity (no weight) when ``in_features == H*C``; gatfast's ``W_res``
  maps x to the layer output after concat/mean, without bias. With
  ``concat=False`` the same ``W_res`` is given to every head (the mean of H
  copies is ``W_res x``); the identity case cannot hold a ``W_res`` and is refused.
- ``feat_drop`` drops the input features once, shared by both projections (the
  GAT recipe's dropout on each layer's input); ``attn_drop`` drops the softmax
  weights with the usual 1/(1-p) scaling, as gatfast's ``dropout``.
- Self loops: DGL's layer never adds them; by default it *refuses* a graph
  with a node of in-degree 0 (and pays an in-degree pass per call for that
  check). The workload graphs already hold one loop per node, so the layer is
  built with ``allow_zero_in_degree=True``: no check, no refusal, and a node
  without in-edges gets a zero aggregate, as in gatfast and PyG.
- Edges: gatfast's graph is CSR by target (row i lists the sources j of j -> i);
  the DGL graph is built from ``to_edge_index()`` as ``dgl.graph((sources,
  targets))``, so messages flow source -> target and DGL's edge ids follow
  gatfast's CSR edge order (``get_attention`` is then row for row ``cache.alpha``).
  A bipartite layer (``in_features=(F_src, F_dst)``) runs on DGL's bipartite
  graph ``dgl.heterograph({("src", "to", "dst"): ...})`` with ``(x_src, x_dst)``.
- Edge features: DGL 2.1's ``GATv2Conv`` has none, so the edge-feature
  workloads have no DGL run (``layer_from_gatfast`` refuses a layer with
  ``edge_dim``).
"""

from __future__ import annotations

import functools

import agreement
import numpy as np
import scipy.sparse as sp
from agreement import FLOAT32_TOL, rel_err  # noqa: F401  (the names tests/test_dgl_reference.py uses)
from workloads import DTYPE, GatfastRunner, Workload


def dgl_available():
    try:
        import dgl  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def dgl_graph(graph, bipartite=False):
    """The DGL graph of a gatfast ``CSRGraph``: edges source -> target, in gatfast's edge order.

    ``bipartite``: DGL's bipartite form (source and target node types), for ``(x_src, x_dst)`` input.
    """
    import dgl
    import torch

    src, dst = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)) for a in graph.to_edge_index())
    if bipartite:
        return dgl.heterograph({("src", "to", "dst"): (src, dst)},
                               num_nodes_dict={"src": graph.num_src, "dst": graph.num_dst})
    return dgl.graph((src, dst), num_nodes=graph.num_nodes)


@functools.cache
def _torch_modules():
    """The torch module classes (defined lazily: torch and DGL are imported only when used)."""
    import torch
    from dgl.nn import GATv2Conv

    class DglGATv2(torch.nn.Module):
        """DGL's ``GATv2Conv`` plus what gatfast's layer also does: concat/mean and the output bias."""

        def __init__(self, in_features, out_features, heads=1, concat=True, negative_slope=0.2,
                     bias=True, share_weights=False, residual=False, feat_drop=0.0, attn_drop=0.0):
            super().__init__()
            if residual and in_features == heads * out_features:
                raise ValueError("DGL's residual is the identity when in_features == heads * out_features: "
                                 "it cannot hold gatfast's W_res")
            self.heads, self.out_features, self.concat = heads, out_features, concat
            self.conv = GATv2Conv(
                in_features, out_features, heads, feat_drop=feat_drop, attn_drop=attn_drop,
                negative_slope=negative_slope, residual=residual, allow_zero_in_degree=True,
                bias=bias, share_weights=share_weights,
            )
            out_dim = heads * out_features if concat else out_features
            self.bias = torch.nn.Parameter(torch.zeros(out_dim)) if bias else None

        def forward(self, graph, x, get_attention=False):
            h = self.conv(graph, x, get_attention=get_attention)
            if get_attention:
                h, a = h
            h = h.flatten(1) if self.concat else h.mean(dim=1)
            if self.bias is not None:
                h = h + self.bias
            return (h, a[..., 0]) if get_attention else h

    class DglNetwork(torch.nn.Module):
        """gatfast's node-level stack with DGL layers: ``elu(conv(x))`` per hidden layer, each dropping its input."""

        def __init__(self, convs):
            super().__init__()
            self.convs = torch.nn.ModuleList(convs)

        @property
        def conv1(self):
            return self.convs[0]

        @property
        def conv2(self):
            return self.convs[1]

        def forward(self, graph, x):
            for l, conv in enumerate(self.convs):
                x = conv(graph, x)
                if l < len(self.convs) - 1:
                    x = torch.nn.functional.elu(x)
            return x

    return DglGATv2, DglNetwork


def make_layer(**kw):
    """A :class:`DglGATv2` (DGL's ``GATv2Conv`` + concat/mean + output bias)."""
    return _torch_modules()[0](**kw)


def layer_from_gatfast(layer, feat_drop=0.0):
    """A :class:`DglGATv2` of the same shape and dtype as a ``gatfast.GATv2Layer``, holding its weights.

    Attention dropout is the layer's ``dropout``; ``feat_drop`` drops the input
    features (gatfast's network does that outside its layers). DGL adds no self
    loops: give it ``layer.attention_graph(graph)``.
    """
    import torch

    if layer.attention_activation != "leaky_relu" or layer.root_weight is not None:
        raise ValueError("DGL's GATv2Conv has only the LeakyReLU score and no root weight")
    if layer.edge_dim is not None:
        raise ValueError("DGL's GATv2Conv has no edge features (edge_dim)")
    mod = make_layer(in_features=layer.in_features, out_features=layer.out_features, heads=layer.heads,
                     concat=layer.concat, negative_slope=layer.negative_slope, bias=layer.bias,
                     share_weights=layer.share_weights, residual=layer.residual,
                     feat_drop=feat_drop, attn_drop=layer.dropout)
    mod.to(torch.float64 if layer.dtype == np.float64 else torch.float32)
    load_gatfast_params(mod, layer.params)
    return mod


def network_from_gatfast(model):
    """The DGL network of a node-level ELU ``gatfast.GATv2Network`` (any depth), same weights."""
    if model.readout is not None or model.activation != "elu":
        raise ValueError("only node-level ELU networks are mapped")
    return _torch_modules()[1]([layer_from_gatfast(layer, feat_drop=model.dropout) for layer in model.layers])


two_layer_from_gatfast = network_from_gatfast  # the name of the 2-layer recipe's mapping


def load_gatfast_params(mod, params):
    """Copy gatfast's ``W_l, b_l, W_r, b_r, att, bias, W_res`` into a :class:`DglGATv2`."""
    import torch

    conv, H, C = mod.conv, mod.heads, mod.out_features

    def put(dst, value):
        with torch.no_grad():
            dst.copy_(torch.from_numpy(np.ascontiguousarray(value)).reshape(dst.shape))

    put(conv.fc_src.weight, params["W_l"])
    if "b_l" in params:
        put(conv.fc_src.bias, params["b_l"])
    if "W_r" in params:
        put(conv.fc_dst.weight, params["W_r"])
        if "b_r" in params:
            put(conv.fc_dst.bias, params["b_r"])
    elif conv.fc_dst is not conv.fc_src:
        raise ValueError("gatfast shares its weights (no W_r) but the DGL layer does not")
    put(conv.attn, params["att"])
    if "bias" in params:
        put(mod.bias, params["bias"])
    if "W_res" in params:
        w = params["W_res"] if mod.concat else np.tile(params["W_res"], (H, 1))  # every head: W_res
        put(conv.res_fc.weight, w)
        if conv.res_fc.bias is not None:
            put(conv.res_fc.bias, np.zeros(H * C))  # gatfast's residual has no bias


def gatfast_grads(mod):
    """The gradients held by a :class:`DglGATv2`, under gatfast's parameter names."""
    conv, H, C = mod.conv, mod.heads, mod.out_features

    def g(p):
        return p.grad.detach().numpy()

    grads = {"W_l": g(conv.fc_src.weight), "att": g(conv.attn).reshape(H, C)}
    if conv.fc_src.bias is not None:
        grads["b_l"] = g(conv.fc_src.bias)
    if conv.fc_dst is not conv.fc_src:
        grads["W_r"] = g(conv.fc_dst.weight)
        if conv.fc_dst.bias is not None:
            grads["b_r"] = g(conv.fc_dst.bias)
    if mod.bias is not None:
        grads["bias"] = g(mod.bias)
    if conv.res_fc is not None:
        w = g(conv.res_fc.weight)
        grads["W_res"] = w if mod.concat else w.reshape(H, C, -1).sum(axis=0)
    return grads


class DglRunner:
    """DGL's ``GATv2Conv`` (or the network) on a workload, with gatfast's weights, ready to time.

    The interface of ``PygRunner``: ``forward``, ``forward_backward``,
    ``forward_cache`` + ``backward_only``, ``train_step``, ``outputs``. The
    weights are those of ``GatfastRunner(w, seed)``.
    """

    def __init__(self, w: Workload, seed=0):
        import torch

        if w.edge_attr is not None:
            raise ValueError(f"{w.name}: DGL's GATv2Conv has no edge features")
        torch.manual_seed(seed)  # dropout masks
        self.torch = torch
        self.w = w
        self.graph = dgl_graph(w.graph, bipartite=w.bipartite)
        self.x = torch.from_numpy(np.ascontiguousarray(w.dense_x(), dtype=DTYPE))
        self.x_dst = None if w.x_dst is None else torch.from_numpy(np.ascontiguousarray(w.x_dst))
        self.grad = torch.from_numpy(w.grad_out())
        self.x_grad = not sp.issparse(w.x)
        ref = GatfastRunner(w, seed)
        if w.kind == "train":
            self.model = network_from_gatfast(ref.model)
            self.y = torch.from_numpy(w.y)
            self.mask = None if w.train_mask is None else torch.from_numpy(w.train_mask)
            self.opt = torch.optim.Adam(self.model.parameters(), **w.extra["optim"])
        else:
            self.model = layer_from_gatfast(ref.layer)
            self.opt = None
        self.model.float()

    def _inputs(self):
        x = self.x.requires_grad_(self.x_grad)
        x.grad = None
        if self.x_dst is None:
            return x
        x_dst = self.x_dst.requires_grad_(True)
        x_dst.grad = None
        return (x, x_dst)

    def forward(self):
        with self.torch.no_grad():
            if self.w.kind == "train":
                self.model.eval()
            return self.model(self.graph, self.x if self.x_dst is None else (self.x, self.x_dst))

    def forward_backward(self):
        if self.w.kind == "train":
            return self.train_step()
        self.model.zero_grad(set_to_none=True)
        out = self.model(self.graph, self._inputs())
        out.backward(self.grad)
        return out

    def forward_cache(self):
        """A forward pass with the autograd graph kept, for ``backward_only``."""
        self.model.zero_grad(set_to_none=True)
        return self.model(self.graph, self._inputs())

    def backward_only(self, out):
        out.backward(self.grad, retain_graph=True)

    def loss(self, logits=None):
        import torch.nn.functional as F

        logits = self.model(self.graph, self.x) if logits is None else logits
        if self.w.extra["task"] == "regression":
            return F.mse_loss(logits, self.y)
        return F.cross_entropy(logits[self.mask], self.y[self.mask])

    def train_step(self):
        if self.w.kind == "train":
            self.model.train()
            self.opt.zero_grad(set_to_none=True)
            loss = self.loss()
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
            out = self.model(self.graph, self.x)
            self.loss(out).backward()
            got = {"out": out.detach().numpy()}
            for l, mod in enumerate(self.model.convs):
                got.update({f"layers.{l}.{k}": v for k, v in gatfast_grads(mod).items()})
            return got
        x = self._inputs()
        out = self.model(self.graph, x)
        out.backward(self.grad)
        got = {"out": out.detach().numpy(), **gatfast_grads(self.model)}
        if self.x_dst is not None:
            got["x_src"], got["x_dst"] = x[0].grad.numpy(), x[1].grad.numpy()
        elif self.x_grad:
            got["x"] = x.grad.numpy()
        return got


def agreement_errors(w: Workload, seed=0):
    """``{name: error}`` between DGL and gatfast on ``w`` (same weights, no dropout; see ``agreement``)."""
    return agreement.errors(DglRunner(w, seed).outputs(), GatfastRunner(w, seed).outputs())


def check_agreement(w: Workload, seed=0, tol=FLOAT32_TOL):
    """Raise ``agreement.Disagreement`` if DGL does not compute gatfast's function on ``w``; returns the largest error."""
    errs = agreement.check(DglRunner(w, seed).outputs(), GatfastRunner(w, seed).outputs(), "DGL", w.name, tol)
    return max(errs.values())
