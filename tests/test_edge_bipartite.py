"""Edge features and bipartite input: finite differences, the numpy reference, the
serial/parallel drivers, the self-loop fill, and bad input."""

import naive
import numba
import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import CSRGraph, GATv2Layer
from gatfast.kernels import FILL_MODES, fill_loop_attr

EPS = 1e-6
FD_TOL = 1e-6
EXACT_TOL = 1e-12


def random_block(rng, n_src, n_dst, avg=3, empty=1):
    """A bipartite graph with empty rows, duplicates and index-equal 'self loops'."""
    src, dst = [], []
    for i in range(empty, n_dst):
        deg = int(rng.integers(0, 2 * avg + 1))
        src += rng.integers(0, n_src, deg).tolist()
        dst += [i] * deg
    src += [0, 1]
    dst += [0, 1] if n_dst > 1 else [0, 0]
    return np.array([src, dst], dtype=np.int64)


def central_differences(loss, arrays):
    """Central differences of ``loss()`` w.r.t. every array in ``arrays`` (perturbed in place)."""
    out = {}
    for name, arr in arrays.items():
        grad = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            old = arr[idx]
            arr[idx] = old + EPS
            lp = loss()
            arr[idx] = old - EPS
            lm = loss()
            arr[idx] = old
            grad[idx] = (lp - lm) / (2 * EPS)
        out[name] = grad
    return out


def fd_check(layer, graph, x, attr, rng):
    """Every gradient of ``sum(out * R)`` against central differences, both Θ_R forms."""
    out, cache = layer.forward(graph, x, attr)
    R = rng.standard_normal(out.shape)
    params = {k: v.copy() for k, v in layer.params.items()}
    xs = x if isinstance(x, tuple) else (x,)
    arrays = {f"param:{k}": v for k, v in params.items()}
    arrays.update({f"x{k}": a for k, a in enumerate(xs)})
    if attr is not None:
        arrays["edge_attr"] = attr

    def loss():
        for k, v in params.items():
            layer.params[k] = v
        xx = xs if isinstance(x, tuple) else xs[0]
        return float(np.sum(layer.forward(graph, xx, attr)[0] * R))

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        fd = central_differences(loss, arrays)
    finally:
        numba.set_num_threads(before)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        got = {f"param:{k}": grads[k] for k in params}
        gx = grads["x"] if isinstance(x, tuple) else (grads["x"],)
        got.update({f"x{k}": g for k, g in enumerate(gx)})
        if attr is not None:
            got["edge_attr"] = grads["edge_attr"]
        for name, want in fd.items():
            assert np.linalg.norm(want) > 0, f"{name}: degenerate check, zero gradient"
            err = naive.rel_err(got[name], want)
            assert err < FD_TOL, f"{theta_r} {name}: relative error {err:.2e}"


@pytest.mark.parametrize("fill", ["mean", "add", "max", "min", "mul", -0.3, "vector"])
def test_edge_feature_gradients_match_finite_differences(fill):
    rng = np.random.default_rng(3)
    graph = naive.mixed_graph(rng)
    d = 3
    fill_value = [0.2, -0.1, 0.4] if fill == "vector" else fill
    layer = GATv2Layer(4, 3, heads=2, edge_dim=d, fill_value=fill_value, dtype=np.float64, seed=1)
    naive.randomize_params(layer, rng)
    attr = rng.standard_normal((graph.nnz, d))  # continuous: no ties, so max/min are differentiable
    x = rng.standard_normal((graph.num_nodes, 4))
    fd_check(layer, graph, x, attr, rng)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(n_src=8, n_dst=5, edge_dim=2),
        dict(n_src=8, n_dst=5, edge_dim=None, residual=True, root_weight="theta_n"),
        dict(n_src=4, n_dst=6, edge_dim=2, add_self_loops=False),
        dict(n_src=6, n_dst=6, edge_dim=1, share_weights=True, concat=False, attention_activation="softplus"),
        dict(n_src=7, n_dst=4, edge_dim=2, root_weight="theta_r"),
    ],
    ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()),
)
def test_bipartite_gradients_match_finite_differences(cfg):
    rng = np.random.default_rng(5)
    cfg = dict(cfg)
    n_src, n_dst, d = cfg.pop("n_src"), cfg.pop("n_dst"), cfg.pop("edge_dim")
    f = (3, 3) if cfg.get("share_weights") else (3, 2)
    ei = random_block(rng, n_src, n_dst)
    attr = None
    if d is None:
        graph = CSRGraph.from_edge_index(ei, size=(n_src, n_dst))
    else:
        graph, attr = CSRGraph.from_edge_index(ei, size=(n_src, n_dst), edge_attr=rng.standard_normal((ei.shape[1], d)))
    layer = GATv2Layer(f, 3, heads=2, edge_dim=d, dtype=np.float64, seed=2, **cfg)
    naive.randomize_params(layer, rng)
    x = (rng.standard_normal((n_src, f[0])), rng.standard_normal((n_dst, f[1])))
    fd_check(layer, graph, x, attr, rng)


