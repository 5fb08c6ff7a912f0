"""Gradients of GATv2Layer against central finite differences and the numpy reference."""

import naive
import numba
import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import CSRGraph, GATv2Layer

EPS = 1e-6
FD_TOL = 1e-6
EXACT_TOL = 1e-12


def make_layer(seed, in_features=4, out_features=3, **kw):
    layer = GATv2Layer(in_features, out_features, dtype=np.float64, seed=seed, **kw)
    naive.randomize_params(layer, np.random.default_rng(seed))
    return layer


def finite_differences(layer, graph, x, R, training=False, mask_seed=0):
    """Central differences of ``L = sum(out * R)`` for every parameter and for ``x``."""

    def loss(xx):
        rng = np.random.default_rng(mask_seed)  # the same dropout mask on every call
        out, _ = layer.forward(graph, xx, training=training, rng=rng)
        return float(np.sum(out * R))

    # Hundreds of calls on a tiny graph: one thread avoids paying for a parallel launch
    # each time (results do not depend on the thread count, see test_determinism.py).
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return _central_differences(layer, x, loss)
    finally:
        numba.set_num_threads(threads)


def _central_differences(layer, x, loss):
    fd = {}
    for name in list(layer.params):
        base = layer.params[name].copy()
        grad = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += EPS
            minus[idx] -= EPS
            layer.params[name] = plus
            lp = loss(x)
            layer.params[name] = minus
            lm = loss(x)
            grad[idx] = (lp - lm) / (2 * EPS)
        layer.params[name] = base
        fd[name] = grad
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += EPS
        minus[idx] -= EPS
        grad[idx] = (loss(plus) - loss(minus)) / (2 * EPS)
    fd["x"] = grad
    return fd


# Every config is checked with both Θ_R forms against the same finite differences.
BASE = [
    dict(heads=h, concat=c, add_self_loops=s) for h in (1, 3) for c in (True, False) for s in (True, False)
]
EXTRA = [
    dict(heads=3, concat=True, negative_slope=0.01),
    dict(heads=1, concat=False, negative_slope=0.01, add_self_loops=False),
    dict(heads=3, concat=True, share_weights=True),
    dict(heads=1, concat=False, share_weights=True, add_self_loops=False),
    dict(heads=3, concat=True, residual=True),
    dict(heads=3, concat=False, residual=True, add_self_loops=False),
    dict(heads=3, concat=True, bias=False),
    dict(heads=1, concat=True, bias=False, share_weights=True, residual=True, negative_slope=0.01),
    dict(heads=1, concat=True, attention_activation="softplus"),
    dict(heads=3, concat=False, attention_activation="softplus", add_self_loops=False),
    dict(heads=3, concat=True, root_weight="theta_r"),
    dict(heads=1, concat=False, root_weight="theta_r", share_weights=True),
    dict(heads=3, concat=True, root_weight="theta_n"),
    dict(heads=2, concat=False, root_weight="theta_n", bias=False),
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


@pytest.mark.parametrize("cfg", BASE + EXTRA, ids=_id)
def test_gradients_match_finite_differences(cfg):
    rng = np.random.default_rng(len(_id(cfg)))
    graph = naive.mixed_graph(rng)
    layer = make_layer(seed=3, **cfg)
    x = rng.standard_normal((graph.num_nodes, layer.in_features))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    fd = finite_differences(layer, graph, x, R)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        assert set(grads) == set(layer.params) | {"x"}
        for name, want in fd.items():
            assert grads[name].shape == want.shape, name
            assert np.linalg.norm(want) > 0, f"{name}: degenerate check, zero gradient"
            err = naive.rel_err(grads[name], want)
            assert err < FD_TOL, f"{theta_r} {name}: relative error {err:.2e}"


#: Channel widths that exercise every path of the 8-lane SIMD sums: no full vector,
#: whole vectors, whole vectors plus a tail.
WIDTHS = [1, 7, 8, 9, 16, 17, 33]


@pytest.mark.parametrize("channels", WIDTHS)
@pytest.mark.parametrize("activation", ["leaky_relu", "softplus"])
def test_finite_differences_at_every_simd_width(channels, activation):
    rng = np.random.default_rng(channels)
    graph = naive.mixed_graph(rng, n=10, hub_degree=6)
    layer = make_layer(
        seed=channels,
        in_features=3,
        out_features=channels,
        heads=2,
        concat=channels % 2 == 1,
        attention_activation=activation,
    )
    x = rng.standard_normal((graph.num_nodes, 3))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    fd = finite_differences(layer, graph, x, R)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        for name, want in fd.items():
            assert np.linalg.norm(want) > 0, f"{name}: degenerate check, zero gradient"
            err = naive.rel_err(grads[name], want)
            assert err < FD_TOL, f"{theta_r} {name}: relative error {err:.2e}"


def test_dropout_gradients_match_finite_differences():
    rng = np.random.default_rng(11)
    graph = naive.mixed_graph(rng)
    layer = make_layer(seed=5, heads=3, dropout=0.4)
    x = rng.standard_normal((graph.num_nodes, layer.in_features))
    out, cache = layer.forward(graph, x, training=True, rng=np.random.default_rng(0))
    assert np.any(cache.edge_scale == 0), "the mask should drop some edges"
    R = rng.standard_normal(out.shape)
    fd = finite_differences(layer, graph, x, R, training=True, mask_seed=0)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        for name, want in fd.items():
            err = naive.rel_err(grads[name], want)
            assert err < FD_TOL, f"{theta_r} {name}: relative error {err:.2e}"


def test_rows_with_one_edge_send_no_attention_gradient():
    # Every node has exactly its self loop: alpha == 1, so att and Θ_R get nothing
    # through the attention (the paper's single-in-edge pitfall).
    graph = CSRGraph(np.arange(7), np.arange(6))
    layer = make_layer(seed=2, heads=2)
    x = np.random.default_rng(0).standard_normal((6, 4))
    out, cache = layer.forward(graph, x)
    np.testing.assert_array_equal(cache.alpha, 1.0)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, np.ones_like(out), theta_r=theta_r)
        np.testing.assert_allclose(grads["att"], 0.0, atol=1e-15)
        np.testing.assert_allclose(grads["W_r"], 0.0, atol=1e-15)
        np.testing.assert_allclose(grads["b_r"], 0.0, atol=1e-15)
        assert np.linalg.norm(grads["W_l"]) > 0


