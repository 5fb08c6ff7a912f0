"""Bad input raises ValueError/TypeError naming the argument; inputs are never modified."""

import naive
import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import CSRGraph, GATv2Layer, batch_graphs


def snapshot(*arrays):
    return [a.copy() for a in arrays]


def assert_unchanged(arrays, before):
    for a, b in zip(arrays, before):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def graph():
    return naive.rows_graph([[1, 2], [0], [], [2, 0, 1]])


@pytest.fixture
def layer():
    lay = GATv2Layer(3, 2, heads=2, dtype=np.float64, seed=0)
    naive.randomize_params(lay, np.random.default_rng(0))
    return lay


@pytest.fixture
def x():
    return np.random.default_rng(1).standard_normal((4, 3))


# ---------------------------------------------------------------------- graphs


@pytest.mark.parametrize(
    "indptr, indices, match",
    [
        ([0, 1, 3], [0, 2, 1], r"indices must lie in \[0, num_nodes=2\)"),
        ([0, 1, 3], [0, -1, 1], r"indices must lie in \[0, num_nodes=2\)"),
        ([0, 2, 1, 3], [0, 1, 2], r"indptr must be non-decreasing"),
        ([1, 2, 3], [0, 1], r"indptr must start at 0"),
        ([0, 1, 2], [0, 1, 1], r"indptr\[-1\] must equal len\(indices\)"),
        ([0, 1, 4], [0, 1, 1], r"indptr\[-1\] must equal len\(indices\)"),
        ([], [], r"indptr must have length"),
        ([[0, 1]], [0], r"indptr must be 1-D"),
        ([0, 1], [[0]], r"indices must be 1-D"),
    ],
)
def test_csr_graph_rejects_bad_arrays(indptr, indices, match):
    indptr_arr = np.array(indptr, dtype=np.int64)
    indices_arr = np.array(indices, dtype=np.int64)
    before = snapshot(indptr_arr, indices_arr)
    with pytest.raises(ValueError, match=match):
        CSRGraph(indptr_arr, indices_arr)
    assert_unchanged([indptr_arr, indices_arr], before)


def test_csr_graph_rejects_bad_types():
    with pytest.raises(TypeError, match="indptr must be an integer array"):
        CSRGraph(np.array([0.0, 1.0]), [0])
    with pytest.raises(TypeError, match="indices must be an integer array"):
        CSRGraph([0, 1], np.array([0.5]))
    with pytest.raises(TypeError, match="indices must be an integer array"):
        CSRGraph([0, 1], np.array([True]))
    with pytest.raises(ValueError, match="indptr must have length num_nodes"):
        CSRGraph([0, 1, 1], [0], num_nodes=3)
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        CSRGraph([0, 1, 1], [0], num_nodes=2.0)


def test_from_scipy_rejects_bad_input():
    assert CSRGraph.from_scipy(sp.csr_array(np.ones((3, 4)))).shape == (3, 4)  # rectangular: bipartite
    with pytest.raises(ValueError, match=r"rows must be 'targets' or 'sources'"):
        CSRGraph.from_scipy(sp.csr_array(np.ones((3, 4))), rows="columns")
    with pytest.raises(TypeError, match=r"A must be a scipy.sparse"):
        CSRGraph.from_scipy(np.eye(3))
    with pytest.raises(TypeError, match=r"A must be a scipy.sparse"):
        CSRGraph.from_scipy([[0, 1], [1, 0]])


@pytest.mark.parametrize(
    "edge_index, error, match",
    [
        (np.zeros((3, 4), dtype=np.int64), ValueError, r"edge_index must have shape \(2, E\)"),
        (np.zeros((4, 2), dtype=np.int64), ValueError, r"edge_index must have shape \(2, E\)"),
        (np.zeros(4, dtype=np.int64), ValueError, r"edge_index must have shape \(2, E\)"),
        (np.zeros((2, 3), dtype=np.float64), TypeError, r"edge_index must be an integer array"),
        (np.zeros((2, 3), dtype=bool), TypeError, r"edge_index must be an integer array"),
        (np.array([[0, -1], [1, 0]]), ValueError, r"edge_index must be non-negative"),
    ],
)
def test_from_edge_index_rejects_bad_input(edge_index, error, match):
    before = snapshot(edge_index)
    with pytest.raises(error, match=match):
        CSRGraph.from_edge_index(edge_index)
    assert_unchanged([edge_index], before)


def test_from_edge_index_rejects_too_few_nodes():
    with pytest.raises(ValueError, match=r"num_nodes"):
        CSRGraph.from_edge_index(np.array([[0, 5], [1, 0]]), num_nodes=3)
    with pytest.raises(ValueError, match=r"num_nodes must be in \[0, 2147483647\], got -1"):
        CSRGraph.from_edge_index(np.zeros((2, 0), dtype=np.int64), num_nodes=-1)


