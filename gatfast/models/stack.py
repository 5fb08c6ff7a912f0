"""Forward and backward through a network's stack of layers.

The layers run over one graph (every layer on the same graph) or over a
list of blocks, one per layer (sampled mini-batches: block ``l``'s targets
are block ``l + 1``'s sources, and each block lists its targets first among
its sources, so a layer reads its targets as the first rows of its input).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .. import _runtime
from .. import _validate as V
from .._random import ATTENTION, FEATURES, HEAD, GraphIds, RandomKeys
from .activations import activation_backward, activation_forward, activation_forward_slope, multiply_slope
from .dropout import apply_dropout, checked_dropout
from .pooling import global_pool, global_pool_backward

__all__ = ["NetworkCache", "resolve_graphs", "stack_backward", "stack_forward"]


@dataclass
class NetworkCache:
    """What :meth:`GATv2Network.forward` keeps for the backward pass.

    Attributes
    ----------
    layer_caches : list of LayerCache
        ``layer_caches[l]`` is the :class:`~gatfast.LayerCache` of layer ``l``
        (its ``alpha`` holds that layer's attention; None where an inference
        pass, ``GATv2Network.output``, kept none).
    masks : list
        ``masks[l]``: the feature-dropout multipliers applied to layer ``l``'s
        input (None when no dropout was drawn; a pair for bipartite input).
    pre, post : list of ndarray
        The values before and after each activation, in layer order.
    slopes : list of ndarray or None
        The activation's derivative at each ``pre`` where the forward pass formed it with the
        activation (float32 ELU in training: one more array of each hidden layer's size, which
        spares the backward a second evaluation of ``exp``), else None.
    pool_cache : PoolCache or None
        The readout's pooling cache (None without readout).
    head_mask : ndarray or None
        The dropout multipliers of the readout head's input (None when not drawn).
    head_cache : LinearCache or None
        The readout head's cache (None without readout).
    out_shape : tuple of int
        Shape of the output.
    dense_input : bool or (bool, bool)
        Whether the input (each input of a pair) was dense, so that ``grads["x"]`` is returned.
    edge_attr_shared : bool
        One edge-attribute array fed every layer, so its gradients are added up.
    """

    layer_caches: list = field(default_factory=list)
    masks: list = field(default_factory=list)
    pre: list = field(default_factory=list)
    post: list = field(default_factory=list)
    slopes: list = field(default_factory=list)
    pool_cache: object = None
    head_mask: np.ndarray = None
    head_cache: object = None
    out_shape: tuple = ()
    dense_input: bool = True
    edge_attr_shared: bool = True


def resolve_graphs(net, graph, x, edge_attr):
    """``(graphs, edge_attrs)``: one graph and one attribute array (or None) per layer."""
    L = net.num_layers
    if isinstance(graph, (list, tuple)):
        if len(graph) != L:
            raise ValueError(f"graph as a list of blocks must have one block per layer ({L}), got {len(graph)}")
        graphs = [V.as_graph(g, f"graph[{k}]") for k, g in enumerate(graph)]
        for k in range(L - 1):
            if graphs[k].num_dst != graphs[k + 1].num_src:
                raise ValueError(f"graph[{k + 1}] must have as many sources as graph[{k}] has targets "
                                 f"({graphs[k].num_dst}), got {graphs[k + 1].num_src}")
        if edge_attr is None:
            attrs = [None] * L
        elif isinstance(edge_attr, (list, tuple)) and len(edge_attr) == L:
            attrs = list(edge_attr)
        else:
            raise ValueError(f"edge_attr for a list of blocks must be a list of one array per block ({L})")
        return graphs, attrs, False
    g = V.as_graph(graph)
    if L > 1 and (isinstance(x, (tuple, list)) or g.is_bipartite()):
        raise ValueError(f"a {L}-layer network needs a square graph, or a list of {L} blocks (one per layer); "
                         "a single bipartite graph fits a one-layer network only")
    return [g] * L, [edge_attr] * L, True


def _checked_input(net, graph, x, finite=True):
    """``x`` validated and in the network's dtype (dropout masks and gradients then stay in it);
    ``finite=False`` skips the NaN/inf pass over an ``x`` the caller checked."""
    if isinstance(net.in_features, tuple):
        if not isinstance(x, tuple) or len(x) != 2:
            raise TypeError(f"x must be a pair (x_src, x_dst): the network was built with in_features="
                            f"{net.in_features!r}")
        return (V.check_features(x[0], "x[0] (x_src)", graph.num_src, net.in_features[0], net.dtype, finite),
                V.check_features(x[1], "x[1] (x_dst)", graph.num_dst, net.in_features[1], net.dtype, finite))
    if isinstance(x, tuple):
        raise TypeError("x is a pair (x_src, x_dst) but the network takes one feature matrix: build it with "
                        "in_features=(F_src, F_dst) for bipartite input")
    return V.check_features(x, "x", graph.num_src, net.in_features, net.dtype, finite)


class _Streams:
    """Where each dropout draw comes from: a Generator (call order), or keys and global ids."""

    def __init__(self, rng, ids, graphs, num_graphs):
        self.rng = rng
        self.keyed = isinstance(rng, RandomKeys)
        if self.keyed:
            self.ids = ids if ids is not None else GraphIds.positions(graphs, num_graphs)
            if len(self.ids.nodes) != len(graphs) or len(self.ids.edges) != len(graphs):
                raise ValueError(f"ids must give node and edge ids for each of the {len(graphs)} layers")
        elif ids is not None:
            raise ValueError("ids are only used with RandomKeys (keyed dropout)")
        self.graphs = graphs

    def features(self, l):
        if not self.keyed:
            return self.rng, None
        return self.rng.child(FEATURES, l), self.ids.nodes[l]

    def attention(self, l, pair):
        if not self.keyed:
            return self.rng
        g = self.graphs[l]
        dst = np.arange(g.num_dst, dtype=np.int64) if pair else self.ids.nodes[l][: g.num_dst]
        return self.rng.child(ATTENTION, l).for_graph(self.ids.edges[l], dst)

    def head(self):
        if not self.keyed:
            return self.rng, None
        return self.rng.child(HEAD), self.ids.graphs


def stack_forward(net, graph, x, graph_ptr, training, rng, edge_attr, ids=None, x_finite=False, keep_cache=True):
    """The output and :class:`NetworkCache` of ``net`` (see ``GATv2Network.forward``).

    ``x_finite=True``: ``x`` holds rows of features the caller has checked for NaN and inf (the
    training loop checks its dataset once), so the pass over it is skipped; its shape and dtype
    are still checked. ``keep_cache=False`` (``GATv2Network.output``): the layers keep no cache
    where that saves work, and the cache returned cannot be differentiated.
    """
    if isinstance(x, list):
        x = tuple(x)
    graphs, attrs, shared = resolve_graphs(net, graph, x, edge_attr)
    x = _checked_input(net, graphs[0], x, not x_finite)
    out_rows = graphs[-1].num_dst
    ptr = None
    if net.readout is not None:
        if graph_ptr is None:
            raise ValueError(f"graph_ptr is required with readout={net.readout!r}")
        ptr = V.check_graph_ptr(graph_ptr, out_rows)
    elif graph_ptr is not None:
        raise ValueError("graph_ptr must be None for a node-level model (readout=None)")
    if not isinstance(rng, RandomKeys):
        V.check_rng(rng)
    streams = _Streams(rng, ids, graphs, (ptr.size - 1) if net.readout is not None else None)
    drop = training and net.dropout > 0.0
    dense = tuple(not sp.issparse(a) for a in x) if isinstance(x, tuple) else not sp.issparse(x)
    cache = NetworkCache(dense_input=dense, edge_attr_shared=shared)
    work = _blas_work(net, [g.num_src for g in graphs])
    h = _forward_layers(net, cache, graphs, attrs, x, training, streams, drop, ptr, keep_cache, work)
    cache.out_shape = h.shape
    return h, cache


def _blas_work(net, source_rows):
    """The largest layer product of a pass (rows x inputs x outputs), as a layer measures its own;
    0 (no hold) for rows that are not known (caches a layer will refuse)."""
    if source_rows is None:
        return 0
    return max((rows * layer.in_features_src * layer.heads * layer.out_features
                for rows, layer in zip(source_rows, net.layers)), default=0)


def _cache_rows(cache):
    """The source rows of each layer cache, or None where one is not a layer's cache."""
    rows = []
    for lc in cache.layer_caches:
        x_src = getattr(getattr(lc, "inputs", None), "x_src", None)
        if x_src is None:
            return None
        rows.append(x_src.shape[0])
    return rows