# ---------------------------------------------------------------------- reference and Θ_R forms


def hub_graph(rng, n=60, hub_degree=40):
    """Random rows of 0-6 unsorted in-edges plus node 0 with ``hub_degree`` of them."""
    g = naive.random_graph(rng, n, 6, empty_rows=0)
    rows = [g.indices[g.indptr[i] : g.indptr[i + 1]].tolist() for i in range(n)]
    rows[0] = rng.choice(np.arange(1, n), size=hub_degree, replace=False).tolist()
    return naive.rows_graph(rows)


@pytest.mark.parametrize("seed", range(4))
def test_pairwise_equals_linear(seed):
    rng = np.random.default_rng(100 + seed)
    graph = hub_graph(rng)
    heads = 1 + seed % 3
    layer = make_layer(
        seed,
        in_features=5,
        out_features=4,
        heads=heads,
        concat=seed % 2 == 0,
        negative_slope=(0.2, 0.01)[seed % 2],
        add_self_loops=seed < 2,
    )
    assert layer.attention_graph(graph).in_degree().max() >= 40
    x = rng.standard_normal((graph.num_nodes, 5))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    lin = layer.backward(cache, R, theta_r="linear")
    pair = layer.backward(cache, R, theta_r="pairwise")
    for name in lin:
        err = naive.rel_err(lin[name], pair[name])
        assert err < EXACT_TOL, f"{name}: {err:.2e}"

    # The reference's two Θ_R terms agree as well, and are not trivially zero.
    g = cache.graph
    p = {k: v for k, v in layer.params.items()}
    _, alpha, xl3, xr3 = naive.forward(g.indptr, g.indices, x, p, heads, layer.concat, layer.negative_slope)
    A = naive.upstream(g.indptr, g.indices, xl3, naive.head_grads(R, heads, layer.concat))
    args = (g.indptr, g.indices, xl3, xr3, p["att"], alpha, A, layer.negative_slope)
    P_lin = naive.theta_r_linear(*args)
    P_pair = naive.theta_r_pairwise(*args)
    assert np.linalg.norm(P_lin) > 0
    assert naive.rel_err(P_lin, P_pair) < EXACT_TOL


