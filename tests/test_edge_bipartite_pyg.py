"""Edge features and bipartite input against PyG's GATv2Conv autograd, in float64.

Outputs, attention weights and every gradient (parameters, both inputs,
edge attributes through the self-loop fill) to 1e-10 relative, over edge_dim
1-8, every fill_value, heads 1-4, concat and mean, shared weights, residual,
bipartite with and without self loops, empty rows, and channel widths that
run every SIMD remainder path.
"""

import naive
import numpy as np
import pytest

from gatfast import CSRGraph, GATv2Layer

torch = pytest.importorskip("torch")
pyg_nn = pytest.importorskip("torch_geometric.nn")

TOL = 1e-10


def random_edges(rng, n_src, n_dst, avg=3, loops=True, empty=2):
    """An edge_index with empty target rows, a hub, a duplicate and (index-equal) self loops."""
    src, dst = [], []
    for i in range(empty, n_dst):
        deg = int(rng.integers(0, 2 * avg + 1)) if i != empty else min(n_src, 9)
        src += rng.choice(n_src, size=min(deg, n_src), replace=False).tolist()
        dst += [i] * min(deg, n_src)
    if n_dst > empty + 1:
        src += [src[-1]] if src else []
        dst += [dst[-1]] if dst else []
    if loops:
        for i in range(min(n_src, n_dst, 3)):
            src.append(i)
            dst.append(i)
    perm = rng.permutation(len(src))
    return np.array([np.array(src, dtype=np.int64)[perm], np.array(dst, dtype=np.int64)[perm]])


def edge_values(rng, shape, discrete):
    """Continuous attributes, or small integers with ties and zeros (for max/min/mul)."""
    if discrete:
        return rng.integers(-1, 3, size=shape).astype(np.float64)
    return rng.standard_normal(shape)


def make_pair(in_features, out_features, seed, **kw):
    """A float64 gatfast layer with random parameters and a GATv2Conv holding the same values."""
    layer = GATv2Layer(in_features, out_features, dtype=np.float64, seed=seed, **kw)
    naive.randomize_params(layer, np.random.default_rng(seed))
    fill = layer.fill_value
    if isinstance(fill, tuple):
        fill = torch.tensor(fill, dtype=torch.float64)
    conv = pyg_nn.GATv2Conv(
        in_features, out_features, heads=layer.heads, concat=layer.concat, negative_slope=layer.negative_slope,
        add_self_loops=layer.add_self_loops, bias=layer.bias, share_weights=layer.share_weights,
        residual=layer.residual, edge_dim=layer.edge_dim, fill_value=fill,
    ).double()
    p = {k: torch.from_numpy(v.copy()) for k, v in layer.params.items()}
    with torch.no_grad():
        conv.lin_l.weight.copy_(p["W_l"])
        if not layer.share_weights:
            conv.lin_r.weight.copy_(p["W_r"])
        if layer.bias:
            conv.lin_l.bias.copy_(p["b_l"])
            if not layer.share_weights:
                conv.lin_r.bias.copy_(p["b_r"])
            conv.bias.copy_(p["bias"])
        conv.att.copy_(p["att"].reshape(1, layer.heads, out_features))
        if layer.edge_dim is not None:
            conv.lin_edge.weight.copy_(p["W_e"])
        if layer.residual:
            conv.res.weight.copy_(p["W_res"])
    return layer, conv


def pyg_grads(conv, layer):
    grads = {"W_l": conv.lin_l.weight.grad, "att": conv.att.grad[0]}
    if not layer.share_weights:
        grads["W_r"] = conv.lin_r.weight.grad
    if layer.bias:
        grads["b_l"] = conv.lin_l.bias.grad
        grads["bias"] = conv.bias.grad
        if not layer.share_weights:
            grads["b_r"] = conv.lin_r.bias.grad
    if layer.edge_dim is not None:
        grads["W_e"] = conv.lin_edge.weight.grad
    if layer.residual:
        grads["W_res"] = conv.res.weight.grad
    return {k: v.numpy() for k, v in grads.items()}


def pyg_order(cache, graph, layer, alpha):
    """Our attention weights in PyG's edge order: the kept edges in order, then the loops 0..N-1."""
    if not layer.add_self_loops:
        return alpha
    att_graph = cache.graph
    return np.concatenate([alpha[att_graph.loop_layout().kept], alpha[graph.loop_layout().loop_slots]])


