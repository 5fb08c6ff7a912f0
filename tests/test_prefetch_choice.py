"""The backward source pass with and without its prefetches (and, with them, the source records): the same
bits, and the choice between them."""

import numpy as np
import pytest

import gatfast.layers.passes as passes
from gatfast import CSRGraph, GATv2Layer
from gatfast.kernels.prefetch import (
    LOCAL_SPAN_BYTES,
    PREFETCH_DISTANCE,
    SMALL_GATHER_BYTES,
    WINDOW,
    WINDOW_AHEAD_BYTES,
    source_pass_ahead,
    window_rows,
)


def random_graph(n, edges, seed):
    rng = np.random.default_rng(seed)
    return CSRGraph.from_edge_index(rng.integers(0, n, (2, edges)), n)


def batch_of_small_graphs(graphs, size, seed):
    rng = np.random.default_rng(seed)
    offsets = np.repeat(np.arange(graphs) * size, size * 3)
    edges = rng.integers(0, size, (2, graphs * size * 3)) + offsets
    return CSRGraph.from_edge_index(edges, graphs * size)


def test_mean_edge_span_tells_local_graphs_from_random_ones():
    g = CSRGraph.from_edge_index(np.array([[0, 3, 1], [2, 0, 1]]), 4)  # edges 0->2, 3->0, 1->1
    assert g.mean_edge_span() == pytest.approx((2 + 3 + 0) / 3)
    assert CSRGraph.from_edge_index(np.zeros((2, 0), np.int64), 3).mean_edge_span() == 0.0
    assert batch_of_small_graphs(500, 16, 0).mean_edge_span() < 16
    assert random_graph(5000, 20000, 0).mean_edge_span() > 1000


def test_mean_edge_span_of_a_big_graph_is_its_spread_edges_mean():
    from gatfast.kernels.structure import SPAN_SAMPLE_EDGES

    g = random_graph(5000, 3 * SPAN_SAMPLE_EDGES + 7, 8)
    span = np.abs(g.indices - g.targets())
    picked = np.arange(SPAN_SAMPLE_EDGES) * g.nnz // SPAN_SAMPLE_EDGES
    assert g.mean_edge_span() == pytest.approx(span[picked].mean(), rel=1e-12)
    assert g.mean_edge_span() != pytest.approx(span.mean(), rel=1e-6)  # not every edge's
    small = random_graph(5000, SPAN_SAMPLE_EDGES, 9)  # every edge
    assert small.mean_edge_span() == pytest.approx(np.abs(small.indices - small.targets()).mean(), rel=1e-12)
    # a hub: the one row that holds the edges, far from its sources, among 100,000 rows without any
    hub = CSRGraph.from_edge_index(np.stack([np.arange(1, 50_001), np.zeros(50_000, np.int64)]), 100_000)
    assert hub.mean_edge_span() == pytest.approx(25_000.5, rel=0.01)


def test_source_pass_ahead_thresholds():
    big, far = SMALL_GATHER_BYTES + 1, LOCAL_SPAN_BYTES + 1
    assert source_pass_ahead(big, lambda: far) == PREFETCH_DISTANCE
    assert source_pass_ahead(SMALL_GATHER_BYTES, lambda: far) is None
    assert source_pass_ahead(big, lambda: LOCAL_SPAN_BYTES) == WINDOW  # a batch of small graphs
    assert source_pass_ahead(SMALL_GATHER_BYTES, lambda: 1 / 0) is None  # the span's pass is skipped there


def test_the_window_is_about_its_bytes_of_rows_ahead():
    assert window_rows(128) == WINDOW_AHEAD_BYTES // 128
    assert window_rows(WINDOW_AHEAD_BYTES) == 4  # wide rows: never fewer than 4 ahead


