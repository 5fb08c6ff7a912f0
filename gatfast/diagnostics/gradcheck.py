"""Finite-difference check of the closed-form gradients (what ``gatfast gradcheck`` runs)."""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..graph import CSRGraph
from ..layers import GATv2Layer

__all__ = ["gradcheck_layer", "random_block", "random_graph"]


def random_graph(num_nodes, avg_degree=3.0, seed=None):
    """Build a random directed graph with varied in-degrees (some rows empty, one large).

    Parameters
    ----------
    num_nodes : int
        Number of nodes, >= 2.
    avg_degree : float, default 3.0
        Mean in-degree of the Poisson-distributed rows; node 0 aggregates from every node.
    seed : int or numpy.random.Generator, optional
        The random stream.

    Returns
    -------
    CSRGraph
        Rows unsorted, without duplicate edges.
    """
    num_nodes = V.check_int(num_nodes, "num_nodes", 2)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(num_nodes):
        k = int(min(num_nodes, rng.poisson(avg_degree)))
        if i == 0:
            k = num_nodes  # one node aggregates from everybody
        rows.append(rng.choice(num_nodes, size=k, replace=False))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    return CSRGraph(indptr, np.concatenate(rows).astype(np.int64), num_nodes)


def random_block(num_src, num_dst, avg_degree=3.0, seed=None):
    """Build a random bipartite graph: ``num_dst`` targets reading ``num_src`` sources.

    Parameters
    ----------
    num_src, num_dst : int
        Numbers of sources and targets.
    avg_degree : float, default 3.0
        Mean in-degree of the Poisson-distributed rows; row 0 reads every source.
    seed : int or numpy.random.Generator, optional
        The random stream.

    Returns
    -------
    CSRGraph
        Shape ``(num_dst, num_src)``, without duplicate edges.
    """
    rng = np.random.default_rng(seed)
    rows = [rng.choice(num_src, size=int(min(num_src, rng.poisson(avg_degree))), replace=False)
            for _ in range(num_dst)]
    rows[0] = np.arange(num_src)
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    return CSRGraph(indptr, np.concatenate(rows).astype(np.int64), num_dst, num_src)


def gradcheck_layer(
    num_nodes=12,
    in_features=5,
    out_features=4,
    heads=2,
    concat=True,
    theta_r="linear",
    eps=1e-6,
    seed=0,
    edge_dim=None,
    bipartite=False,
    **layer_kwargs,
):
    """Compare every gradient of a float64 layer with central finite differences.

    The loss is ``sum(out * R)`` for a fixed random ``R``. For each
    parameter and input the error is ``max|numeric - analytic| /
    max|analytic|``.

    Parameters
    ----------
    num_nodes, in_features, out_features, heads : int
        The random graph's size and the layer's shape.
    concat : bool
        Concatenate the heads.
    theta_r : {"linear", "pairwise"}
        The form of the Θ_R term to check.
    eps : float
        The finite-difference step.
    seed : int
        Seeds the graph, the features, the weights and ``R``.
    edge_dim : int, optional
        Check edge features too (random attributes, the ``mean`` fill).
    bipartite : bool
        A bipartite layer on a block of ``num_nodes`` targets reading
        ``num_nodes + 3`` sources (``x`` is then ``x_src`` and ``x_dst``).
    **layer_kwargs
        Passed to :class:`GATv2Layer`.

    Returns
    -------
    errors : dict
        Relative error per parameter name and input (``"x"``, or
        ``"x_src"`` and ``"x_dst"``; ``"edge_attr"`` with edge features).
    """
    rng = np.random.default_rng(seed)
    num_nodes = V.check_int(num_nodes, "num_nodes", 2)
    if bipartite:
        graph = random_block(num_nodes + 3, num_nodes, seed=rng)
        features = (in_features, max(1, in_features - 1))
    else:
        graph = random_graph(num_nodes, seed=rng)
        features = in_features
    layer = GATv2Layer(features, out_features, heads=heads, concat=concat, dtype=np.float64, seed=rng,
                       edge_dim=edge_dim, **layer_kwargs)
    for name, arr in layer.params.items():
        if name.startswith("b"):  # non-zero biases so that they matter
            layer.params[name] = rng.normal(scale=0.5, size=arr.shape)
    inputs = {}
    if bipartite:
        inputs["x_src"] = rng.normal(size=(graph.num_src, features[0]))
        inputs["x_dst"] = rng.normal(size=(graph.num_dst, features[1]))
    else:
        inputs["x"] = rng.normal(size=(num_nodes, in_features))
    if edge_dim is not None:
        inputs["edge_attr"] = rng.normal(size=(graph.nnz, edge_dim))
    R = rng.normal(size=(graph.num_dst, layer.out_dim))

    def run():
        x = (inputs["x_src"], inputs["x_dst"]) if bipartite else inputs["x"]
        return layer.forward(graph, x, inputs.get("edge_attr"))

    out, cache = run()
    grads = layer.backward(cache, R, theta_r=theta_r)
    if bipartite:
        grads["x_src"], grads["x_dst"] = grads.pop("x")
    arrays = {**{name: layer.params[name] for name in layer.params}, **inputs}
    errors = {}
    for name in list(arrays):
        base = arrays[name].copy()  # assigning a parameter copies into the stored array
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            values = []
            for step in (eps, -eps):
                trial = base.copy()
                trial[idx] += step
                if name in inputs:
                    inputs[name] = trial
                else:
                    layer.params[name] = trial
                values.append(float(np.sum(run()[0] * R)))
            numeric[idx] = (values[0] - values[1]) / (2 * eps)
        if name in inputs:
            inputs[name] = base
        else:
            layer.params[name] = base
        analytic = grads[name]
        scale = max(np.max(np.abs(analytic)), 1e-12)
        errors[name] = float(np.max(np.abs(numeric - analytic)) / scale)
    return errors
