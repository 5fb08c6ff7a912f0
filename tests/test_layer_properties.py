"""Property tests of GATv2Layer on random graphs (hypothesis)."""

import naive
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from gatfast import CSRGraph, GATv2Layer

DTYPES = [np.float32, np.float64]
SUM_TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


@st.composite
def graphs(draw, max_nodes=24):
    """Random edge lists: empty rows, duplicate edges and self loops all occur."""
    n = draw(st.integers(1, max_nodes))
    m = draw(st.integers(0, 4 * n))
    nodes = st.integers(0, n - 1)
    src = draw(st.lists(nodes, min_size=m, max_size=m))
    dst = draw(st.lists(nodes, min_size=m, max_size=m))
    return CSRGraph.from_edge_index(np.array([src, dst], dtype=np.int64).reshape(2, m), n)


@st.composite
def layer_configs(draw):
    return dict(
        in_features=draw(st.integers(1, 5)),
        out_features=draw(st.integers(1, 4)),
        heads=draw(st.integers(1, 3)),
        concat=draw(st.booleans()),
        add_self_loops=draw(st.booleans()),
        share_weights=draw(st.booleans()),
        residual=draw(st.booleans()),
        bias=draw(st.booleans()),
        negative_slope=draw(st.sampled_from([0.2, 0.01])),
        attention_activation=draw(st.sampled_from(["leaky_relu", "softplus"])),
        root_weight=draw(st.sampled_from([None, None, "theta_r", "theta_n"])),
    )


def row_sums(graph, alpha):
    sums = np.zeros((graph.num_nodes, alpha.shape[1]))
    np.add.at(sums, graph.targets(), alpha.astype(np.float64))
    return sums


def check_outputs(layer, graph, x, out, cache, grads):
    """Shapes, dtypes and finiteness of everything the layer returns."""
    dt = layer.dtype
    assert out.dtype == dt and out.shape == (graph.num_nodes, layer.out_dim)
    assert cache.alpha.dtype == dt and cache.alpha.shape == (cache.graph.nnz, layer.heads)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(cache.alpha))
    assert set(grads) == set(layer.params) | {"x"}
    for name, grad in grads.items():
        want = x.shape if name == "x" else layer.params[name].shape
        assert grad.dtype == dt, name
        assert grad.shape == want, name
        assert np.all(np.isfinite(grad)), name


