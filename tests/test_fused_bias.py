"""The output bias inside the attention kernels.

Forward: where the aggregation is the layer's output (``passes.finishes_output``), the kernels add the bias
and check the output as they write each row, instead of a separate pass (``rowwise.add_bias_finite``): they
must give that pass's bits and find every NaN and inf, in any chunk of rows. Backward: the target pass sums
the upstream gradient per block of rows for the bias gradient (``backward.check_bias_part``), and those sums
check it. The layer must give the same output and gradients either way.
"""

import numba
import numpy as np
import pytest

from gatfast import GATv2Layer, _runtime
from gatfast.graph import CSRGraph
from gatfast.kernels import ACTIVATIONS, gatv2_forward_edge_rows, gatv2_forward_rows
from gatfast.kernels.backward import ATT_BLOCK
from gatfast.kernels.prefetch import PREFETCH_DISTANCE
from gatfast.layers import passes
from gatfast.layers.rowwise import add_bias_finite

THREADS = [1, 2] if numba.config.NUMBA_NUM_THREADS >= 2 else [1]
WIDTHS = [1, 7, 8, 9, 16, 17, 33]


def _graph(n, seed):
    """Random in-degrees 0-5; row 1 has no edges (its output is the bias alone)."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(0, 6, n)
    degrees[1] = 0
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int64)
    return indptr, indices


def _call(edge, r0, r1, arrays, bias, finish):
    indptr, indices, xl, xr, att, u, weT, alpha, out = arrays
    head = (indptr, indices, xl, xr, att, xl.dtype.type(0.2), ACTIVATIONS["leaky_relu"], PREFETCH_DISTANCE)
    no_dropout = np.zeros((0, att.shape[0]), xl.dtype)
    if edge:
        return gatv2_forward_edge_rows(r0, r1, *head, u, weT, no_dropout, bias, finish, alpha, out)
    return gatv2_forward_rows(r0, r1, *head, no_dropout, bias, finish, alpha, out)


def _arrays(n, heads, channels, dtype, seed):
    indptr, indices = _graph(n, seed)
    rng = np.random.default_rng(seed + 1)
    xl, xr = (rng.standard_normal((n, heads, channels)).astype(dtype) for _ in range(2))
    att = rng.standard_normal((heads, channels)).astype(dtype)
    u = rng.standard_normal((indices.size, 3)).astype(dtype)
    weT = rng.standard_normal((heads, 3, channels)).astype(dtype)
    alpha = np.empty((indices.size, heads), dtype)
    out = np.empty((n, heads, channels), dtype)
    return [indptr, indices, xl, xr, att, u, weT, alpha, out]


@pytest.mark.parametrize("edge", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("channels", WIDTHS)
def test_finish_gives_the_separate_pass_bits_in_any_chunks(edge, dtype, heads, channels):
    n = 41
    arrays = _arrays(n, heads, channels, dtype, channels)
    bias = (np.random.default_rng(channels).standard_normal(heads * channels) * 100).astype(dtype)
    assert _call(edge, 0, n, arrays, bias[:0], False)  # unfinished: nothing checked
    want = arrays[-1].copy()
    assert add_bias_finite(want.reshape(n, heads * channels), bias)
    for cuts in ([0, n], [0, 1, 2, 20, n], [0, 13, 14, 27, n]):
        for b, expected in ((bias, want), (bias[:0], None)):
            arrays[-1][...] = np.nan
            results = [_call(edge, lo, hi, arrays, b, True) for lo, hi in zip(cuts, cuts[1:])]
            assert all(results)
            if expected is not None:
                assert arrays[-1].tobytes() == expected.tobytes()
    assert (arrays[-1][1] == 0).all()  # no bias: the row without edges is +0


@pytest.mark.parametrize("edge", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [1, 9, 33])
def test_finish_finds_nan_and_inf_in_the_chunk_that_has_them(edge, dtype, channels):
    n, heads = 41, 2
    arrays = _arrays(n, heads, channels, dtype, 7)
    indptr, indices, xl = arrays[0], arrays[1], arrays[2]
    bias = np.ones(heads * channels, dtype)
    target = 30  # a row with edges: its first source gets a bad value
    while indptr[target + 1] == indptr[target]:
        target += 1
    source = indices[indptr[target]]
    info = np.finfo(dtype)
    for bad_source in (np.nan, np.inf, -np.inf):
        xl[source, heads - 1, channels - 1] = bad_source
        results = [_call(edge, lo, hi, arrays, bias, True) for lo, hi in ((0, 20), (20, n))]
        assert results[0] == all(indices[: indptr[20]] != source)  # the first chunk reads it too, or not
        assert not results[1]
        xl[source, heads - 1, channels - 1] = 0.0
    assert _call(edge, 0, n, arrays, bias, True)
    # finite outputs that overflow when the bias is added: the last channel does not move the scores
    # (its attention weight is 0) and aggregates to max / 2, whose sum with max is inf
    att = arrays[4]
    att[:, -1] = 0.0
    xl[:, -1, -1] = info.max / 2
    assert _call(edge, 0, n, arrays, bias, True)
    over = bias.copy()
    over[-1] = info.max
    assert not _call(edge, 0, n, arrays, over, True)


def test_a_bias_of_another_size_is_refused():
    arrays = _arrays(5, 1, 4, np.float64, 0)
    with pytest.raises(ValueError, match="heads \\* channels"):
        _call(False, 0, 5, arrays, np.zeros(3), True)
    with pytest.raises(ValueError, match="heads \\* channels"):
        _call(True, 0, 5, arrays, np.zeros(5), True)


def _layer_case(dtype, heads, channels, edge_dim, bias, concat=True, **kw):
    n = 300
    indptr, indices = _graph(n, heads + channels)
    g = CSRGraph(indptr, indices, n)
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((n, 6)).astype(dtype)
    attr = rng.standard_normal((g.nnz, edge_dim)).astype(dtype) if edge_dim else None
    layer = GATv2Layer(6, channels, heads=heads, concat=concat, edge_dim=edge_dim, bias=bias, dtype=dtype, seed=1,
                       **kw)  # fmt: skip
    if bias:
        layer.params["bias"] = rng.standard_normal(layer.params["bias"].shape) * 10
    return layer, g, x, attr


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("channels", WIDTHS)
@pytest.mark.parametrize("edge_dim", [None, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_the_layer_gives_the_same_bits_finished_by_the_kernel_or_not(
    monkeypatch, threads, dtype, heads, channels, edge_dim, bias
):
    from gatfast.layers import small

    layer, g, x, attr = _layer_case(dtype, heads, channels, edge_dim, bias)
    assert passes.finishes_output(layer)
    monkeypatch.setattr(small, "ENABLED", False)  # the general path even for the smallest of these layers
    monkeypatch.setattr(_runtime, "PARALLEL_WORK", 1)  # chunks on the pool even for this small graph
    monkeypatch.setattr(_runtime, "SERIAL_WORK", 64)
    results = []
    for finish in (True, False):
        monkeypatch.setattr(passes, "finishes_output", lambda layer, finish=finish: finish)
        with _runtime.threads(threads):
            out, cache = layer.forward(g, x, attr)
            grads = layer.backward(cache, np.cos(out))
        results.append((out, grads))
    (out, grads), (out_plain, grads_plain) = results
    assert out.tobytes() == out_plain.tobytes()
    for key, value in grads.items():
        assert np.asarray(value).tobytes() == np.asarray(grads_plain[key]).tobytes(), key


@pytest.mark.parametrize("kw", [{"concat": False}, {"root_weight": "theta_r"}, {"residual": True}])
def test_other_outputs_are_finished_by_the_layer(kw):
    layer, *_ = _layer_case(np.float64, 2, 4, None, True, **kw)
    assert not passes.finishes_output(layer)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_overflowing_output_or_a_nan_bias_is_refused(dtype):
    layer, g, x, _ = _layer_case(dtype, 2, 9, None, True)
    big = np.finfo(dtype).max
    layer.forward(g, x)
    # uniform attention over rows of x @ W_l.T = (sum of six values near big / 100) > 0: a finite
    # aggregation that overflows when the bias (big) is added
    layer.params.update(
        att=0 * layer.params["att"], W_l=1 + 0 * layer.params["W_l"], b_l=0 * layer.params["b_l"]
    )
    layer.params["bias"] = np.full(layer.params["bias"].shape, big)
    positive = (np.abs(x) + 1) * (big / 100)
    with pytest.raises(ValueError, match="output contains NaN or inf"):
        layer.forward(g, positive)
    layer.params["bias"] = np.ones(layer.params["bias"].shape)
    assert np.isfinite(layer.forward(g, positive)[0]).all()
    layer.params["bias"][5] = (
        np.nan
    )  # changed in place after its check: the output check finds it and names it
    with pytest.raises(ValueError, match="params\\['bias'\\] must be finite"):
        layer.forward(g, x)


def _blocked(grad, blocks):
    """The target pass's order: each block of rows summed from zero, then the blocks in order."""
    n = grad.shape[0]
    size = -(-n // blocks)
    total = np.zeros(grad.shape[1], grad.dtype)
    for b in range(blocks):
        part = np.zeros(grad.shape[1], grad.dtype)
        for row in grad[b * size : (b + 1) * size]:
            part += row
        total += part
    return total


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads, concat", [(1, True), (3, True), (3, False)])
@pytest.mark.parametrize("n", [5, ATT_BLOCK, ATT_BLOCK + 1, 3 * ATT_BLOCK + 7])
def test_bias_gradient_sums_blocks_of_rows_in_order(monkeypatch, threads, dtype, heads, concat, n):
    """Concatenated heads (or one): the target pass's block sums; averaged heads: ``rowwise.bias_gradient``."""
    monkeypatch.setattr(_runtime, "PARALLEL_WORK", 1)
    monkeypatch.setattr(_runtime, "SERIAL_WORK", 64)
    indptr, indices = _graph(n, n)
    g = CSRGraph(indptr, indices, n)
    rng = np.random.default_rng(n)
    layer = GATv2Layer(4, 9, heads=heads, concat=concat, dtype=dtype, seed=2)
    out, cache = layer.forward(g, rng.standard_normal((n, 4)).astype(dtype))
    grad = (rng.standard_normal(out.shape) * 10.0 ** rng.integers(-4, 4, out.shape)).astype(dtype)
    with _runtime.threads(threads):
        got = layer.backward(cache, grad)["bias"]
    blocks = -(-n // ATT_BLOCK)
    if concat:
        assert got.tobytes() == _blocked(grad, blocks).tobytes()
    else:
        from gatfast.layers.rowwise import bias_gradient

        assert got.tobytes() == bias_gradient(grad).tobytes()
    if n <= ATT_BLOCK:  # one block: the plain sum row after row
        assert got.tobytes() == _blocked(grad, 1).tobytes()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the products of the overflowing gradient warn
@pytest.mark.parametrize("edge_dim", [None, 2])
@pytest.mark.parametrize("heads, concat", [(2, True), (2, False)])
def test_a_nan_or_inf_upstream_gradient_is_refused_and_an_overflowing_sum_is_not(edge_dim, heads, concat):
    layer, g, x, attr = _layer_case(np.float32, heads, 9, edge_dim, True, concat=concat)
    out, cache = layer.forward(g, x, attr)
    for row in (0, 1, g.num_dst - 1):  # row 1 has no edges: only the bias gradient reads it
        for bad in (np.nan, np.inf, -np.inf):
            grad = np.ones_like(out)
            grad[row, -1] = bad
            with pytest.raises(ValueError, match="grad_out must be finite"):
                layer.backward(cache, grad)
    grad = np.ones_like(out)
    grad[:2, 0] = np.finfo(np.float32).max  # finite values whose sum overflows: not an error
    assert layer.backward(cache, grad)["bias"][0] == np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("heads, concat", [(1, True), (3, True), (3, False)])
def test_the_one_call_path_sums_the_bias_gradient_as_the_general_path(monkeypatch, dtype, heads, concat):
    """More rows than one block (a small product of few features): the same bits both ways."""
    from gatfast.layers import small
    from gatfast.layers.dense import is_small

    n = 3 * ATT_BLOCK + 5
    indptr, indices = _graph(n, 3)
    g = CSRGraph(indptr, indices, n)
    layer = GATv2Layer(1, 3, heads=heads, concat=concat, dtype=dtype, seed=4, add_self_loops=False)
    assert is_small(n, 1, heads * 3)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, 1)).astype(dtype)
    grad = (rng.standard_normal((n, layer.out_dim)) * 10.0 ** rng.integers(-4, 4, (n, layer.out_dim))).astype(
        dtype
    )
    monkeypatch.setattr(small, "_decided", {"forward", "backward"})  # the one-call kernels, compiled or not
    calls = []
    kernel = small.small_layer_backward
    monkeypatch.setattr(small, "small_layer_backward", lambda *a: calls.append(1) or kernel(*a))
    bias = []
    for enabled in (True, False):
        monkeypatch.setattr(small, "ENABLED", enabled)
        out, cache = layer.forward(g, x)
        bias.append(layer.backward(cache, grad)["bias"])
    assert calls == [1]  # the one-call path, then the general one
    assert bias[0].tobytes() == bias[1].tobytes()