def test_block_with_one_matrix_matches_finite_differences():
    rng = np.random.default_rng(8)
    ei = random_block(rng, 9, 5)
    graph, attr = CSRGraph.from_edge_index(ei, size=(9, 5), edge_attr=rng.standard_normal((ei.shape[1], 2)))
    layer = GATv2Layer(3, 2, heads=2, edge_dim=2, residual=True, dtype=np.float64, seed=4)
    naive.randomize_params(layer, rng)
    fd_check(layer, graph, rng.standard_normal((9, 3)), attr, rng)


@pytest.mark.parametrize("channels", [1, 7, 8, 9, 16, 17, 33])
@pytest.mark.parametrize("bipartite", [False, True])
def test_matches_the_numpy_reference_at_every_simd_width(channels, bipartite):
    rng = np.random.default_rng(channels)
    n_src, n_dst = (11, 7) if bipartite else (10, 10)
    ei = random_block(rng, n_src, n_dst)
    graph, attr = CSRGraph.from_edge_index(ei, size=(n_src, n_dst), edge_attr=rng.standard_normal((ei.shape[1], 3)))
    f = (4, 5) if bipartite else 4
    layer = GATv2Layer(f, channels, heads=2, edge_dim=3, dtype=np.float64, seed=channels)
    naive.randomize_params(layer, rng)
    x = (rng.standard_normal((n_src, 4)), rng.standard_normal((n_dst, 5))) if bipartite else \
        rng.standard_normal((n_src, 4))
    out, cache = layer.forward(graph, x, attr)
    g = cache.graph
    x_src, x_dst = x if bipartite else (x, x[:n_dst])
    params = {k: np.asarray(v) for k, v in layer.params.items()}
    R = rng.standard_normal(out.shape)
    want_out, want_alpha, *_ = naive.general_forward(g.indptr, g.indices, x_src, x_dst, params, 2,
                                                     u=cache.inputs.u)
    assert naive.rel_err(out, want_out) < EXACT_TOL
    assert naive.rel_err(cache.alpha, want_alpha) < EXACT_TOL
    want = naive.general_backward(g.indptr, g.indices, x_src, x_dst, params, R, 2, u=cache.inputs.u)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        for name in ("W_l", "W_r", "b_l", "b_r", "att", "W_e", "bias"):
            assert naive.rel_err(grads[name], want[name]) < EXACT_TOL, (theta_r, name)
        gx = grads["x"] if bipartite else (grads["x"], None)
        if bipartite:
            assert naive.rel_err(gx[0], want["x_src"]) < EXACT_TOL
            assert naive.rel_err(gx[1], want["x_dst"]) < EXACT_TOL
        else:
            assert naive.rel_err(gx[0], want["x_src"] + want["x_dst"]) < EXACT_TOL


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bipartite", [False, True])
def test_serial_and_parallel_drivers_give_the_same_bits(monkeypatch, dtype, bipartite):
    from gatfast import _runtime

    rng = np.random.default_rng(1)
    n_src, n_dst = (900, 600) if bipartite else (800, 800)
    ei = np.stack([rng.integers(0, n_src, 9000), rng.integers(0, n_dst, 9000)])
    graph, attr = CSRGraph.from_edge_index(ei, size=(n_src, n_dst), edge_attr=rng.standard_normal((9000, 4)))
    layer = GATv2Layer((6, 5) if bipartite else 6, 17, heads=2, edge_dim=4, dtype=dtype, seed=0, dropout=0.3)
    x = (rng.standard_normal((n_src, 6)), rng.standard_normal((n_dst, 5))) if bipartite else \
        rng.standard_normal((n_src, 6))
    results = []
    for serial_below in (0, 1 << 60):  # always parallel, then always serial
        monkeypatch.setattr(_runtime, "SERIAL_WORK", serial_below)
        monkeypatch.setattr(_runtime, "PARALLEL_WORK", serial_below)
        out, cache = layer.forward(graph, x, attr, training=True, rng=np.random.default_rng(3))
        grads = layer.backward(cache, np.ones_like(out), theta_r="linear")
        results.append((out.copy(), cache.alpha.copy(), {k: np.copy(v) if not isinstance(v, tuple) else
                                                          tuple(map(np.copy, v)) for k, v in grads.items()}))
    (o1, a1, g1), (o2, a2, g2) = results
    assert np.array_equal(o1, o2) and np.array_equal(a1, a2)
    for k in g1:
        if isinstance(g1[k], tuple):
            assert all(np.array_equal(a, b) for a, b in zip(g1[k], g2[k])), k
        else:
            assert np.array_equal(g1[k], g2[k]), k