def _forward_layers(net, cache, graphs, attrs, x, training, streams, drop, ptr, keep_cache, work):
    """The layers, activations and head of :func:`stack_forward`; the output (``cache`` filled)."""
    h = x
    with _runtime.blas_single_thread(work):  # the layers' products: one hold, not one per layer
        for l, layer in enumerate(net.layers):
            mask, finite = None, True
            if drop:  # h is the checked input or a checked layer output (see _forward_checked)
                h, mask, finite = checked_dropout(h, net.dropout, *streams.features(l))
            rng = streams.attention(l, isinstance(h, tuple))
            out, lc = layer._forward_checked(graphs[l], h, attrs[l], training, rng, finite, keep_cache)
            cache.layer_caches.append(lc)
            cache.masks.append(mask)
            if net.has_activation(l):
                if training:  # a training step's backward: the derivative from the same evaluation
                    post, slope = activation_forward_slope(net.activation, out)  # a checked layer output
                else:
                    post, slope = activation_forward(net.activation, out, check_finite=False), None
                cache.pre.append(out)
                cache.post.append(post)
                cache.slopes.append(slope)
                h = post
            else:
                h = out
    if net.head is not None:
        h, cache.pool_cache = global_pool(h, ptr, net.readout)
        if drop:
            h, cache.head_mask = apply_dropout(h, net.dropout, *streams.head())
        h, cache.head_cache = net.head.forward(h)
    return h


