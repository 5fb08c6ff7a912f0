"""The target pass that also does the source pass on batches of small graphs (``cuts``): the source pass's
bits for every source it sums, nothing else written, and the layer's gradients unchanged to the bit."""

import numba
import numpy as np
import pytest
from test_edge_sums import _inputs, _strided

from gatfast import CSRGraph, GATv2Layer, batch_graphs
from gatfast.graph.components import component_cuts
from gatfast.kernels import (
    gatv2_backward_source_ranges,
    gatv2_backward_source_rows,
    gatv2_backward_target_blocks,
    num_att_blocks,
)
from gatfast.kernels.activations import ACTIVATIONS
from gatfast.kernels.prefetch import WINDOW
from gatfast.kernels.structure import component_cuts as cuts_kernel
from gatfast.layers import passes
from gatfast.layers.passes import NO_CUTS


def _batch(rng, sizes, degree=3, loops=True):
    """Random graphs of ``sizes`` nodes batched in order (a graph of one node and none of its edges too)."""
    graphs = []
    for n in sizes:
        m = n * degree if n > 1 else 0
        dst = rng.integers(0, n, m)
        src = rng.integers(0, n, m)  # loops and duplicate edges included
        graphs.append(CSRGraph.from_edge_index(np.stack([src, dst]), n))
    g, _ = batch_graphs(graphs)
    return g.with_self_loops() if loops else g


def _naive_cuts(g):
    n = g.num_nodes
    targets = np.repeat(np.arange(n), np.diff(g.indptr))
    lo, hi = np.minimum(targets, g.indices), np.maximum(targets, g.indices)
    return np.array([not ((lo < r) & (hi >= r)).any() for r in range(n + 1)], np.uint8)


@pytest.mark.parametrize("seed", range(4))
def test_component_cuts_against_every_edge(seed):
    rng = np.random.default_rng(seed)
    g = _batch(rng, rng.integers(1, 12, 15), loops=seed % 2 == 0)
    if seed == 3:  # a few edges between graphs join them into bigger runs
        extra = rng.integers(0, g.num_nodes, (2, 4))
        g = CSRGraph.from_edge_index(np.concatenate([g.to_edge_index(), extra], axis=1), g.num_nodes)
    cuts, longest = component_cuts(g)
    want = _naive_cuts(g)
    assert cuts.tobytes() == want.tobytes()
    at = np.flatnonzero(want)
    assert cuts[0] == cuts[-1] == 1 and longest == np.diff(at).max()
    assert not cuts.flags.writeable and component_cuts(g) is component_cuts(g)  # cached with the graph


def test_component_cuts_of_a_bipartite_graph_and_of_one_without_edges():
    assert component_cuts(CSRGraph([0, 1, 2], [0, 2], num_src=3)) is None
    cuts, longest = component_cuts(CSRGraph([0, 0, 0, 0], []))
    assert cuts.tolist() == [1, 1, 1, 1] and longest == 1