def check_against_pyg(layer, conv, graph, x, edge_attr, rng):
    bipartite = isinstance(x, tuple)
    out, cache = layer.forward(graph, x, edge_attr)
    ei = torch.from_numpy(graph.to_edge_index())
    if bipartite:
        xt = tuple(torch.from_numpy(a.copy()).requires_grad_(True) for a in x)
    else:
        xt = torch.from_numpy(x.copy()).requires_grad_(True)
    at = None if edge_attr is None else torch.from_numpy(edge_attr.copy()).requires_grad_(True)
    out_t, (_, alpha_t) = conv(xt, ei, at, return_attention_weights=True)
    assert out.shape == tuple(out_t.shape)
    assert naive.rel_err(out, out_t.detach().numpy()) < TOL
    assert naive.rel_err(pyg_order(cache, graph, layer, cache.alpha), alpha_t.detach().numpy()) < TOL
    R = rng.standard_normal(out.shape)
    (out_t * torch.from_numpy(R)).sum().backward()
    want = pyg_grads(conv, layer)
    want["x"] = tuple(t.grad.numpy() for t in xt) if bipartite else xt.grad.numpy()
    if at is not None:
        want["edge_attr"] = at.grad.numpy()
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        assert set(grads) == set(want)
        for name, w in want.items():
            got = grads[name]
            pairs = zip(got, w) if name == "x" and bipartite else [(got, w)]
            for g_, w_ in pairs:
                err = naive.rel_err(g_, w_)
                assert err < TOL, f"{theta_r} {name}: {err:.2e}"


WIDTHS = [1, 7, 8, 9, 16, 17, 33]
FILLS = ["mean", "add", "max", "min", "mul", 0.5, "vector"]
CONFIGS = (
    [dict(C=c, heads=2, edge_dim=d) for c in WIDTHS for d in (None, 3)]
    + [dict(C=4, heads=h, concat=bool(k % 2), edge_dim=d, fill=f)
       for k, (h, d, f) in enumerate([(1, 1, "mean"), (4, 8, "add"), (2, 2, "max"), (3, 5, "min"),
                                      (1, 4, "mul"), (2, 6, 0.5), (4, 3, "vector"), (3, 1, "max")])]
    + [dict(C=5, heads=2, edge_dim=3, fill=f, discrete=True) for f in ("max", "min", "mul", "mean")]
    + [
        dict(C=8, heads=3, edge_dim=4, share_weights=True),
        dict(C=9, heads=2, edge_dim=2, residual=True, concat=False),
        dict(C=6, heads=2, edge_dim=3, bias=False),
        dict(C=6, heads=2, edge_dim=3, add_self_loops=False),
        dict(C=6, heads=1, edge_dim=2, negative_slope=0.01),
        dict(C=17, heads=2, edge_dim=8, fill="mul", concat=False),
    ]
)


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


def _build(cfg, in_features, seed):
    kw = {k: v for k, v in cfg.items() if k not in ("C", "fill", "discrete")}
    fill = cfg.get("fill", "mean")
    if fill == "vector":
        fill = np.linspace(-1.0, 1.0, cfg["edge_dim"]).tolist()
    if cfg.get("edge_dim") is not None:
        kw["fill_value"] = fill
    return make_pair(in_features, cfg["C"], seed=seed, **kw)


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_homogeneous_matches_pyg(cfg):
    rng = np.random.default_rng(len(_id(cfg)))
    n = 14
    ei = random_edges(rng, n, n)
    d = cfg.get("edge_dim")
    attr = None if d is None else edge_values(rng, (ei.shape[1], d), cfg.get("discrete", False))
    if attr is None:
        graph = CSRGraph.from_edge_index(ei, n)
    else:
        graph, attr = CSRGraph.from_edge_index(ei, n, edge_attr=attr)
    layer, conv = _build(cfg, 6, seed=1)
    x = rng.standard_normal((n, 6))
    check_against_pyg(layer, conv, graph, x, attr, rng)