def _masked(grad, mask):
    if grad is None or mask is None:
        return grad
    if isinstance(grad, tuple):
        return tuple(None if g is None else g * m for g, m in zip(grad, mask))
    return grad * mask


def stack_backward(net, cache, grad, theta_r, input_grad=True):
    """Every parameter's gradient, ``"x"`` and (with edge features) ``"edge_attr"``."""
    return _backward_layers(net, cache, grad, theta_r, input_grad, _blas_work(net, _cache_rows(cache)))


def _backward_layers(net, cache, grad, theta_r, input_grad, work):
    grads = {}
    if net.head is not None:
        hg = net.head.backward(cache.head_cache, grad)
        for k in net.head.params:
            grads[f"head.{k}"] = hg[k]
        grad = hg["x"]
        if cache.head_mask is not None:
            grad = grad * cache.head_mask
        grad = global_pool_backward(grad, cache.pool_cache)
    act_index = len(cache.pre)
    edge_grads = []
    with _runtime.blas_single_thread(work):  # the layers' products: one hold, not one per layer
        for l in range(net.num_layers - 1, -1, -1):
            if net.has_activation(l):
                act_index -= 1
                slope = cache.slopes[act_index] if len(cache.slopes) == len(cache.pre) else None
                through = None if slope is None else multiply_slope(slope, grad)
                grad = through if through is not None else activation_backward(
                    net.activation, cache.pre[act_index], cache.post[act_index], grad, check_finite=False
                )  # what the network made
            # below the last layer, grad comes from the layer above (see _backward_checked)
            lg = net.layers[l]._backward_checked(cache.layer_caches[l], grad, theta_r, input_grad or l > 0,
                                                 l < net.num_layers - 1, edge_grad=input_grad)
            for k in net.layers[l].params:
                grads[f"layers.{l}.{k}"] = lg[k]
            if lg.get("edge_attr") is not None:
                edge_grads.append(lg["edge_attr"])
            grad = _masked(lg["x"], cache.masks[l])
    ordered = {k: grads[k] for k in net.parameters()}
    dense = cache.dense_input if input_grad else False
    if isinstance(dense, tuple):
        ordered["x"] = tuple(g if d else None for g, d in zip(grad, dense))
    elif dense:
        ordered["x"] = grad
    if edge_grads:
        edge_grads.reverse()  # layer order
        if cache.edge_attr_shared:  # one attribute array feeds every layer: add in layer order
            total = edge_grads[0].copy()
            for g in edge_grads[1:]:
                total += g
            ordered["edge_attr"] = total
        else:
            ordered["edge_attr"] = edge_grads
    return ordered