def _problem(seed, heads, channels, dtype, dropout):
    rng = np.random.default_rng(seed)
    g = _batch(rng, rng.integers(1, 9, 12))
    n = g.num_nodes
    xl, xr, grad, att, alpha, edge_scale = _inputs(seed, n, g.nnz, heads, channels, dtype, dropout)
    src_indptr, src_edges = g.source_order()
    src_targets = np.ascontiguousarray(g.targets()[src_edges])
    return g, (xl, xr, grad, att, alpha, edge_scale), (src_indptr, src_edges, src_targets)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("heads", "channels"),
    [(1, 1), (1, 7), (1, 8), (2, 8), (2, 9), (1, 16), (4, 16), (3, 17), (1, 32), (2, 33)],
)  # (2, 8) and (4, 16): several heads of whole vectors, walked as one run (ir_parts.for_heads)
@pytest.mark.parametrize("activation", ["leaky_relu", "softplus"])
@pytest.mark.parametrize("dropout", [False, True])
def test_target_pass_sums_the_sources_of_its_closed_rows_to_the_bit(
    dtype, heads, channels, activation, dropout
):
    """For every range of blocks (a chunk of any thread count), the target pass with cuts returns the widest
    range of its rows closed under the edges, writes ``Q_j`` there with the source pass's bits (vector sums,
    and the plain loops on strided arrays) and no other row of ``q_out``; its other outputs are those of the
    pass without cuts."""
    g, (xl, xr, grad, att, alpha, edge_scale), (src_indptr, src_edges, src_targets) = _problem(
        channels * 10 + heads, heads, channels, dtype, dropout
    )
    n, nnz = g.num_nodes, g.nnz
    cuts = component_cuts(g)[0]
    kind, slope = ACTIVATIONS[activation], dtype(0.2)
    head = (g.indptr, g.indices, xl, xr, att, slope, kind, WINDOW, edge_scale, alpha, grad)

    def target(b0, b1, cuts, q_out, make):
        outputs = [make((nnz, heads)), make((nnz, heads)), make((n, heads, channels))]
        outputs += [make((blocks, heads, channels)), make((blocks, heads, channels))]
        done = gatv2_backward_target_blocks(b0, b1, *head, *outputs, None, None, cuts, q_out)
        return done, [np.ascontiguousarray(a) for a in outputs]

    blocks = num_att_blocks(n, 8)  # blocks of a few rows, so chunks end inside graphs

    def zeros(shape):
        return np.zeros(shape, dtype)

    plain = target(0, blocks, NO_CUTS, np.full((n, heads, channels), np.nan, dtype), zeros)[1]
    want = np.full((n, heads, channels), np.nan, dtype)
    gatv2_backward_source_rows(0, n, src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, None,
                               edge_scale, alpha, plain[1], grad, want)  # fmt: skip
    size = -(-n // blocks)
    for make in (zeros, lambda shape: _strided(shape, dtype)):
        for b0, b1 in [(0, blocks), (0, 1), (1, 3), (2, blocks), (3, 4)]:
            q_out = make((n, heads, channels))
            q_out[...] = 7.0
            (c0, c1), outputs = target(b0, b1, cuts, q_out, make)
            r0, r1 = b0 * size, min(n, b1 * size)
            closed = [r for r in range(r0, r1 + 1) if cuts[r]]
            assert (c0, c1) == ((closed[0], closed[-1]) if len(closed) > 1 else (r0, r0))
            q = np.ascontiguousarray(q_out)
            assert q[c0:c1].tobytes() == want[c0:c1].tobytes(), (b0, b1)
            assert (q[:c0] == 7).all() and (q[c1:] == 7).all()
            rows = slice(g.indptr[r0], g.indptr[r1])
            for name, got, expected in zip(("upstream", "delta"), outputs, plain):
                assert got[rows].tobytes() == expected[rows].tobytes(), name
            assert outputs[2][r0:r1].tobytes() == plain[2][r0:r1].tobytes()  # P_i
            assert outputs[3][b0:b1].tobytes() == plain[3][b0:b1].tobytes()  # ∂a partials


def test_source_ranges_run_the_source_pass_on_each_range_only():
    dtype = np.float32
    g, (xl, xr, grad, att, alpha, edge_scale), src = _problem(3, 2, 9, dtype, True)
    n = g.num_nodes
    delta = np.random.default_rng(1).standard_normal((g.nnz, 2)).astype(dtype)
    args = (*src, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], None, edge_scale, alpha, delta, grad)
    want = np.empty((n, 2, 9), dtype)
    gatv2_backward_source_rows(0, n, *args, want)
    got = np.full((n, 2, 9), 7.0, dtype)
    ranges = np.array([[0, 3], [10, 11], [20, n]], np.int64)
    gatv2_backward_source_ranges(ranges, *args, got)
    inside = np.zeros(n, bool)
    for lo, hi in ranges:
        inside[lo:hi] = True
    assert got[inside].tobytes() == want[inside].tobytes() and (got[~inside] == 7).all()


def test_a_slope_of_another_float_type_gives_the_same_bits():
    """The kernels compute in the arrays' dtype whatever the slope's type: a Python float (float64) slope
    with float32 arrays, on strided outputs (the plain loops) and contiguous ones (the vector sums)."""
    dtype = np.float32
    g, (xl, xr, grad, att, alpha, edge_scale), src = _problem(5, 1, 16, dtype, False)
    n, nnz = g.num_nodes, g.nnz
    leaky = ACTIVATIONS["leaky_relu"]
    cuts = component_cuts(g)[0]
    got = set()
    for slope in (dtype(0.2), 0.2):
        for make in (lambda shape: np.zeros(shape, dtype), lambda shape: _strided(shape, dtype)):
            outputs = [make((nnz, 1)), make((nnz, 1)), make((n, 1, 16)), make((1, 1, 16)), make((1, 1, 16))]
            q_out = make((n, 1, 16))
            head = (g.indptr, g.indices, xl, xr, att, slope, leaky, WINDOW, edge_scale, alpha, grad)
            gatv2_backward_target_blocks(0, 1, *head, *outputs, None, None, cuts, q_out)
            want = make((n, 1, 16))
            delta = np.ascontiguousarray(outputs[1])
            gatv2_backward_source_rows(
                0, n, *src, xl, xr, att, slope, leaky, None, edge_scale, alpha, delta, grad, want
            )
            got |= {np.ascontiguousarray(q_out).tobytes(), np.ascontiguousarray(want).tobytes()}
    assert len(got) == 1


