"""The DGL 2.1 side of the workloads (``dgl.nn.GATv2Conv``), a benchmark anchor only.

Runs under the DGL environment's python (``bench/setup_dgl_env.sh``), never in
gatfast's own: DGL 2.1 wants torch 2.2 and numpy < 2. gatfast is imported from
the checkout (PYTHONPATH), for the workloads and for the weights.

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
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp
from workloads import DTYPE, GatfastRunner, Workload

# norm-wise relative difference allowed between DGL and gatfast in float32
FLOAT32_TOL = 1e-4


def dgl_available():
    try:
        import dgl  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def rel_err(a, b):
    """Norm-wise relative difference ``|a - b| / max(|a|, |b|)`` (0 for two zero arrays)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(np.linalg.norm(a), np.linalg.norm(b))
    return 0.0 if scale == 0 else float(np.linalg.norm(a - b) / scale)


def dgl_graph(graph):
    """The DGL graph of a gatfast ``CSRGraph``: edges source -> target, in gatfast's edge order."""
    import dgl
    import torch

    src, dst = graph.to_edge_index()
    return dgl.graph((torch.from_numpy(np.ascontiguousarray(src, dtype=np.int64)),
                      torch.from_numpy(np.ascontiguousarray(dst, dtype=np.int64))),
                     num_nodes=graph.num_nodes)


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

    class DglTwoLayer(torch.nn.Module):
        """The GAT recipe with DGL layers: ``conv2(elu(conv1(x)))``, each dropping its own input."""

        def __init__(self, conv1, conv2):
            super().__init__()
            self.conv1, self.conv2 = conv1, conv2

        def forward(self, graph, x):
            return self.conv2(graph, torch.nn.functional.elu(self.conv1(graph, x)))

    return DglGATv2, DglTwoLayer


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
    mod = make_layer(in_features=layer.in_features, out_features=layer.out_features, heads=layer.heads,
                     concat=layer.concat, negative_slope=layer.negative_slope, bias=layer.bias,
                     share_weights=layer.share_weights, residual=layer.residual,
                     feat_drop=feat_drop, attn_drop=layer.dropout)
    mod.to(torch.float64 if layer.dtype == np.float64 else torch.float32)
    load_gatfast_params(mod, layer.params)
    return mod


def two_layer_from_gatfast(model):
    """The 2-layer DGL network of a 2-layer node-level ELU ``gatfast.GATv2Network``, same weights."""
    if model.num_layers != 2 or model.readout is not None or model.activation != "elu":
        raise ValueError("only the 2-layer node-level ELU recipe is mapped")
    first, last = model.layers
    return _torch_modules()[1](layer_from_gatfast(first, feat_drop=model.dropout),
                               layer_from_gatfast(last, feat_drop=model.dropout))


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
    """DGL's ``GATv2Conv`` (or the 2-layer recipe) on a workload, with gatfast's weights, ready to time.

    The interface of ``PygRunner``: ``forward``, ``forward_backward``,
    ``forward_cache`` + ``backward_only``, ``train_step``. The weights are those
    of ``GatfastRunner(w, seed)``; :func:`agreement` checks the outputs and
    gradients against it.
    """

    def __init__(self, w: Workload, seed=0):
        import torch

        torch.manual_seed(seed)  # dropout masks
        self.torch = torch
        self.w = w
        self.graph = dgl_graph(w.graph)
        self.x = torch.from_numpy(np.ascontiguousarray(w.dense_x(), dtype=DTYPE))
        self.grad = torch.from_numpy(w.grad_out())
        self.x_grad = not sp.issparse(w.x)
        ref = GatfastRunner(w, seed)
        if w.kind == "train":
            self.model = two_layer_from_gatfast(ref.model)
            self.y = torch.from_numpy(w.y)
            self.mask = torch.from_numpy(w.train_mask)
            self.opt = torch.optim.Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
        else:
            self.model = layer_from_gatfast(ref.layer)
            self.opt = None
        self.model.float()

    def forward(self):
        with self.torch.no_grad():
            if self.w.kind == "train":
                self.model.eval()
            return self.model(self.graph, self.x)

    def forward_backward(self):
        if self.w.kind == "train":
            return self.train_step()
        x = self.x.requires_grad_(self.x_grad)
        self.model.zero_grad(set_to_none=True)
        x.grad = None
        out = self.model(self.graph, x)
        out.backward(self.grad)
        return out

    def forward_cache(self):
        """A forward pass with the autograd graph kept, for ``backward_only``."""
        x = self.x.requires_grad_(self.x_grad)
        self.model.zero_grad(set_to_none=True)
        x.grad = None
        return self.model(self.graph, x)

    def backward_only(self, out):
        out.backward(self.grad, retain_graph=True)

    def loss(self):
        import torch.nn.functional as F

        logits = self.model(self.graph, self.x)
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


def agreement(w: Workload, seed=0):
    """Largest norm-wise relative difference between DGL and gatfast on ``w``, same weights, no dropout.

    Compares the output and every gradient: of the layer (parameters and, for
    dense features, the input; upstream gradient ``w.grad_out()``) or, for the
    training workload, of the 2-layer network under its cross-entropy loss in
    evaluation mode (the training step is the same computation plus dropout
    masks, which no two libraries draw alike, and Adam).
    Returns ``{name: rel_err}``; ``check_agreement`` turns it into a pass/fail.
    """
    import torch

    ref = GatfastRunner(w, seed)
    dgl_side = DglRunner(w, seed)
    errs = {}
    if w.kind == "train":
        from gatfast.models import softmax_cross_entropy

        model = ref.model
        logits, cache = model.forward(w.graph, w.x, training=False)
        _, grad = softmax_cross_entropy(logits, w.y, w.train_mask)
        want = model.backward(cache, grad)
        dgl_side.model.eval()
        out = dgl_side.model(dgl_side.graph, dgl_side.x)
        torch.nn.functional.cross_entropy(out[dgl_side.mask], dgl_side.y[dgl_side.mask]).backward()
        errs["out"] = rel_err(out.detach().numpy(), logits)
        for l, mod in enumerate((dgl_side.model.conv1, dgl_side.model.conv2)):
            for k, v in gatfast_grads(mod).items():
                errs[f"layers.{l}.{k}"] = rel_err(v, want[f"layers.{l}.{k}"])
    else:
        out_ref, cache = ref.layer.forward(w.graph, w.x)
        want = ref.layer.backward(cache, ref.grad)
        x = dgl_side.x.requires_grad_(dgl_side.x_grad)
        out = dgl_side.model(dgl_side.graph, x)
        out.backward(dgl_side.grad)
        errs["out"] = rel_err(out.detach().numpy(), out_ref)
        got = gatfast_grads(dgl_side.model)
        if dgl_side.x_grad:
            got["x"] = x.grad.numpy()
        for k, v in got.items():
            errs[k] = rel_err(v, want[k])
    return errs


def check_agreement(w: Workload, seed=0, tol=FLOAT32_TOL):
    """:func:`agreement`, raising if any difference exceeds ``tol``; returns the largest one."""
    errs = agreement(w, seed)
    worst = max(errs, key=errs.get)
    if errs[worst] > tol:
        raise AssertionError(f"DGL and gatfast differ on {w.name}: {worst} rel. error {errs[worst]:.2e} > {tol:g} "
                             f"({errs})")
    return errs[worst]