def test_small_batches_get_the_window_and_random_graphs_the_edge_prefetch():
    """The layer's choice on real graphs: gathers beyond SMALL_GATHER_BYTES, rows local or not."""
    layer = GATv2Layer(4, 64, seed=0)
    chosen = []
    for g in (batch_of_small_graphs(2000, 16, 5), random_graph(32000, 96000, 6)):
        cache = layer.forward(g, np.ones((g.num_nodes, 4), np.float32))[1]
        g_heads = np.zeros((g.num_nodes, 1, 64), np.float32)
        args = (cache.xr, g_heads, cache.alpha, cache.edge_scale, cache.inputs.u)
        chosen.append(passes.source_prefetch_distance(g, *args))
        chosen.append(passes.forward_prefetch(g, cache.xl))
    assert chosen == [WINDOW, WINDOW, PREFETCH_DISTANCE, PREFETCH_DISTANCE]


@pytest.mark.parametrize("edge_dim", [None, 3])
@pytest.mark.parametrize("heads, out_features", [(1, 32), (2, 9), (4, 8)])
@pytest.mark.parametrize(
    "make_graph", [lambda: random_graph(3000, 30000, 1), lambda: batch_of_small_graphs(200, 12, 2)]
)
def test_the_passes_that_gather_xl_give_the_same_bits_with_either_prefetch(
    monkeypatch, edge_dim, heads, out_features, make_graph
):
    """Every pass with the window and with the edge prefetch (the source pass's records need big rows, so
    PREFETCH_DISTANCE here is its edge-prefetching loop). A prefetch never changes a bit: this checks that
    each path compiles, runs and keeps its bounds; what a test can see of the choice is the tests above."""
    g = make_graph()
    rng = np.random.default_rng(7)
    layer = GATv2Layer(6, out_features, heads=heads, edge_dim=edge_dim, seed=0)
    x = rng.standard_normal((g.num_nodes, 6)).astype(np.float32)
    attr = None if edge_dim is None else rng.standard_normal((g.nnz, edge_dim)).astype(np.float32)
    _same_bits_with_either_prefetch(monkeypatch, layer, g, x, attr)


def _same_bits_with_either_prefetch(monkeypatch, layer, g, x, attr):
    outs, grads = {}, {}
    for ahead in (WINDOW, PREFETCH_DISTANCE):
        monkeypatch.setattr(passes, "forward_prefetch", lambda g, xl, a=ahead: a)
        monkeypatch.setattr(passes, "source_pass_ahead", lambda gathered, span, a=ahead: a)
        outs[ahead], cache = layer.forward(g, x, attr)
        grads[ahead] = layer.backward(cache, np.cos(outs[ahead]))
    assert outs[WINDOW].tobytes() == outs[PREFETCH_DISTANCE].tobytes()
    for name, value in grads[WINDOW].items():
        pairs = (
            zip(value, grads[PREFETCH_DISTANCE][name])
            if isinstance(value, tuple)
            else [(value, grads[PREFETCH_DISTANCE][name])]
        )
        for got, want in pairs:  # a bipartite layer's "x" is a pair
            assert got.tobytes() == want.tobytes(), name
    assert np.abs(outs[WINDOW]).sum() > 0 and np.abs(grads[WINDOW]["att"]).sum() > 0


@pytest.mark.parametrize("n_src, n_dst", [(300, 2000), (2000, 300)])  # the windows' bounds on either side
def test_a_bipartite_layer_gives_the_same_bits_with_either_prefetch(monkeypatch, n_src, n_dst):
    rng = np.random.default_rng(11)
    edges = np.stack([rng.integers(0, n_src, 8 * n_dst), np.repeat(np.arange(n_dst), 8)])
    g = CSRGraph.from_edge_index(edges, size=(n_src, n_dst))
    layer = GATv2Layer((6, 5), 16, heads=2, seed=0)
    x = (
        rng.standard_normal((n_src, 6)).astype(np.float32),
        rng.standard_normal((n_dst, 5)).astype(np.float32),
    )
    _same_bits_with_either_prefetch(monkeypatch, layer, g, x, None)


