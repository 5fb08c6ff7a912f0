"""Θ_R gradient flow of every attention layer of a network."""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..layers import GATv2Layer, LayerCache
from .theta_r import theta_r_flow_from_cache

__all__ = ["flows_from_model_cache", "theta_r_flow_network"]


def theta_r_flow_network(model, graph, x, grads=None, graph_ptr=None, edge_attr=None):
    """:func:`theta_r_flow` for every layer of a network.

    Parameters
    ----------
    model : object with ``layers`` and ``forward(graph, x, training=False)``
        E.g. ``gatfast.models.GATv2Network``. Its forward cache must expose the
        per-layer :class:`~gatfast.LayerCache` objects (as ``layer_caches``).
    graph : CSRGraph or scipy.sparse matrix
        The graph to diagnose, CSR by target.
    x : ndarray or scipy.sparse matrix
        Its node features.
    grads : dict or list of dict, optional
        The model's gradients (``GATv2Network.backward``: keys
        ``"layers.<l>.<name>"``) or one dict per layer; only used for the norms.
    graph_ptr : ndarray, optional
        For models with a readout; defaults to one graph holding every node
        (the layers do not depend on it).
    edge_attr : ndarray, optional
        Edge features, for a model built with ``edge_dim``.

    Returns
    -------
    list of ThetaRFlow
        One per attention layer, in order.
    """
    _attention_layers(model)  # fail early with a clear message
    if graph_ptr is None and getattr(model, "readout", None) is not None:
        # the readout only pools the last layer; pooling per graph is irrelevant to the layers
        graph_ptr = np.array([0, V.as_graph(graph).num_nodes], dtype=np.int64)
    kwargs = {} if graph_ptr is None else {"graph_ptr": graph_ptr}
    if edge_attr is not None:
        kwargs["edge_attr"] = edge_attr
    _, cache = model.forward(graph, x, training=False, **kwargs)
    return flows_from_model_cache(model, cache, grads)


def flows_from_model_cache(model, cache, grads=None):
    """Diagnose every layer of ``model`` from one forward cache of it.

    Parameters
    ----------
    model : GATv2Network
        Or any object with ``layers``.
    cache : NetworkCache
        From ``model.forward``.
    grads : dict or list of dict, optional
        The model's gradients or one dict per layer, for the norms.

    Returns
    -------
    list of ThetaRFlow
        One per attention layer, in order.
    """
    layers = _attention_layers(model)
    caches = _layer_caches(cache, len(layers))
    layer_grads = _per_layer_grads(grads, len(layers))
    return [theta_r_flow_from_cache(layer, c, lg) for layer, c, lg in zip(layers, caches, layer_grads)]


def _attention_layers(model):
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"model must have a 'layers' attribute, got {type(model).__name__}")
    return [layer for layer in layers if isinstance(layer, GATv2Layer)]


def _layer_caches(cache, count):
    """The LayerCache objects inside a model's forward cache, in order.

    ``GATv2Network``'s cache has them in ``layer_caches``; other containers
    (a list, a dict or object with ``layers``/``layer_caches``) are searched.
    """
    direct = getattr(cache, "layer_caches", None)
    if isinstance(direct, list) and len(direct) == count and all(isinstance(c, LayerCache) for c in direct):
        return direct
    found = []

    def walk(obj, depth=0):
        if depth > 3:
            return
        if isinstance(obj, LayerCache):
            found.append(obj)
        elif isinstance(obj, dict):
            for key in ("layers", "layer_caches", "caches"):
                if key in obj:
                    walk(obj[key], depth + 1)
                    return
            for v in obj.values():
                walk(v, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, depth + 1)
        elif hasattr(obj, "__dict__"):
            d = vars(obj)
            for key in ("layers", "layer_caches", "caches"):
                if key in d:
                    walk(d[key], depth + 1)
                    return
            for v in d.values():
                walk(v, depth + 1)

    walk(cache)
    if len(found) != count:
        raise ValueError(
            f"the model's forward cache must hold one LayerCache per attention layer "
            f"({count}), found {len(found)}"
        )
    return found


def _per_layer_grads(grads, count):
    """Split gradients into one dict per layer.

    Accepts a list of per-layer dicts, or the flat dict of
    ``GATv2Network.backward`` (keys ``"layers.<l>.<name>"``; other keys such
    as ``"x"`` or ``"head.weight"`` are ignored).
    """
    if grads is None:
        return [None] * count
    if isinstance(grads, dict):
        per = [{} for _ in range(count)]
        for key, value in grads.items():
            parts = key.split(".")
            if len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and int(parts[1]) < count:
                per[int(parts[1])][parts[2]] = value
        if all(per):
            return per
    elif isinstance(grads, (list, tuple)) and len(grads) == count and all(isinstance(g, dict) for g in grads):
        return list(grads)
    raise ValueError(
        f"grads must be the model's gradient dict (keys 'layers.<l>.<name>') or a list of one "
        f"dict per attention layer ({count}), got {type(grads).__name__}"
    )