def test_pairwise_form_is_computed_by_its_own_kernel():
    """``theta_r="pairwise"`` must run the O(deg²) kernel, not return the linear form.

    The two forms agree to rounding, so every tolerance test passes if the option is ignored.
    On a 40-edge hub they round differently: the Θ_R gradients must not be the same bits,
    while the gradients that do not go through Θ_R are.
    """
    rng = np.random.default_rng(100)
    graph = hub_graph(rng)
    layer = make_layer(0, in_features=5, out_features=4, heads=2)
    x = rng.standard_normal((graph.num_nodes, 5))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    lin = layer.backward(cache, R, theta_r="linear")
    pair = layer.backward(cache, R, theta_r="pairwise")
    assert np.count_nonzero(lin["W_r"] != pair["W_r"]) > lin["W_r"].size // 2
    for name in ("W_l", "att"):
        np.testing.assert_array_equal(lin[name], pair[name])


REFERENCE_CFGS = BASE + EXTRA


@pytest.mark.parametrize("cfg", REFERENCE_CFGS, ids=_id)
def test_layer_equals_reference(cfg):
    rng = np.random.default_rng(7)
    graph = naive.mixed_graph(rng, n=14, hub_degree=10)
    layer = make_layer(seed=9, **cfg)
    x = rng.standard_normal((graph.num_nodes, layer.in_features))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    for theta_r in ("linear", "pairwise"):
        ref_out, ref_alpha, ref_grads = naive.layer_reference(layer, graph, x, R, theta_r)
        assert naive.rel_err(out, ref_out) < EXACT_TOL
        assert naive.rel_err(cache.alpha, ref_alpha) < EXACT_TOL
        grads = layer.backward(cache, R, theta_r=theta_r)
        assert set(grads) == set(ref_grads)
        for name in grads:
            err = naive.rel_err(grads[name], ref_grads[name])
            assert err < EXACT_TOL, f"{theta_r} {name}: {err:.2e}"


def test_paper_a7_equals_upstream_for_unit_gradient():
    rng = np.random.default_rng(3)
    graph = hub_graph(rng, n=30, hub_degree=20)
    layer = make_layer(seed=4, in_features=5, out_features=4, heads=1, concat=True)
    x = rng.standard_normal((graph.num_nodes, 5))
    out, cache = layer.forward(graph, x)
    ones = np.ones_like(out)
    g = cache.graph
    p = dict(layer.params)
    _, alpha, xl3, xr3 = naive.forward(g.indptr, g.indices, x, p, 1)

    A = naive.upstream(g.indptr, g.indices, xl3, naive.head_grads(ones, 1, True))
    A7 = naive.paper_a7(g.indptr, g.indices, xl3)
    assert naive.rel_err(A7, A) < EXACT_TOL

    # The paper's δ_ik = α_ik S_k ...
    S = naive.paper_s(g.indptr, alpha, A7)
    assert naive.rel_err(alpha * S, naive.score_grads(g.indptr, alpha, A)) < EXACT_TOL

    # ... and its final Θ_R gradient equal the layer's for ∂L/∂h' = 1.
    grads = layer.backward(cache, ones, theta_r="pairwise")
    dW, db = naive.paper_theta_r_grad(g.indptr, g.indices, x, xl3, xr3, p["att"], alpha, layer.negative_slope)
    assert np.linalg.norm(dW) > 0
    assert naive.rel_err(grads["W_r"], dW) < EXACT_TOL
    assert naive.rel_err(grads["b_r"], db) < EXACT_TOL


def test_paper_a7_is_not_the_upstream_for_a_general_gradient():
    # MATH.md: A_7 is exact only for g = 1; with a random upstream A_ij = g_i · x_j differs.
    rng = np.random.default_rng(8)
    graph = naive.mixed_graph(rng)
    layer = make_layer(seed=1, heads=1)
    x = rng.standard_normal((graph.num_nodes, 4))
    g = layer.attention_graph(graph)
    _, _, xl3, _ = naive.forward(g.indptr, g.indices, x, dict(layer.params), 1)
    R = rng.standard_normal((graph.num_nodes, 3))
    A = naive.upstream(g.indptr, g.indices, xl3, naive.head_grads(R, 1, True))
    assert naive.rel_err(naive.paper_a7(g.indptr, g.indices, xl3), A) > 0.1


# ---------------------------------------------------------------------- sparse features