# ---------------------------------------------------------------------- the self-loop fill


def test_fill_values_as_pyg_document_them():
    # target 0 has in-edges with attributes 1, 3 and a self loop (dropped); target 1 none; target 2 one
    ei = np.array([[1, 2, 0, 0], [0, 0, 0, 2]])
    attr = np.array([[1.0], [3.0], [100.0], [-2.0]])
    graph, attr = CSRGraph.from_edge_index(ei, 3, edge_attr=attr)
    layout = graph.loop_layout()
    looped = layout.graph
    want = {"mean": [2.0, 0.0, -2.0], "add": [4.0, 0.0, -2.0], "max": [3.0, 0.0, -2.0],
            "min": [1.0, 0.0, -2.0], "mul": [3.0, 1.0, -2.0]}
    for mode, values in want.items():
        u = np.zeros((looped.nnz, 1))
        u[looped.loop_layout().kept] = attr[layout.kept]
        fill_loop_attr(looped.indptr, layout.loop_slots, FILL_MODES[mode], np.zeros(1), u)
        np.testing.assert_array_equal(u[layout.loop_slots, 0], values, err_msg=mode)


def test_dropped_self_loops_get_zero_attribute_gradient():
    rng = np.random.default_rng(2)
    ei = np.array([[0, 1, 2, 1], [0, 0, 1, 1]])  # edges 0 and 3 are self loops
    graph, attr = CSRGraph.from_edge_index(ei, 3, edge_attr=rng.standard_normal((4, 2)))
    layer = GATv2Layer(2, 3, edge_dim=2, dtype=np.float64, seed=0)
    out, cache = layer.forward(graph, rng.standard_normal((3, 2)), attr)
    grad = layer.backward(cache, rng.standard_normal(out.shape))["edge_attr"]
    loops = graph.indices == graph.targets()
    assert np.all(grad[loops] == 0) and np.all(np.abs(grad[~loops]).sum(axis=1) > 0)


# ---------------------------------------------------------------------- conversions


def test_from_edge_index_and_from_scipy_permute_attributes_into_csr_order():
    ei = np.array([[3, 0, 1, 2, 0], [1, 2, 1, 0, 1]])
    attr = np.arange(10.0).reshape(5, 2)
    graph, perm = CSRGraph.from_edge_index(ei, 4, edge_attr=attr)
    order = np.argsort(ei[1], kind="stable")
    np.testing.assert_array_equal(perm, attr[order])
    np.testing.assert_array_equal(graph.to_edge_index(), ei[:, order])
    coo = sp.coo_array((np.ones(5), (ei[1], ei[0])), shape=(4, 4))  # rows = targets
    graph2, perm2 = CSRGraph.from_scipy(coo, edge_attr=attr, rows="targets")
    assert graph2 == graph
    np.testing.assert_array_equal(perm2, perm)
    flipped, perm3 = CSRGraph.from_scipy(coo.T, edge_attr=attr, rows="sources")
    assert flipped == graph
    np.testing.assert_array_equal(perm3, perm)


def test_bipartite_graph_conversions():
    ei = np.array([[0, 4, 2], [1, 0, 1]])
    graph = CSRGraph.from_edge_index(ei, size=(5, 2))
    assert graph.shape == (2, 5) and graph.is_bipartite() and graph.num_src == 5
    assert graph.to_scipy().shape == (2, 5)
    assert CSRGraph.from_scipy(graph.to_scipy()) == graph
    src_indptr, _ = graph.source_order()
    assert src_indptr.size == 6
    looped = graph.with_self_loops()  # loops for i < min(5, 2) = 2
    assert looped.nnz == 5 and looped.targets()[looped.loop_layout().loop_slots].tolist() == [0, 1]


def test_graph_attributes_cannot_be_reassigned():
    graph = CSRGraph([0, 1, 1], [1])
    for name in ("indices", "indptr", "num_nodes", "_indices"):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(graph, name, np.array([5]))
    with pytest.raises(ValueError, match="read-only"):
        graph.indices[0] = 7


# ---------------------------------------------------------------------- bad input


@pytest.fixture
def edge_layer():
    return GATv2Layer(3, 2, heads=2, edge_dim=2, seed=0)