def test_batch_graphs_rejects_bad_input(graph):
    with pytest.raises(ValueError, match="graphs must contain at least one"):
        batch_graphs([])
    with pytest.raises(TypeError, match=r"graphs\[1\] must be a CSRGraph"):
        batch_graphs([graph, np.eye(2)])


# ---------------------------------------------------------------------- layer construction


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(heads=0), ValueError, r"heads must be >= 1"),
        (dict(heads=-2), ValueError, r"heads must be >= 1"),
        (dict(heads=1.5), TypeError, r"heads must be an int"),
        (dict(heads=True), TypeError, r"heads must be an int"),
        (dict(dtype=np.int32), TypeError, r"dtype must be numpy.float32 or numpy.float64"),
        (dict(dtype=np.float16), TypeError, r"dtype must be numpy.float32 or numpy.float64"),
        (dict(dtype="not a dtype"), TypeError, r"dtype must be"),
        (dict(negative_slope=float("nan")), ValueError, r"negative_slope must be finite"),
        (dict(negative_slope="0.2"), TypeError, r"negative_slope must be a real number"),
        (dict(dropout=1.0), ValueError, r"dropout must be < 1"),
        (dict(dropout=-0.1), ValueError, r"dropout must be >= 0"),
        (dict(attention_activation="relu"), ValueError, r"attention_activation must be one of"),
        (dict(root_weight="theta_x"), ValueError, r"root_weight must be None"),
    ],
)
def test_layer_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        GATv2Layer(3, 2, **kwargs)


def test_layer_rejects_bad_sizes():
    with pytest.raises(ValueError, match="in_features must be >= 1"):
        GATv2Layer(0, 2)
    with pytest.raises(ValueError, match="out_features must be >= 1"):
        GATv2Layer(3, 0)
    with pytest.raises(TypeError, match="in_features must be an int"):
        GATv2Layer(3.0, 2)


# ---------------------------------------------------------------------- forward inputs


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((5, 3)), ValueError, r"x must have one row per node: expected 4 rows, got 5"),
        (np.zeros((3, 3)), ValueError, r"x must have one row per node"),
        (np.zeros((4, 2)), ValueError, r"x must have in_features = 3 columns, got 2"),
        (np.zeros(12), ValueError, r"x must be 2-D"),
        (np.zeros((4, 3), dtype=np.int64), TypeError, r"x must have a floating-point dtype"),
        (np.zeros((4, 3), dtype=bool), TypeError, r"x must have a floating-point dtype"),
        (np.full((4, 3), None), TypeError, r"x must be a numeric array"),
        (np.array([[0, 1, 2], [0, 0, 0], [0, 0, 0], [0, 0, np.nan]]), ValueError, r"x must be finite"),
        (np.array([[0, 1, 2], [0, 0, 0], [0, 0, 0], [0, 0, np.inf]]), ValueError, r"x must be finite"),
        (np.array([[0, 1, 2], [0, -np.inf, 0], [0, 0, 0], [0, 0, 0]]), ValueError, r"x must be finite"),
        (sp.csr_array(np.ones((5, 3))), ValueError, r"x must have shape \(4, 3\)"),
        (sp.csr_array(np.ones((4, 2))), ValueError, r"x must have shape \(4, 3\)"),
        (sp.csr_array(np.ones((4, 3), dtype=np.int64)), TypeError, r"x must have a floating-point dtype"),
        (sp.csr_array(np.array([[np.nan, 0, 0]] * 4)), ValueError, r"x must be finite"),
        (sp.coo_array(np.array([[0, 0, 0]] * 3 + [[0, np.inf, 0]])), ValueError, r"x must be finite"),
    ],
    ids=lambda v: None if not isinstance(v, str) else v[:24],
)
def test_forward_rejects_bad_features(layer, graph, bad, error, match):
    before = [bad.toarray() if sp.issparse(bad) else bad.copy()]
    with pytest.raises(error, match=match):
        layer.forward(graph, bad)
    after = bad.toarray() if sp.issparse(bad) else bad
    np.testing.assert_array_equal(after, before[0])


def test_forward_rejects_bad_graph(layer, x):
    with pytest.raises(TypeError, match="graph must be a gatfast.CSRGraph"):
        layer.forward(np.eye(4), x)
    with pytest.raises(TypeError, match="graph must be a gatfast.CSRGraph"):
        layer.forward([[1], [0], [], [0]], x)
    # a rectangular graph is a block: one matrix must cover its num_src sources
    with pytest.raises(ValueError, match=r"x must have one row per node: expected 5 rows, got 4"):
        layer.forward(sp.csr_array(np.ones((4, 5))), x)
    with pytest.raises(ValueError, match=r"more targets \(5\) than sources \(4\)"):
        layer.forward(sp.csr_array(np.ones((5, 4))), x)