BIPARTITE = [
    dict(n_src=9, n_dst=6, C=7, heads=2, edge_dim=3),  # a block: every target gets its loop
    dict(n_src=9, n_dst=6, C=8, heads=3, edge_dim=None),
    dict(n_src=9, n_dst=6, C=9, heads=1, edge_dim=2, fill="max", discrete=True),
    dict(n_src=9, n_dst=6, C=16, heads=2, edge_dim=None, add_self_loops=False),
    dict(n_src=5, n_dst=8, C=4, heads=2, edge_dim=3, add_self_loops=False),  # more targets than sources
    dict(n_src=5, n_dst=8, C=4, heads=2, edge_dim=None),  # loops only for targets 0..4, as PyG
    dict(n_src=8, n_dst=5, C=5, heads=2, edge_dim=2, residual=True, concat=False, fill="add"),
    dict(n_src=7, n_dst=7, C=33, heads=1, edge_dim=1, fill=0.5),
]


@pytest.mark.parametrize("cfg", BIPARTITE, ids=_id)
@pytest.mark.parametrize("share", [False, True])
def test_bipartite_matches_pyg(cfg, share):
    rng = np.random.default_rng(len(_id(cfg)) + share)
    n_src, n_dst = cfg["n_src"], cfg["n_dst"]
    f_src, f_dst = (5, 5) if share else (5, 3)
    ei = random_edges(rng, n_src, n_dst, loops=cfg.get("add_self_loops", True))
    d = cfg.get("edge_dim")
    attr = None if d is None else edge_values(rng, (ei.shape[1], d), cfg.get("discrete", False))
    if attr is None:
        graph = CSRGraph.from_edge_index(ei, size=(n_src, n_dst))
    else:
        graph, attr = CSRGraph.from_edge_index(ei, size=(n_src, n_dst), edge_attr=attr)
    assert graph.shape == (n_dst, n_src)
    rest = {k: v for k, v in cfg.items() if k not in ("n_src", "n_dst")}
    layer, conv = _build({**rest, "share_weights": share}, (f_src, f_dst), seed=2)
    x = (rng.standard_normal((n_src, f_src)), rng.standard_normal((n_dst, f_dst)))
    check_against_pyg(layer, conv, graph, x, attr, rng)


def test_one_matrix_block_matches_pyg_pair():
    """A one-matrix layer on a block reads its targets as the first rows: PyG given (x, x[:n_dst])."""
    rng = np.random.default_rng(7)
    ei = random_edges(rng, 10, 6)
    graph, attr = CSRGraph.from_edge_index(ei, size=(10, 6), edge_attr=rng.standard_normal((ei.shape[1], 2)))
    layer, conv = make_pair(4, 8, seed=3, heads=2, edge_dim=2)
    x = rng.standard_normal((10, 4))
    out, cache = layer.forward(graph, x, attr)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    out_t = conv((xt, xt[:6]), torch.from_numpy(graph.to_edge_index()), torch.from_numpy(attr))
    assert naive.rel_err(out, out_t.detach().numpy()) < TOL
    R = rng.standard_normal(out.shape)
    (out_t * torch.from_numpy(R)).sum().backward()
    grads = layer.backward(cache, R)
    assert naive.rel_err(grads["x"], xt.grad.numpy()) < TOL
    assert naive.rel_err(grads["W_r"], conv.lin_r.weight.grad.numpy()) < TOL


@pytest.mark.parametrize("C, heads, d", [(33, 1, 3), (8, 2, 4)])
def test_block_of_more_edges_than_the_target_pass_buffers_matches_pyg(C, heads, d):
    """The target pass adds ``∂L/∂W_E`` per group of ``backward_edge.Q_EDGES`` edges: a hub row of more
    than two groups, so one block holds several full groups and a remainder."""
    from gatfast.kernels.backward_edge import Q_EDGES

    rng = np.random.default_rng(C + heads)
    n = 2 * Q_EDGES + 20
    src = np.concatenate([rng.choice(n, size=2 * Q_EDGES + 9, replace=False), rng.integers(0, n, 30)])
    dst = np.concatenate([np.zeros(2 * Q_EDGES + 9, np.int64), rng.integers(1, n, 30)])
    graph, attr = CSRGraph.from_edge_index(np.stack([src, dst]), n, edge_attr=rng.standard_normal((src.size, d)))
    assert np.diff(graph.indptr).max() > 2 * Q_EDGES and graph.nnz < 256 * Q_EDGES  # one block (256 rows)
    layer, conv = _build(dict(C=C, heads=heads, edge_dim=d), 6, seed=2)
    check_against_pyg(layer, conv, graph, rng.standard_normal((n, 6)), attr, rng)