@pytest.mark.parametrize(
    "cfg",
    [
        dict(heads=3),
        dict(heads=2, concat=False, residual=True),
        dict(share_weights=True, root_weight="theta_n"),
    ],
    ids=_id,
)
def test_sparse_features_match_dense(cfg):
    rng = np.random.default_rng(12)
    graph = naive.mixed_graph(rng)
    layer = make_layer(seed=6, in_features=7, **cfg)
    dense = rng.standard_normal((graph.num_nodes, 7)) * (rng.random((graph.num_nodes, 7)) < 0.3)
    x_sp = sp.csr_array(dense)
    out_d, cache_d = layer.forward(graph, dense)
    out_s, cache_s = layer.forward(graph, x_sp)
    assert naive.rel_err(out_s, out_d) < EXACT_TOL
    R = rng.standard_normal(out_d.shape)
    gd = layer.backward(cache_d, R)
    gs = layer.backward(cache_s, R)
    assert gs["x"] is None
    assert gd["x"] is not None
    for name in layer.params:
        assert gs[name].shape == gd[name].shape
        assert naive.rel_err(gs[name], gd[name]) < EXACT_TOL, name

    # a non-canonical COO (entries split in two duplicates, unsorted) means the same matrix
    coo = sp.coo_array(dense)
    halves = np.concatenate([coo.data / 2, coo.data / 2])
    rows, cols = np.tile(coo.row, 2)[::-1], np.tile(coo.col, 2)[::-1]
    x_dup = sp.coo_array((halves[::-1], (rows, cols)), shape=dense.shape)
    out_c, cache_c = layer.forward(graph, x_dup)
    assert naive.rel_err(out_c, out_d) < EXACT_TOL
    gc = layer.backward(cache_c, R)
    for name in layer.params:
        assert naive.rel_err(gc[name], gd[name]) < EXACT_TOL, name


@pytest.mark.parametrize("in_features", [9, 17])
def test_finite_differences_through_the_dense_tile(monkeypatch, in_features):
    """A layer big enough for the general path, so that its projections and its backward's products
    (weight and input gradients) run through the Numba tile (``kernels/gemm.py``: 4 or 8 float64
    columns per vector; ``kernels/dense_grads.py``)."""
    import gatfast.layers.dense as dense

    calls = []
    tile, pair, grads_kernel = dense.matmul_rows, dense.matmul_pair_rows, dense.dense_grad_chunks
    monkeypatch.setattr(dense, "matmul_rows", lambda *a: calls.append("projections") or tile(*a))
    monkeypatch.setattr(dense, "matmul_pair_rows", lambda *a: calls.append("projections") or pair(*a))
    monkeypatch.setattr(dense, "dense_grad_chunks", lambda *a: calls.append("backward") or grads_kernel(*a))
    rng = np.random.default_rng(in_features)
    graph = naive.mixed_graph(rng, n=130, hub_degree=6)  # past dense.SMALL_PRODUCT and TILED_BACKWARD_ROWS
    assert graph.num_nodes >= dense.TILED_BACKWARD_ROWS
    layer = make_layer(seed=in_features, in_features=in_features, out_features=8, heads=2)
    x = rng.standard_normal((graph.num_nodes, in_features))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    fd = finite_differences(layer, graph, x, R)
    grads = layer.backward(cache, R)
    for name, want in fd.items():
        assert np.linalg.norm(want) > 0, f"{name}: degenerate check, zero gradient"
        err = naive.rel_err(grads[name], want)
        assert err < FD_TOL, f"{name}: relative error {err:.2e}"
    assert "projections" in calls and "backward" in calls


def _bits(grads):
    return {k: v.view(np.uint8).copy() for k, v in grads.items() if isinstance(v, np.ndarray)}


def _assert_same_bits(got, want):
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), name


