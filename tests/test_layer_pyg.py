"""Cross-check of GATv2Layer against torch_geometric.nn.GATv2Conv in float64."""

import naive
import numpy as np
import pytest

from gatfast import CSRGraph, GATv2Layer

torch = pytest.importorskip("torch")
pyg_nn = pytest.importorskip("torch_geometric.nn")

TOL = 1e-10


def make_pair(in_features, out_features, seed, pyg_self_loops=False, **kw):
    """A gatfast layer with random parameters and a GATv2Conv holding the same values."""
    layer = GATv2Layer(in_features, out_features, dtype=np.float64, seed=seed, **kw)
    naive.randomize_params(layer, np.random.default_rng(seed))
    conv = pyg_nn.GATv2Conv(
        in_features,
        out_features,
        heads=layer.heads,
        concat=layer.concat,
        negative_slope=layer.negative_slope,
        add_self_loops=pyg_self_loops,
        bias=layer.bias,
        share_weights=layer.share_weights,
        residual=layer.residual,
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
        if layer.residual:
            conv.res.weight.copy_(p["W_res"])
    return layer, conv


def pyg_grads(conv, layer):
    """GATv2Conv's gradients under gatfast's parameter names."""
    grads = {"W_l": conv.lin_l.weight.grad, "att": conv.att.grad[0]}
    if not layer.share_weights:
        grads["W_r"] = conv.lin_r.weight.grad
    if layer.bias:
        grads["b_l"] = conv.lin_l.bias.grad
        grads["bias"] = conv.bias.grad
        if not layer.share_weights:
            grads["b_r"] = conv.lin_r.bias.grad
    if layer.residual:
        grads["W_res"] = conv.res.weight.grad
    return {k: v.numpy() for k, v in grads.items()}


CFGS = [
    dict(heads=1),
    dict(heads=3),
    dict(heads=1, concat=False),
    dict(heads=3, concat=False),
    dict(heads=3, share_weights=True),
    dict(heads=3, concat=False, residual=True),
    dict(heads=3, residual=True, share_weights=True),
    dict(heads=3, bias=False),
    dict(heads=2, concat=False, bias=False, residual=True),
    dict(heads=3, negative_slope=0.01),
    dict(heads=1, concat=False, negative_slope=0.01, add_self_loops=False),
    dict(heads=3, add_self_loops=False),
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


@pytest.mark.parametrize("cfg", CFGS, ids=_id)
def test_matches_pyg(cfg):
    rng = np.random.default_rng(len(_id(cfg)))
    graph = naive.mixed_graph(rng, n=15, hub_degree=9)
    layer, conv = make_pair(6, 4, seed=1, **cfg)
    x = rng.standard_normal((graph.num_nodes, 6))

    out, cache = layer.forward(graph, x)
    # PyG runs on the graph the attention uses, loops (if any) already in it.
    used = graph.with_self_loops() if layer.add_self_loops else graph
    assert cache.graph == used
    ei = torch.from_numpy(used.to_edge_index())
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    out_t, (ei_t, alpha_t) = conv(xt, ei, return_attention_weights=True)
    assert torch.equal(ei_t, ei)

    assert out.shape == tuple(out_t.shape)
    assert naive.rel_err(out, out_t.detach().numpy()) < TOL
    assert naive.rel_err(cache.alpha, alpha_t.detach().numpy()) < TOL

    R = rng.standard_normal(out.shape)
    (out_t * torch.from_numpy(R)).sum().backward()
    want = pyg_grads(conv, layer)
    want["x"] = xt.grad.numpy()
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        assert set(grads) == set(want)
        for name, w in want.items():
            err = naive.rel_err(grads[name], w)
            assert err < TOL, f"{theta_r} {name}: {err:.2e}"


def test_self_loop_handling_matches_pyg_defaults():
    # gatfast's add_self_loops=True against PyG's own remove + add on a graph with
    # existing loops and duplicate edges (PyG puts the loops last, so compare by node).
    rng = np.random.default_rng(4)
    ei = np.array([[1, 2, 2, 0, 3, 3, 4, 1, 0], [0, 0, 0, 0, 3, 1, 2, 4, 4]])

    graph = CSRGraph.from_edge_index(ei, 6)
    layer, conv = make_pair(3, 2, seed=2, pyg_self_loops=True, heads=2)
    x = rng.standard_normal((6, 3))
    out, cache = layer.forward(graph, x)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    out_t = conv(xt, torch.from_numpy(ei))
    assert naive.rel_err(out, out_t.detach().numpy()) < TOL
    R = rng.standard_normal(out.shape)
    (out_t * torch.from_numpy(R)).sum().backward()
    grads = layer.backward(cache, R)
    want = pyg_grads(conv, layer)
    want["x"] = xt.grad.numpy()
    for name, w in want.items():
        assert naive.rel_err(grads[name], w) < TOL, name


@pytest.mark.parametrize("in_features", [8, 9, 17, 33])  # float64 tiles are 8 wide: whole, tail, several
@pytest.mark.parametrize("share_weights", [False, True])
def test_dense_tile_path_matches_pyg(monkeypatch, in_features, share_weights):
    """Enough nodes for the general path, whose projections and backward products (weight and input
    gradients) run through the Numba tile (``kernels/gemm.py``, ``kernels/dense_grads.py``); every
    gradient still agrees with PyG to 1e-10."""
    import gatfast.layers.dense as dense

    calls = []
    tile, pair, grads_kernel = dense.matmul_rows, dense.matmul_pair_rows, dense.dense_grad_chunks
    monkeypatch.setattr(dense, "matmul_rows", lambda *a: calls.append("projections") or tile(*a))
    monkeypatch.setattr(dense, "matmul_pair_rows", lambda *a: calls.append("projections") or pair(*a))
    monkeypatch.setattr(dense, "dense_grad_chunks", lambda *a: calls.append("backward") or grads_kernel(*a))
    rng = np.random.default_rng(in_features)
    graph = naive.mixed_graph(rng, n=160, hub_degree=9)  # past SMALL_PRODUCT at every width, and 128 rows
    assert graph.num_nodes >= dense.TILED_BACKWARD_ROWS
    layer, conv = make_pair(in_features, 8, seed=2, heads=2, share_weights=share_weights)
    x = rng.standard_normal((graph.num_nodes, in_features))
    out, cache = layer.forward(graph, x)
    ei = torch.from_numpy(cache.graph.to_edge_index())
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    out_t = conv(xt, ei)
    assert naive.rel_err(out, out_t.detach().numpy()) < TOL
    R = rng.standard_normal(out.shape)
    (out_t * torch.from_numpy(R)).sum().backward()
    want = pyg_grads(conv, layer)
    want["x"] = xt.grad.numpy()
    grads = layer.backward(cache, R)
    for name, w in want.items():
        err = naive.rel_err(grads[name], w)
        assert err < TOL, f"{name}: {err:.2e}"
    assert "projections" in calls and "backward" in calls