@given(graph=graphs(), cfg=layer_configs(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_attention_rows_sum_to_one(graph, cfg, dtype, seed):
    rng = np.random.default_rng(seed)
    layer = GATv2Layer(dtype=dtype, seed=seed, **cfg)
    x = rng.standard_normal((graph.num_nodes, layer.in_features)).astype(dtype)
    out, cache = layer.forward(graph, x)
    g = cache.graph
    alpha = cache.alpha
    assert np.all(alpha >= 0)
    sums = row_sums(g, alpha)
    has_edges = g.in_degree() > 0
    np.testing.assert_allclose(sums[has_edges], 1.0, rtol=0, atol=SUM_TOL[layer.dtype])
    assert np.all(sums[~has_edges] == 0)
    if layer.root_weight is None and layer.add_self_loops:
        assert has_edges.all()
    grad_out = rng.standard_normal(out.shape).astype(dtype)
    for theta_r in ("linear", "pairwise"):
        check_outputs(layer, graph, x, out, cache, layer.backward(cache, grad_out, theta_r=theta_r))


def scale_attention_to(layer, graph, x, target):
    """Scale ``att`` so that the largest attention logit |e_ij| is ``target``."""
    g = layer.attention_graph(graph)
    p = {k: v.astype(np.float64) for k, v in layer.params.items()}
    xl, xr = naive.projections(x.astype(np.float64), p)
    n, H, C = g.num_nodes, layer.heads, layer.out_features
    z = xr.reshape(n, H, C)[g.targets()] + xl.reshape(n, H, C)[g.indices]
    e = (naive.act(z, layer.attention_activation, layer.negative_slope) * p["att"]).sum(-1)
    if e.size == 0 or np.abs(e).max() == 0:
        return 0.0
    layer.params["att"] = p["att"] * (target / np.abs(e).max())
    return target


@given(
    graph=graphs(max_nodes=16),
    heads=st.integers(1, 3),
    concat=st.booleans(),
    activation=st.sampled_from(["leaky_relu", "softplus"]),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_huge_logits_stay_finite(graph, heads, concat, activation, dtype, seed):
    rng = np.random.default_rng(seed)
    layer = GATv2Layer(
        4, 3, heads=heads, concat=concat, attention_activation=activation, dtype=dtype, seed=seed
    )
    naive.randomize_params(layer, rng)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(dtype)
    # every node has its self loop, so there is always an edge to scale on
    assert scale_attention_to(layer, graph, x, 1e4) == 1e4
    out, cache = layer.forward(graph, x)
    sums = row_sums(cache.graph, cache.alpha)
    np.testing.assert_allclose(sums, 1.0, rtol=0, atol=SUM_TOL[layer.dtype])
    grad_out = rng.standard_normal(out.shape).astype(dtype)
    for theta_r in ("linear", "pairwise"):
        check_outputs(layer, graph, x, out, cache, layer.backward(cache, grad_out, theta_r=theta_r))
    if layer.dtype == np.float64:
        ref_out, ref_alpha, _ = naive.layer_reference(layer, graph, x)
        assert naive.rel_err(out, ref_out) < 1e-9
        assert naive.rel_err(cache.alpha, ref_alpha) < 1e-9


@pytest.mark.parametrize("dtype", DTYPES)
def test_huge_logits_on_a_hub(dtype):
    # One node with many in-edges whose logits differ by thousands: exp() of the raw
    # scores would overflow in both precisions.
    rng = np.random.default_rng(0)
    n = 50
    graph = naive.rows_graph([list(range(1, n))] + [[0]] * (n - 1))
    layer = GATv2Layer(5, 4, heads=2, dtype=dtype, seed=1)
    x = rng.standard_normal((n, 5)).astype(dtype)
    scale_attention_to(layer, graph, x, 1e4)
    out, cache = layer.forward(graph, x)
    grads = layer.backward(cache, np.ones_like(out))
    check_outputs(layer, graph, x, out, cache, grads)
    assert cache.alpha.max() > 0.5  # the softmax is nearly one-hot, as it should be


@given(graph=graphs(max_nodes=16), cfg=layer_configs(), seed=st.integers(0, 2**16))
def test_float32_close_to_float64(graph, cfg, seed):
    rng = np.random.default_rng(seed)
    l64 = GATv2Layer(dtype=np.float64, seed=seed, **cfg)
    naive.randomize_params(l64, rng, scale=0.5)
    l32 = GATv2Layer(dtype=np.float32, seed=seed, **cfg)
    for name, arr in l64.params.items():
        l32.params[name] = arr
        l64.params[name] = l32.params[name]  # the same (float32-representable) values
    x = rng.standard_normal((graph.num_nodes, l64.in_features)).astype(np.float32)
    out64, _ = l64.forward(graph, x)
    out32, _ = l32.forward(graph, x)
    assert out32.dtype == np.float32 and out64.dtype == np.float64
    assert naive.rel_err(out32, out64) < 1e-4


@given(graph=graphs(max_nodes=16), cfg=layer_configs(), seed=st.integers(0, 2**16))
def test_edge_order_within_rows_does_not_matter(graph, cfg, seed):
    # Attention is a function of the neighbour multiset: shuffling each row permutes alpha
    # the same way and leaves the output and the gradients unchanged (up to rounding).
    rng = np.random.default_rng(seed)
    layer = GATv2Layer(dtype=np.float64, seed=seed, **cfg)
    naive.randomize_params(layer, rng)
    rows = [graph.indices[graph.indptr[i] : graph.indptr[i + 1]] for i in range(graph.num_nodes)]
    perms = [rng.permutation(len(r)) for r in rows]
    shuffled = naive.rows_graph([r[p].tolist() for r, p in zip(rows, perms)])
    x = rng.standard_normal((graph.num_nodes, layer.in_features))
    out_a, cache_a = layer.forward(graph, x)
    out_b, cache_b = layer.forward(shuffled, x)
    assert naive.rel_err(out_a, out_b) < 1e-12
    if layer.root_weight is None and not layer.add_self_loops:
        order = np.concatenate([[0]] + [graph.indptr[i] + p for i, p in enumerate(perms)])[1:].astype(int)
        np.testing.assert_allclose(cache_b.alpha, cache_a.alpha[order], rtol=1e-12, atol=1e-15)
    R = rng.standard_normal(out_a.shape)
    ga = layer.backward(cache_a, R)
    gb = layer.backward(cache_b, R)
    # Absolute scale: a gradient that is zero in exact arithmetic (e.g. the Θ_R term of a row
    # whose edges share one LeakyReLU regime) is pure rounding in both orders.
    scale = max(np.abs(g).max(initial=0.0) for g in ga.values())
    for name in ga:
        np.testing.assert_allclose(gb[name], ga[name], rtol=1e-10, atol=1e-12 * scale, err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", [dict(), dict(add_self_loops=False, concat=False, residual=True)])
def test_graph_without_nodes(dtype, cfg):
    layer = GATv2Layer(3, 2, heads=2, dtype=dtype, seed=0, **cfg)
    graph = CSRGraph([0], [])
    x = np.zeros((0, 3), dtype=dtype)
    out, cache = layer.forward(graph, x)
    grads = layer.backward(cache, np.zeros((0, layer.out_dim), dtype=dtype))
    check_outputs(layer, graph, x, out, cache, grads)
    for name in layer.params:
        np.testing.assert_array_equal(grads[name], 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_features_keep_the_layer_dtype(dtype):
    rng = np.random.default_rng(0)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(5, 3, heads=2, dtype=dtype, seed=0, residual=True, root_weight="theta_n")
    # float64 sparse input into either layer: converted, never upcasting the results
    x = sp.random_array((graph.num_nodes, 5), density=0.4, format="csr", rng=rng, dtype=np.float64)
    out, cache = layer.forward(graph, x)
    grads = layer.backward(cache, np.ones_like(out))
    assert out.dtype == dtype and cache.alpha.dtype == dtype
    assert grads.pop("x") is None
    for name, grad in grads.items():
        assert grad.dtype == dtype and grad.shape == layer.params[name].shape, name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "cfg", [dict(heads=3), dict(heads=2, concat=False, share_weights=True, residual=True, dropout=0.3)]
)
def test_returned_arrays_are_never_overwritten(dtype, cfg):
    # Outputs, caches and gradients handed out earlier stay valid while the layer keeps
    # working (a training loop holds the previous step's cache during the next forward).
    rng = np.random.default_rng(0)
    graph = naive.random_graph(rng, 40, 6, empty_rows=2)
    layer = GATv2Layer(5, 3, dtype=dtype, seed=1, **cfg)
    x1, x2 = (rng.standard_normal((40, 5)).astype(dtype) for _ in range(2))
    R1, R2 = (rng.standard_normal((40, layer.out_dim)).astype(dtype) for _ in range(2))

    def snapshot_of(out, cache, grads):
        arrays = {"out": out, "alpha": cache.alpha, "xl": cache.xl, "xr": cache.xr, "scale": cache.edge_scale}
        arrays.update({f"grad/{k}": v for k, v in grads.items() if v is not None})
        return {k: v.copy() for k, v in arrays.items()}, arrays

    out1, cache1 = layer.forward(graph, x1, training=True, rng=np.random.default_rng(5))
    grads1 = layer.backward(cache1, R1)
    want, held = snapshot_of(out1, cache1, grads1)
    # only a view of one output and the alpha of another cache are kept
    view = layer.forward(graph, x1)[0][:, :2]
    view_copy = view.copy()
    alpha_only = layer.forward(graph, x1, training=True, rng=np.random.default_rng(6))[1].alpha
    alpha_copy = alpha_only.copy()

    for _ in range(3):
        out2, cache2 = layer.forward(graph, x2, training=True, rng=np.random.default_rng(7))
        layer.backward(cache2, R2, theta_r="pairwise")
        del out2, cache2

    for name, arr in held.items():
        np.testing.assert_array_equal(arr, want[name], err_msg=name)
    np.testing.assert_array_equal(view, view_copy)
    np.testing.assert_array_equal(alpha_only, alpha_copy)
    # and the old cache still gives the same gradients
    again = layer.backward(cache1, R1)
    for name, grad in grads1.items():
        if grad is not None:
            np.testing.assert_array_equal(again[name], want[f"grad/{name}"], err_msg=name)
