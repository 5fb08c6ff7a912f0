"""Seeded synthetic datasets: a contextual stochastic block model, and road scenes."""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..graph import CSRGraph
from .datasets import GraphDataset, NodeDataset

__all__ = ["make_csbm", "make_traffic_scenes", "traffic_target"]


def _random_split(rng, n, train_frac, val_frac):
    train_frac = V.check_float(train_frac, "train_frac", 0, 1, low_open=True)
    val_frac = V.check_float(val_frac, "val_frac", 0, 1)
    if train_frac + val_frac > 1:
        raise ValueError(f"train_frac + val_frac must be <= 1, got {train_frac + val_frac}")
    perm = rng.permutation(n)
    n_train, n_val = round(train_frac * n), round(val_frac * n)
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train : n_train + n_val]] = True
    masks[2][perm[n_train + n_val :]] = True
    return masks


#: Candidate edges or feature values per draw: bounds the generator's temporaries
#: (a 2 M-node graph with 10 M edges is built in about its own size).
_CHUNK = 1 << 20


def _csbm_pairs(rng, y, k, num_edges, h):
    """Sorted keys ``min(i, j) * n + max(i, j)`` of ``num_edges`` distinct undirected edges (see make_csbm)."""
    n = y.size
    order = np.argsort(y, kind="stable")  # nodes grouped by class
    class_ptr = np.searchsorted(y[order], np.arange(k + 1))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n) - class_ptr[y[order]]  # rank of a node inside its class
    size = np.diff(class_ptr)
    keys = np.empty(0, dtype=np.int64)
    while keys.size < num_edges:
        missing = num_edges - keys.size
        parts = [keys]
        for start in range(0, missing, _CHUNK):
            m = min(_CHUNK, missing - start)
            i = rng.integers(0, n, m)
            c = y[i]
            intra = rng.random(m) < h
            # same class, skipping i itself
            r = (rng.random(m) * (size[c] - 1)).astype(np.int64)
            r += r >= pos[i]
            j_intra = order[class_ptr[c] + r]
            # another class: index the grouped order with class c's block cut out
            r = (rng.random(m) * (n - size[c])).astype(np.int64)
            r += np.where(r >= class_ptr[c], size[c], 0)
            j = np.where(intra, j_intra, order[r])
            parts.append(np.minimum(i, j) * n + np.maximum(i, j))
        keys = np.unique(np.concatenate(parts))
    return keys


def _symmetric_csr(keys, n):
    """CSR by target of both directions of the sorted undirected ``keys`` (each row's sources ascending).

    Row ``t`` lists its smaller neighbours (from the keys ``(a, t)``, in
    order of ``a``) and then its larger ones (keys ``(t, b)``, in order of
    ``b``): what sorting both directions by (target, source) gives, without
    materialising them.
    """
    a, b = np.divmod(keys, n)
    count_low = np.bincount(b, minlength=n)  # row b gets source a < b
    count_high = np.bincount(a, minlength=n)  # row a gets source b > a
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count_low + count_high, out=indptr[1:])
    indices = np.empty(2 * keys.size, dtype=np.int64)
    rank = np.arange(keys.size)
    by_b = np.argsort(b, kind="stable")  # keys grouped by b, a ascending within
    b_sorted = b[by_b]
    indices[indptr[b_sorted] + rank - (np.cumsum(count_low) - count_low)[b_sorted]] = a[by_b]
    del by_b, b_sorted
    # the keys are sorted by a, then b: already grouped by a, b ascending within
    indices[indptr[a] + count_low[a] + rank - (np.cumsum(count_high) - count_high)[a]] = b
    return indptr, indices