def test_the_target_pass_refuses_cuts_of_another_size():
    dtype = np.float32
    g, (xl, xr, grad, att, alpha, edge_scale), _ = _problem(0, 1, 8, dtype, False)
    n, nnz = g.num_nodes, g.nnz
    outputs = [np.empty((nnz, 1), dtype), np.empty((nnz, 1), dtype), np.empty((n, 1, 8), dtype),
               np.empty((1, 1, 8), dtype), np.empty((1, 1, 8), dtype)]  # fmt: skip
    head = (
        g.indptr,
        g.indices,
        xl,
        xr,
        att,
        dtype(0.2),
        ACTIVATIONS["leaky_relu"],
        WINDOW,
        edge_scale,
        alpha,
        grad,
    )
    with pytest.raises(ValueError, match="cuts"):
        gatv2_backward_target_blocks(0, 1, *head, *outputs, None, None, np.ones(n, np.uint8), outputs[2])
    with pytest.raises(ValueError, match="q_out"):
        gatv2_backward_target_blocks(
            0, 1, *head, *outputs, None, None, np.ones(n + 1, np.uint8), outputs[2][:2]
        )
    wide = (g.indptr, g.indices, np.concatenate([xl, xl]), *head[3:])  # more sources than rows: not square
    with pytest.raises(ValueError, match="square"):
        gatv2_backward_target_blocks(0, 1, *wide, *outputs, None, None, np.ones(n + 1, np.uint8), outputs[2])
    with pytest.raises(ValueError, match="square"):
        cuts_kernel(np.array([0, 1], np.int64), np.array([3], np.int64))


def _grads(layer, g, x, R, threads, fused, monkeypatch):
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(passes, "source_sums_cuts", lambda *a: NO_CUTS)
        numba.set_num_threads(threads)
        try:
            out, cache = layer.forward(g, x, training=True, rng=np.random.default_rng(5))
            return out, layer.backward(cache, R)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize(("heads", "channels", "dtype"), [(1, 32, np.float32), (3, 17, np.float64)])
def test_the_layer_gives_the_same_bits_with_the_source_sums_at_any_thread_count(
    monkeypatch, heads, channels, dtype
):
    """A batch big enough for the thread team: chunks that end inside graphs leave those graphs' sources to
    the source pass (``passes.source_pass_left_over``, checked to run), and every gradient is the bits of
    the layer without the source sums, on one thread and on two."""
    rng = np.random.default_rng(heads)
    g = _batch(rng, rng.integers(6, 25, 900), degree=4)
    assert component_cuts(g)[1] <= passes.SOURCE_SUMS_MAX_RUN
    layer = GATv2Layer(5, channels, heads=heads, dropout=0.2, dtype=dtype, seed=2)
    x = rng.standard_normal((g.num_nodes, 5)).astype(dtype)
    R = rng.standard_normal((g.num_nodes, heads * channels)).astype(dtype)
    left = []
    original = passes.gatv2_backward_source_ranges
    monkeypatch.setattr(
        passes, "gatv2_backward_source_ranges", lambda r, *a: left.append(r) or original(r, *a)
    )
    out, want = _grads(layer, g, x, R, 1, False, monkeypatch)
    for threads in (1, 2) if numba.config.NUMBA_NUM_THREADS > 1 else (1,):
        got_out, got = _grads(layer, g, x, R, threads, True, monkeypatch)
        assert got_out.tobytes() == out.tobytes()
        for k, v in want.items():
            assert got[k].tobytes() == v.tobytes(), (threads, k)
    if numba.config.NUMBA_NUM_THREADS > 1:
        assert left and all(r.shape[1] == 2 and r.shape[0] >= 1 for r in left)  # chunks cut some graphs


def test_graphs_it_does_not_fit_keep_the_source_pass():
    rng = np.random.default_rng(0)
    one_graph = CSRGraph.from_edge_index(rng.integers(0, 200, (2, 800)), 200)  # one run of 200 rows
    assert passes.source_sums_cuts(one_graph, False, False) is NO_CUTS
    batch = _batch(rng, [5, 6, 7])
    assert passes.source_sums_cuts(batch, False, False).size == batch.num_nodes + 1
    assert passes.source_sums_cuts(batch, True, False) is NO_CUTS  # edge features
    assert passes.source_sums_cuts(batch, False, True) is NO_CUTS  # source records
    block = CSRGraph([0, 1, 2], [0, 2], num_src=3)
    assert passes.source_sums_cuts(block, False, False) is NO_CUTS