# ---------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "name, value, error, match",
    [
        ("W_l", np.zeros((4, 4)), ValueError, r"params\['W_l'\] must have shape \(4, 3\), got \(4, 4\)"),
        ("W_l", np.zeros((3, 4)), ValueError, r"params\['W_l'\] must have shape"),
        ("att", np.zeros((4,)), ValueError, r"params\['att'\] must have shape \(2, 2\)"),
        ("bias", np.zeros((4, 1)), ValueError, r"params\['bias'\] must have shape \(4,?\)"),
        (
            "W_r",
            np.zeros((4, 3), dtype=np.int64),
            TypeError,
            r"params\['W_r'\] must have a floating-point dtype",
        ),
        ("b_l", np.array([1.0, np.nan, 0.0, 0.0]), ValueError, r"params\['b_l'\] must be finite"),
        ("att", np.array([[1.0, np.inf], [0.0, 0.0]]), ValueError, r"params\['att'\] must be finite"),
        ("W_l", sp.csr_array(np.ones((4, 3))), TypeError, r"params\['W_l'\] must be a dense array"),
    ],
)
def test_param_assignment_is_validated(layer, name, value, error, match):
    old = layer.params[name].copy()
    before = [value.toarray() if sp.issparse(value) else value.copy()]
    with pytest.raises(error, match=match):
        layer.params[name] = value
    np.testing.assert_array_equal(layer.params[name], old)  # the failed assignment left no trace
    after = value.toarray() if sp.issparse(value) else value
    np.testing.assert_array_equal(after, before[0])


def test_param_assignment_rejects_unknown_names(layer):
    with pytest.raises(KeyError, match="unknown parameter 'W_res'"):
        layer.params["W_res"] = np.zeros((4, 3))
    with pytest.raises(TypeError, match="cannot be removed"):
        del layer.params["W_l"]


@pytest.mark.parametrize(
    "name, value", [("att", np.nan), ("W_r", np.inf), ("bias", -np.inf), ("b_l", np.nan)]
)
def test_in_place_corruption_is_caught_at_forward(layer, graph, x, name, value):
    layer.params[name].flat[1] = value
    with pytest.raises(ValueError, match=rf"params\['{name}'\] must be finite"):
        layer.forward(graph, x)


def test_params_are_stored_as_copies(layer, graph, x):
    w = np.random.default_rng(3).standard_normal((4, 3))
    layer.params["W_l"] = w
    w[0, 0] = 99.0
    assert layer.params["W_l"][0, 0] != 99.0
    w32 = np.ones((4, 3), dtype=np.float32)
    layer.params["W_r"] = w32
    assert layer.params["W_r"].dtype == np.float64 and w32.dtype == np.float32


# ---------------------------------------------------------------------- backward inputs


@pytest.mark.parametrize(
    "shape, dtype, error, match",
    [
        ((4, 3), np.float64, ValueError, r"grad_out must have shape \(4, 4\), got \(4, 3\)"),
        ((5, 4), np.float64, ValueError, r"grad_out must have shape \(4, 4\)"),
        ((16,), np.float64, ValueError, r"grad_out must have shape \(4, 4\)"),
        ((4, 4), np.int64, TypeError, r"grad_out must have a floating-point dtype"),
    ],
)
def test_backward_rejects_bad_grad_out(layer, graph, x, shape, dtype, error, match):
    _, cache = layer.forward(graph, x)
    with pytest.raises(error, match=match):
        layer.backward(cache, np.ones(shape, dtype=dtype))


def test_backward_rejects_non_finite_grad_out_and_bad_options(layer, graph, x):
    out, cache = layer.forward(graph, x)
    bad = np.ones_like(out)
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="grad_out must be finite"):
        layer.backward(cache, bad)
    with pytest.raises(ValueError, match=r"theta_r must be one of \['linear', 'pairwise'\], got 'quadratic'"):
        layer.backward(cache, np.ones_like(out), theta_r="quadratic")
    with pytest.raises(TypeError, match="cache must be the LayerCache"):
        layer.backward((out, cache), np.ones_like(out))