def make_csbm(
    num_nodes=1000,
    num_classes=2,
    num_features=16,
    avg_degree=5.0,
    homophily=0.8,
    feature_signal=1.0,
    seed=None,
    train_frac=0.6,
    val_frac=0.2,
    dtype=np.float32,
):
    """Generate a contextual stochastic block model: a random graph with class structure.

    Labels are balanced and random. ``round(num_nodes * avg_degree / 2)``
    distinct undirected edges are drawn: each picks a uniform endpoint ``i``
    and, with probability ``homophily``, a partner of the same class (else
    of another class), so ``homophily`` is the expected fraction of
    intra-class edges. Features are ``x_i = mu_{y_i} + N(0, I)`` where the
    class means ``mu_c`` are random directions of norm ``feature_signal``
    (0 = features carry no label information).

    Parameters
    ----------
    num_nodes : int, default 1000
        Number of nodes, at least ``2 * num_classes``.
    num_classes : int, default 2
        Number of classes, >= 2.
    num_features : int, default 16
        Feature columns.
    avg_degree : float, default 5.0
        Average number of undirected edges per node, at most
        ``(num_nodes / num_classes - 1) / 2`` (the graph stays sparse).
    homophily : float, default 0.8
        Expected fraction of intra-class edges, in [0, 1].
    feature_signal : float, default 1.0
        Norm of the class means, >= 0.
    seed : int, optional
        Seed of every random draw.
    train_frac, val_frac : float, default 0.6, 0.2
        Fractions of the nodes in the random train and validation sets; the
        rest is the test set.
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the features.

    Returns
    -------
    NodeDataset
        Named ``"csbm"``, dense features, both edge directions stored.
    """
    dtype = V.check_dtype(dtype)
    n = V.check_int(num_nodes, "num_nodes", minimum=2)
    k = V.check_int(num_classes, "num_classes", minimum=2)
    f = V.check_int(num_features, "num_features", minimum=1)
    deg = V.check_float(avg_degree, "avg_degree", 0)
    h = V.check_float(homophily, "homophily", 0, 1)
    signal = V.check_float(feature_signal, "feature_signal", 0)
    if 2 * k > n:
        raise ValueError(f"num_nodes must be >= 2 * num_classes = {2 * k}, got {n}")
    # Keep the graph sparse: rejection of duplicates must not stall.
    if deg > (n // k - 1) / 2:
        raise ValueError(
            f"avg_degree must be <= (num_nodes / num_classes - 1) / 2 = {(n // k - 1) / 2}, got {deg}"
        )
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % k).astype(np.int64)
    keys = _csbm_pairs(rng, y, k, round(n * deg / 2), h)
    indptr, indices = _symmetric_csr(keys, n)
    del keys
    means = rng.standard_normal((k, f))
    means *= signal / np.linalg.norm(means, axis=1, keepdims=True)
    x = np.empty((n, f), dtype)
    for start in range(0, n, _CHUNK // f + 1):  # bounded temporaries; the same draws as one call
        stop = min(n, start + _CHUNK // f + 1)
        x[start:stop] = means[y[start:stop]] + rng.standard_normal((stop - start, f))
    graph = CSRGraph(indptr, indices, n)
    masks = _random_split(rng, n, train_frac, val_frac)
    return NodeDataset(
        name="csbm",
        graph=graph,
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_classes=k,
        task="node_classification",
        preprocessing={"normalize_features": False},
    )


def traffic_target(pos, vel, radius):
    """Per-node target of :func:`make_traffic_scenes` for one scene.

    The local flow velocity around each vehicle,
    ``t_i = sum_j w_ij v_j / sum_j w_ij`` over the vehicles ``j`` with
    ``d_ij = |p_i - p_j| < radius`` (``i`` itself included), where
    ``w_ij = 1 - d_ij / radius``: closer vehicles count more and the vehicle
    itself has weight 1, so a vehicle alone keeps its own velocity.

    Parameters
    ----------
    pos, vel : ndarray, shape (n, 2)
        Positions and velocities of the scene's vehicles.
    radius : float
        Neighbourhood radius, > 0.

    Returns
    -------
    ndarray of float64, shape (n, 2)
        The target of every vehicle.
    """
    d = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
    w = np.where(d < radius, 1.0 - d / radius, 0.0)
    return (w @ vel) / w.sum(axis=1, keepdims=True)


def make_traffic_scenes(
    num_graphs=500,
    min_nodes=3,
    max_nodes=12,
    num_features=4,
    radius=0.2,
    seed=None,
    dtype=np.float32,
):
    """Generate vehicles in road scenes: node regression on small, very sparse graphs.

    Each scene has a uniform number of vehicles in ``[min_nodes, max_nodes]``
    at uniform positions in the unit square with standard normal 2-D
    velocities. Vehicle ``i`` receives an edge ``j -> i`` from every other
    vehicle within ``radius`` (so edges come in both directions; no self
    loops are stored, the layer adds them). With the
    default radius most vehicles have 0 to 2 neighbours: the regime where
    GATv2's target weights get little or no gradient.

    Features are ``[px, py, vx, vy]`` followed by ``num_features - 4``
    standard normal distractor columns. The target (2 columns, in the units of
    the velocities) is the distance-weighted mean of
    the velocities of the vehicle and its neighbours, see
    :func:`traffic_target`: it needs the neighbours' features, and the
    weights need both endpoints' positions.

    Every edge ``j -> i`` has three features (``edge_attrs``): the distance
    ``|p_i - p_j|`` and the relative velocity ``v_j - v_i``.

    Parameters
    ----------
    num_graphs : int, default 500
        Number of scenes.
    min_nodes, max_nodes : int, default 3, 12
        Range of the number of vehicles per scene.
    num_features : int, default 4
        Feature columns, >= 4 (the columns beyond 4 are distractors).
    radius : float, default 0.2
        Neighbourhood radius, > 0.
    seed : int, optional
        Seed of every random draw.
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of features, edge features and targets.

    Returns
    -------
    GraphDataset
        ``task="node_regression"``, ``num_classes=0``; ``y[g]`` has shape
        ``(num_nodes_g, 2)`` and :meth:`GraphDataset.batch` stacks them.
    """
    dtype = V.check_dtype(dtype)
    num_graphs = V.check_int(num_graphs, "num_graphs", minimum=1)
    lo = V.check_int(min_nodes, "min_nodes", minimum=1)
    hi = V.check_int(max_nodes, "max_nodes", minimum=lo)
    f = V.check_int(num_features, "num_features", minimum=4)
    radius = V.check_float(radius, "radius", 0, low_open=True)
    rng = np.random.default_rng(seed)
    graphs, xs, ys, attrs = [], [], [], []
    for _ in range(num_graphs):
        n = int(rng.integers(lo, hi + 1))
        pos = rng.random((n, 2))
        vel = rng.standard_normal((n, 2))
        noise = rng.standard_normal((n, f - 4))
        d = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
        near = d < radius
        np.fill_diagonal(near, False)
        tgt, src = np.nonzero(near)  # row-major: grouped by target, sources ascending
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(tgt, minlength=n), out=indptr[1:])
        graphs.append(CSRGraph(indptr, src, n))
        # edge j -> i: the distance and the velocity of j relative to i (no extra random draws)
        attrs.append(np.concatenate([d[tgt, src, None], vel[src] - vel[tgt]], axis=1).astype(dtype))
        xs.append(np.concatenate([pos, vel, noise], axis=1).astype(dtype))
        ys.append(traffic_target(pos, vel, radius).astype(dtype))
    return GraphDataset(
        name="traffic_scenes", graphs=graphs, xs=xs, y=ys, num_classes=0, task="node_regression",
        preprocessing={"normalize_features": False}, edge_attrs=attrs,
    )
