"""Finite-difference check of the closed-form gradients (what ``gatfast gradcheck`` runs)."""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..graph import CSRGraph
from ..layers import GATv2Layer

__all__ = ["random_graph", "gradcheck_layer"]


def random_graph(num_nodes, avg_degree=3.0, seed=None):
    """A random directed graph with varied in-degrees (some rows empty, one large).

    Rows are left unsorted, duplicates are avoided.
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


def gradcheck_layer(
    num_nodes=12,
    in_features=5,
    out_features=4,
    heads=2,
    concat=True,
    theta_r="linear",
    eps=1e-6,
    seed=0,
    **layer_kwargs,
):
    """Compare every gradient of a float64 layer with central finite differences.

    The loss is ``sum(out * R)`` for a fixed random ``R``. For each
    parameter (and ``x``) the error is ``max|numeric - analytic| /
    max|analytic|``.

    Returns
    -------
    errors : dict
        Relative error per parameter name and ``"x"``.
    """
    rng = np.random.default_rng(seed)
    graph = random_graph(num_nodes, seed=rng)
    layer = GATv2Layer(
        in_features, out_features, heads=heads, concat=concat, dtype=np.float64, seed=rng, **layer_kwargs
    )
    for name, arr in layer.params.items():
        if name.startswith("b"):  # non-zero biases so that they matter
            layer.params[name] = rng.normal(scale=0.5, size=arr.shape)
    x = rng.normal(size=(num_nodes, in_features))
    R = rng.normal(size=(num_nodes, layer.out_dim))

    def loss():
        out, _ = layer.forward(graph, x)
        return float(np.sum(out * R))

    out, cache = layer.forward(graph, x)
    grads = layer.backward(cache, R, theta_r=theta_r)
    errors = {}
    for name in [*layer.params, "x"]:
        base = x if name == "x" else layer.params[name].copy()  # assignment copies into the stored array
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            values = []
            for trial in (plus, minus):
                if name == "x":
                    x = trial
                else:
                    layer.params[name] = trial
                values.append(loss())
            numeric[idx] = (values[0] - values[1]) / (2 * eps)
        if name == "x":
            x = base
        else:
            layer.params[name] = base
        analytic = grads[name]
        scale = max(np.max(np.abs(analytic)), 1e-12)
        errors[name] = float(np.max(np.abs(numeric - analytic)) / scale)
    return errors