@pytest.mark.parametrize("bias", [True, False])
def test_general_path_finds_non_finite_grad_out_with_or_without_the_bias_sums(monkeypatch, bias):
    """With a bias, the check comes from the bias gradient's column sums; a sum that overflows on finite
    values is no error (the element-wise check clears it), and the bias gradient is numpy's column sum."""
    import gatfast.layers.small as small
    from gatfast import NonFiniteError

    monkeypatch.setattr(small, "ENABLED", False)
    rng = np.random.default_rng(3)
    g = CSRGraph.from_scipy(
        sp.random(40, 40, density=0.2, random_state=3, format="csr") + sp.eye(40), rows="targets"
    )
    lay = GATv2Layer(5, 4, heads=2, bias=bias, dtype=np.float32, seed=1)
    out, cache = lay.forward(g, rng.standard_normal((40, 5)).astype(np.float32))
    for row, col in ((0, 0), (17, 3), (39, 7)):
        for value in (np.nan, np.inf, -np.inf):
            for dtype in (np.float32, np.float64):  # float64: converted first, then checked
                bad = np.ones(out.shape, dtype)
                bad[row, col] = value
                with pytest.raises(NonFiniteError, match="grad_out must be finite"):
                    lay.backward(cache, bad)
    grad = rng.standard_normal(out.shape).astype(np.float32)
    grads = lay.backward(cache, grad)
    if bias:
        assert grads["bias"].tobytes() == grad.sum(axis=0).tobytes()
        grad[:2, 0] = np.finfo(np.float32).max  # finite, but their column's sum overflows
        with np.errstate(over="ignore"):
            grads = lay.backward(cache, grad)
        assert grads["bias"][0] == np.inf and np.isfinite(grads["bias"][1:]).all()


# ---------------------------------------------------------------------- nothing modified in place


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(
    "cfg", [dict(), dict(concat=False, residual=True), dict(share_weights=True, dropout=0.3)]
)
def test_successful_calls_modify_no_input(graph, sparse, cfg):
    rng = np.random.default_rng(2)
    layer = GATv2Layer(3, 2, heads=2, dtype=np.float64, seed=0, **cfg)
    naive.randomize_params(layer, rng)
    params_before = layer.params.copy_arrays()
    dense = rng.standard_normal((4, 3)) * (rng.random((4, 3)) < 0.6)
    # an explicit zero, unsorted columns and a duplicate entry in the sparse input
    x = sp.csr_array(
        (np.array([0.0, 1.5, -2.0, 1.0]), np.array([2, 0, 1, 0]), np.array([0, 4, 4, 4, 4])), shape=(4, 3)
    )
    if not sparse:
        x = dense
    x_arrays = [x.data, x.indices, x.indptr] if sparse else [x]
    x_before = snapshot(*x_arrays)
    g_before = snapshot(graph.indptr, graph.indices)

    out, cache = layer.forward(graph, x, training=True, rng=np.random.default_rng(0))
    grad_out = rng.standard_normal(out.shape)
    go_before = grad_out.copy()
    for theta_r in ("linear", "pairwise"):
        layer.backward(cache, grad_out, theta_r=theta_r)

    assert_unchanged(x_arrays, x_before)
    assert_unchanged([graph.indptr, graph.indices], g_before)
    np.testing.assert_array_equal(grad_out, go_before)
    for name, arr in params_before.items():
        np.testing.assert_array_equal(layer.params[name], arr)


def test_failed_calls_modify_no_input(layer, graph, x):
    params_before = layer.params.copy_arrays()
    x_bad = x.copy()
    x_bad[0, 0] = np.nan
    x_bad_before = x_bad.copy()
    with pytest.raises(ValueError, match="x must be finite"):
        layer.forward(graph, x_bad)
    np.testing.assert_array_equal(x_bad, x_bad_before)
    out, cache = layer.forward(graph, x)
    grad_bad = np.ones((4, 3))
    with pytest.raises(ValueError, match="grad_out"):
        layer.backward(cache, grad_bad)
    np.testing.assert_array_equal(grad_bad, np.ones((4, 3)))
    for name, arr in params_before.items():
        np.testing.assert_array_equal(layer.params[name], arr)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", [0, 1, 7, 4095, 4096, 50_000])  # both sides of the small-array cut-off
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf])
def test_all_finite_finds_every_non_finite_value(dtype, size, bad):
    from gatfast._validate import all_finite

    rng = np.random.default_rng(size)
    arr = rng.standard_normal(size).astype(dtype)
    if bad is None or size == 0:
        assert all_finite(arr) and all_finite(arr[::-1]) and all_finite(arr.reshape(-1, 1).T)
        return
    for where in {0, size // 2, size - 1}:
        hit = arr.copy()
        hit[where] = bad
        assert not all_finite(hit), where
        assert not all_finite(hit[::-1]), where  # a strided view
        assert not all_finite(hit.reshape(1, -1)), where


def test_all_finite_survives_a_sum_that_overflows():
    from gatfast._validate import all_finite

    assert all_finite(np.full(10_000, 3e38, np.float32))  # the sum overflows, the values are finite
    assert all_finite(np.full(10, 3e38, np.float32))