@pytest.mark.parametrize(
    "dtype, kw",
    [
        (np.float32, dict(heads=2, out_features=9)),
        (np.float64, dict(heads=1, out_features=33, dropout=0.3)),
        (np.float32, dict(heads=1, out_features=64)),  # large's shape: one record of 16 bytes
        (np.float32, dict(heads=8, out_features=8)),  # every head's vectors in one walk
        (np.float64, dict(heads=4, out_features=16, dropout=0.5)),
        (np.float32, dict(heads=3, out_features=7, edge_dim=4, dropout=0.2)),
        # vectors and a tail: the signs' bytes (vectors) and bits (the tail)
        (np.float32, dict(heads=3, out_features=12, edge_dim=4)),
        (np.float64, dict(heads=2, out_features=17, edge_dim=2, dropout=0.3)),
        (np.float32, dict(heads=1, out_features=16, attention_activation="softplus")),
    ],
)
@pytest.mark.parametrize(
    "make_graph", [lambda: random_graph(3000, 30000, 1), lambda: batch_of_small_graphs(200, 12, 2)]
)
def test_both_loops_of_the_source_pass_give_the_same_bits(monkeypatch, dtype, kw, make_graph):
    g = make_graph()
    rng = np.random.default_rng(3)
    layer = GATv2Layer(8, dtype=dtype, seed=0, **kw)
    x = rng.standard_normal((g.num_nodes, 8)).astype(dtype)
    edge_attr = rng.standard_normal((g.nnz, kw["edge_dim"])).astype(dtype) if "edge_dim" in kw else None
    monkeypatch.setattr(passes, "RECORD_MIN_ROW_BYTES", 0)  # the records wherever the pass prefetches
    grads, asked, records_read = {}, [], []
    record_pass = passes.gatv2_backward_source_record_rows

    def spy(*args):
        records_read.append(True)
        return record_pass(*args)

    monkeypatch.setattr(passes, "gatv2_backward_source_record_rows", spy)
    for ahead in (None, WINDOW, PREFETCH_DISTANCE):
        records_read.clear()
        monkeypatch.setattr(passes, "source_pass_ahead", lambda gathered, span, a=ahead: asked.append(a) or a)
        out, cache = layer.forward(g, x, edge_attr, training=True, rng=np.random.default_rng(4))
        grads[ahead] = layer.backward(cache, np.ones_like(out))
        # with LeakyReLU the edge-prefetching path reads the target pass's records (kernels/records.py)
        assert bool(records_read) == ("attention_activation" not in kw and ahead == PREFETCH_DISTANCE)
    for name, value in grads[None].items():
        for ahead in (WINDOW, PREFETCH_DISTANCE):  # bits, -0 and NaNs included
            assert value.tobytes() == grads[ahead][name].tobytes(), (name, ahead)
    assert asked == [None, WINDOW, PREFETCH_DISTANCE]  # each backward ran the big-graph path's source pass
    assert np.abs(grads[None]["x"]).sum() > 0


def test_the_records_need_a_prefetching_leaky_pass_over_big_rows():
    from gatfast.kernels import ACTIVATIONS
    from gatfast.kernels.records import RECORD_MIN_ROW_BYTES

    leaky, softplus = ACTIVATIONS["leaky_relu"], ACTIVATIONS["softplus"]
    assert passes.uses_source_records(leaky, PREFETCH_DISTANCE, RECORD_MIN_ROW_BYTES + 1)
    assert not passes.uses_source_records(leaky, PREFETCH_DISTANCE, RECORD_MIN_ROW_BYTES)  # rows in cache
    assert not passes.uses_source_records(leaky, None, RECORD_MIN_ROW_BYTES + 1)  # gathers in cache
    assert not passes.uses_source_records(leaky, WINDOW, RECORD_MIN_ROW_BYTES + 1)  # a batch of small graphs
    assert not passes.uses_source_records(softplus, PREFETCH_DISTANCE, RECORD_MIN_ROW_BYTES + 1)