@pytest.fixture
def square():
    return CSRGraph.from_edge_index(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), 4)


def test_edge_attr_errors_name_the_argument(edge_layer, square):
    x = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(4, 2\), got \(3, 2\)"):
        edge_layer.forward(square, x, np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(4, 2\), got \(4, 3\)"):
        edge_layer.forward(square, x, np.ones((4, 3)))
    bad = np.ones((4, 2))
    bad[1, 1] = np.nan
    before = bad.copy()
    with pytest.raises(ValueError, match="edge_attr must be finite"):
        edge_layer.forward(square, x, bad)
    np.testing.assert_array_equal(bad, before)  # never modified
    with pytest.raises(ValueError, match="edge_attr is required"):
        edge_layer.forward(square, x)
    with pytest.raises(ValueError, match="no edge features"):
        GATv2Layer(3, 2).forward(square, x, np.ones((4, 2)))
    with pytest.raises(TypeError, match="edge_attr must be a dense array"):
        edge_layer.forward(square, x, sp.csr_array(np.ones((4, 2))))


def test_bipartite_errors_name_the_argument():
    block = CSRGraph.from_edge_index(np.array([[0, 4, 2], [1, 0, 1]]), size=(5, 2))
    layer = GATv2Layer((3, 2), 4, seed=0)
    with pytest.raises(ValueError, match=r"x\[0\] \(x_src\) must have one row per node: expected 5 rows, got 4"):
        layer.forward(block, (np.ones((4, 3)), np.ones((2, 2))))
    with pytest.raises(ValueError, match=r"x\[1\] \(x_dst\) must have in_features = 2 columns, got 3"):
        layer.forward(block, (np.ones((5, 3)), np.ones((2, 3))))
    with pytest.raises(TypeError, match="x must be a pair"):
        layer.forward(block, np.ones((5, 3)))
    with pytest.raises(TypeError, match="this layer takes one feature matrix"):
        GATv2Layer(3, 4).forward(block, (np.ones((5, 3)), np.ones((2, 3))))
    with pytest.raises(ValueError, match="share_weights=True needs F_src == F_dst"):
        GATv2Layer((3, 2), 4, share_weights=True)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(edge_dim=0), ValueError, "edge_dim must be >= 1"),
        (dict(edge_dim=2.0), TypeError, "edge_dim must be an int"),
        (dict(edge_dim=2, fill_value="median"), ValueError, "fill_value must be one of"),
        (dict(edge_dim=2, fill_value=[1.0, 2.0, 3.0]), ValueError, "edge_dim = 2 entries"),
        (dict(edge_dim=2, fill_value=float("nan")), ValueError, "fill_value must be finite"),
        (dict(in_features=(3, 2, 1)), ValueError, "in_features must be an int or a pair"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    kw = {"in_features": 3, **kwargs}
    with pytest.raises(error, match=match):
        GATv2Layer(kw.pop("in_features"), 2, **kw)


def test_a_cache_from_another_layer_is_refused(edge_layer, square):
    x = np.ones((4, 3), np.float32)
    attr = np.ones((4, 2), np.float32)
    other = GATv2Layer(3, 2, heads=2, edge_dim=2, seed=1)
    out, cache = other.forward(square, x, attr)
    with pytest.raises(ValueError, match="another layer"):
        edge_layer.backward(cache, np.ones_like(out))
    with pytest.raises(ValueError, match="read-only"):
        cache.alpha[0, 0] = 5.0
    with pytest.raises(AttributeError):
        cache.alpha = np.zeros(3)


def test_edge_feature_gradients_over_more_edges_than_the_target_pass_buffers_match_finite_differences():
    """A hub row of more than two of the target pass's groups of ``Q_EDGES`` edges (``∂L/∂W_E`` is
    added per group), in float64."""
    from gatfast.kernels.backward_edge import Q_EDGES

    rng = np.random.default_rng(11)
    n, d = 2 * Q_EDGES + 12, 2
    src = np.concatenate([rng.choice(n, size=2 * Q_EDGES + 5, replace=False), rng.integers(0, n, 12)])
    dst = np.concatenate([np.zeros(2 * Q_EDGES + 5, np.int64), rng.integers(1, n, 12)])
    graph, attr = CSRGraph.from_edge_index(np.stack([src, dst]), n, edge_attr=rng.standard_normal((src.size, d)))
    assert np.diff(graph.indptr).max() > 2 * Q_EDGES
    layer = GATv2Layer(3, 2, heads=2, edge_dim=d, dtype=np.float64, seed=4)
    naive.randomize_params(layer, rng)
    fd_check(layer, graph, rng.standard_normal((n, 3)), attr, rng)