@pytest.mark.parametrize("cfg", [dict(heads=2), dict(root_weight="theta_n", residual=True)], ids=_id)
def test_sparse_features_transpose_structure_is_kept_only_while_it_is_the_same(cfg):
    """The layer keeps the structure of the transpose of sparse features between steps
    (``Workspace.transposed``) and gathers the values at every call: features changed in place, new values
    on the same positions (feature dropout) or a new structure must all give a fresh layer's bits."""
    rng = np.random.default_rng(13)
    graph = naive.mixed_graph(rng)
    dense = rng.standard_normal((graph.num_nodes, 7)) * (rng.random((graph.num_nodes, 7)) < 0.4)
    R = rng.standard_normal((graph.num_nodes, make_layer(seed=0, in_features=7, **cfg).out_dim))

    def grads(layer, x):
        return _bits(layer.backward(layer.forward(graph, x)[1], R))

    def fresh(x):
        return grads(make_layer(seed=6, in_features=7, **cfg), x)

    layer = make_layer(seed=6, in_features=7, **cfg)
    x = sp.csr_array(dense)
    first = grads(layer, x)
    kept = layer._workspace._transposes
    assert list(kept) == ["x"]  # one matrix for sources and targets: one kept structure, root terms too
    entry = kept["x"]
    _assert_same_bits(grads(layer, x), first)
    assert kept["x"] is entry  # reused, not rebuilt

    x.data[0] *= 3.0  # a value in place: the same structure, the new value's gradients
    _assert_same_bits(grads(layer, x), fresh(x))
    assert kept["x"] is entry
    y = sp.csr_array(dense * rng.random(dense.shape))  # new values on the same positions (feature dropout)
    _assert_same_bits(grads(layer, y), fresh(y))
    assert kept["x"] is entry
    row0 = x.indices[x.indptr[0] : x.indptr[1]]
    x.indices[x.indptr[0]] = np.setdiff1d(np.arange(7), row0)[0]  # the column of an entry, in place
    x.has_sorted_indices = False
    _assert_same_bits(grads(layer, x), fresh(x))
    assert kept["x"] is not entry
    z = sp.csr_array(dense)
    z.indices, z.indptr = z.indices.astype(np.int32), z.indptr.astype(np.int32)  # other index dtypes
    _assert_same_bits(grads(layer, z), fresh(z))


def test_the_kept_structures_gather_compares_lengths_before_it_reads():
    from gatfast.kernels.sparse import gather_if_same

    ptr, idx = np.array([0, 2, 3]), np.array([1, 0, 1])
    data, positions, out = np.array([1.0, 2.0, 3.0]), np.array([1, 0, 2]), np.zeros(3)
    assert gather_if_same(ptr, ptr, idx, idx, positions, data, out)
    np.testing.assert_array_equal(out, [2.0, 1.0, 3.0])
    assert not gather_if_same(ptr, ptr[:2], idx, idx, positions, data, out)  # shorter: never equal
    assert not gather_if_same(ptr, ptr, idx, idx[:2], positions, data, out)
    assert not gather_if_same(ptr, ptr, idx, np.array([1, 0, 2]), positions, data, out)
    with pytest.raises(ValueError, match="positions"):
        gather_if_same(ptr, ptr, idx, idx, positions[:2], data, out)
    with pytest.raises(ValueError, match="positions"):
        gather_if_same(ptr, ptr, idx, idx, positions, data[:2], out)


def test_kept_transpose_gives_scipys_transpose_bits():
    from gatfast.layers.workspace import Workspace

    ws = Workspace()
    # unsorted columns, a duplicate entry, an explicit +0.0 and -0.0: moved by position, never summed
    data = np.array([1.5, -0.0, 2.0, 0.0, 3.0, 1.0])
    indices = np.array([2, 0, 2, 1, 0, 2])
    indptr = np.array([0, 3, 3, 6])
    for index_dtype in (np.int64, np.int32):
        x = sp.csr_array((data, indices.astype(index_dtype), indptr.astype(index_dtype)), shape=(3, 4))
        want = x.T.tocsr()
        for _ in range(2):  # built, then from the kept structure
            got = ws.transposed(x, "x")
            assert got.shape == want.shape
            assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
            assert got.data.tobytes() == want.data.tobytes()
        x.data[:] = -x.data  # new values, the kept structure
        assert ws.transposed(x, "x").data.tobytes() == x.T.tocsr().data.tobytes()
    first, second = ws.transposed(x, "x"), ws.transposed(x, "x")  # each call its own values
    assert not np.shares_memory(first.data, second.data)
    first.data[:] = 7.0
    assert second.data.tobytes() == x.T.tocsr().data.tobytes()
    single = sp.csr_array((data.astype(np.float32), x.indices, x.indptr), shape=x.shape)  # the structure
    got = ws.transposed(single, "x")
    assert got.dtype == np.float32 and got.data.tobytes() == single.T.tocsr().data.tobytes()
    square = sp.csr_array((data, indices, indptr), shape=(3, 3))
    ws.transposed(square, "x")
    csc = sp.csc_array((data, indices, indptr), shape=(3, 3))  # the same arrays, another matrix
    np.testing.assert_array_equal(ws.transposed(csc, "x").toarray(), csc.toarray().T)
    ws.clear()
    assert not ws._transposes
