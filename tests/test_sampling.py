"""Neighbour sampling: against the plain-Python sampler, structure, determinism and bad input."""

import naive
import numba
import numpy as np
import pytest

from gatfast import CSRGraph, _runtime
from gatfast._random import SAMPLE, RandomKeys
from gatfast.sampling import NeighborSampler, sample_blocks


def skewed_graph(seed=0, n=400):
    """Degrees from 0 to ~150 (a few hubs), duplicates and self loops included."""
    rng = np.random.default_rng(seed)
    deg = np.minimum(rng.zipf(1.6, n), 150)
    deg[:5] = 0
    dst = np.repeat(np.arange(n), deg)
    src = rng.integers(0, n, dst.size)
    return CSRGraph.from_edge_index(np.stack([src, dst]), n)


# degrees up to 150: rows of <= 64 in-edges keep picks in a bit set, longer ones in a list
@pytest.mark.parametrize("fanouts", [[3], [5, 2], [2, 4, 3], [-1, 5], [25, 25], [63], [100, 1]])
def test_same_blocks_as_the_plain_python_sampler(fanouts):
    g = skewed_graph()
    keys = RandomKeys(7, 2, 5)
    seeds = np.random.default_rng(1).choice(g.num_nodes, 40, replace=False)
    batch = sample_blocks(g, seeds, fanouts, keys)
    want = naive.sample_blocks(g, seeds, fanouts, [keys.child(SAMPLE, l).key for l in range(len(fanouts))])
    assert len(batch.blocks) == len(want)
    for block, (src_ids, rows, edges) in zip(batch.blocks, want):
        assert block.src_ids.tolist() == src_ids
        assert block.edge_ids.tolist() == edges
        got_rows = [block.graph.indices[block.graph.indptr[r]:block.graph.indptr[r + 1]].tolist()
                    for r in range(block.graph.num_dst)]
        assert got_rows == rows


def test_block_structure():
    g = skewed_graph(1)
    seeds = np.arange(10, 60)
    batch = sample_blocks(g, seeds, [4, 6], RandomKeys(0))
    assert batch.blocks[-1].dst_ids.tolist() == seeds.tolist()
    for k, block in enumerate(batch.blocks):
        bg = block.graph
        n_dst = bg.num_dst
        # targets first among the sources, all distinct
        assert np.unique(block.src_ids).size == block.src_ids.size
        if k + 1 < len(batch.blocks):
            assert np.array_equal(block.dst_ids, batch.blocks[k + 1].src_ids)
        # every sampled edge exists: same source and target in the full graph
        targets = block.dst_ids[bg.targets()]
        np.testing.assert_array_equal(g.indices[block.edge_ids], block.src_ids[bg.indices])
        np.testing.assert_array_equal(g.targets()[block.edge_ids], targets)
        # a target keeps all its in-edges when its degree is at most the fanout, else exactly fanout
        fanout = [4, 6][k]
        deg = g.in_degree()[block.dst_ids]
        np.testing.assert_array_equal(bg.in_degree(), np.minimum(deg, fanout))
        for r in range(n_dst):
            picks = block.edge_ids[bg.indptr[r]:bg.indptr[r + 1]]
            assert np.unique(picks).size == picks.size  # without replacement


def test_a_nodes_sample_does_not_depend_on_its_batch():
    g = skewed_graph(2)
    keys = RandomKeys(3, 0, 0)
    a = sample_blocks(g, np.array([20, 21, 22]), [5], keys).blocks[0]
    b = sample_blocks(g, np.array([99, 21]), [5], keys).blocks[0]
    picks_a = a.edge_ids[a.graph.indptr[1]:a.graph.indptr[2]]
    picks_b = b.edge_ids[b.graph.indptr[1]:b.graph.indptr[2]]
    np.testing.assert_array_equal(picks_a, picks_b)


def test_keys_depend_on_every_context_value_and_its_order():
    """Epoch 1 batch 2 must not sample (or drop) like epoch 2 batch 1, nor a repeated value cancel out.

    The sampler is checked against keys derived by gatfast itself, so only a direct check of
    the derivation notices keys that collide.
    """
    contexts = [(), (0,), (1,), (2,), (0, 0), (1, 1), (1, 2), (2, 1), (1, 2, 3), (3, 2, 1), (1, 2, 3, 3)]
    keys = [RandomKeys(7, *c).key for c in contexts]
    assert len(set(keys)) == len(keys)
    base = RandomKeys(7, 1, 2)
    children = [base.child(*c).key for c in [(SAMPLE, 0), (0, SAMPLE), (SAMPLE, 1), (5, 5), (SAMPLE,)]]
    assert len(set(children + [base.key])) == len(children) + 1


def test_picks_are_uniform():
    # one node with 20 in-edges, fanout 5: each edge is picked with probability 1/4
    g = CSRGraph(np.array([0, 20] + [20] * 20), np.arange(1, 21), 21)
    counts = np.zeros(20)
    trials = 4000
    for t in range(trials):
        block = sample_blocks(g, np.array([0]), [5], RandomKeys(t)).blocks[0]
        counts[block.edge_ids] += 1
    expected = trials * 5 / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 45  # 19 degrees of freedom: p < 1e-3 above ~43.8


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")
def test_independent_of_threads_parallel_driver_and_prefetch(monkeypatch):
    g = skewed_graph(3, n=3000)
    seeds = np.arange(0, 3000, 2)
    results = []
    for threads, serial_below, prefetch in ((1, 1 << 60, False), (2, 0, True), (2, 0, False)):
        monkeypatch.setattr(_runtime, "SERIAL_WORK", serial_below)
        before = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            sampler = NeighborSampler(g, [10, 10], seeds, 256, seed=4, prefetch=prefetch)
            # picking split among threads, relabelling in parts as they arrive: the same blocks
            results.append([[np.concatenate([b.edge_ids, b.src_ids, b.graph.indices]) for b in batch.blocks]
                            for batch in sampler.epoch(3)])
        finally:
            numba.set_num_threads(before)
    for other in results[1:]:
        assert len(other) == len(results[0])
        for x, y in zip(results[0], other):
            assert all(np.array_equal(a, b) for a, b in zip(x, y))


def test_epochs_shuffle_and_cover_every_seed_once():
    g = skewed_graph(4)
    seeds = np.arange(100, 300)
    sampler = NeighborSampler(g, [3], seeds, 64, seed=1)
    assert len(sampler) == 4
    orders = []
    for epoch in (0, 1):
        got = np.concatenate([b.seeds for b in sampler.epoch(epoch)])
        assert sorted(got.tolist()) == seeds.tolist()
        orders.append(got)
    assert not np.array_equal(orders[0], orders[1])
    unshuffled = NeighborSampler(g, [3], seeds, 64, shuffle=False)
    assert np.array_equal(np.concatenate([b.seeds for b in unshuffled.epoch(0)]), seeds)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(fanouts=[]), TypeError, "fanouts must be a non-empty sequence"),
        (dict(fanouts=[10, 0]), ValueError, r"fanouts\[1\] must be >= 1"),
        (dict(fanouts=[2.5]), TypeError, r"fanouts\[0\] must be an int"),
        (dict(fanouts="10,10"), TypeError, "fanouts must be a non-empty sequence"),
        (dict(batch_size=0), ValueError, "batch_size must be >= 1"),
        (dict(seeds=np.array([1, 1])), ValueError, "distinct"),
        (dict(seeds=np.array([-1])), ValueError, r"seeds must be node ids in \[0, 400\)"),
        (dict(seeds=np.array([1.5])), TypeError, "seeds must be a 1-D array of node ids"),
        (dict(seeds=np.zeros(0, np.int64)), ValueError, "at least one node"),
    ],
)
def test_bad_input_names_the_argument(kwargs, error, match):
    args = dict(fanouts=[3, 3], seeds=np.arange(10), batch_size=4)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        NeighborSampler(skewed_graph(), args["fanouts"], args["seeds"], args["batch_size"])


def test_bipartite_graphs_are_refused():
    block = CSRGraph.from_edge_index(np.array([[0, 1], [0, 0]]), size=(3, 2))
    with pytest.raises(ValueError, match="graph must be square"):
        NeighborSampler(block, [2], np.arange(2), 1)


def test_sampled_training_steps_leave_no_reference_cycles(cyclic_garbage):
    """Each step's blocks are freed when the step ends, not when the cyclic collector next runs."""
    import gc

    from gatfast.data import make_csbm
    from gatfast.training import TrainConfig, loop
    from gatfast.training.run import _optimizer, build_model

    ds = make_csbm(num_nodes=600, num_features=8, avg_degree=4, seed=0)
    config = TrainConfig.preset("gat", fanout=(4, 4), batch_size=32, epochs=1, seed=0, quiet=True)
    model = build_model(ds, config, config.seed)
    opt = _optimizer(model, config)
    sampler, outputs = loop._sampled_setup(model, ds, config)
    plans, batches = loop.epoch_plans(ds, config, None, 1), sampler.epoch(1)

    def steps(count):
        for plan, _ in zip(plans, range(count)):
            total = loop.add_shards([loop.shard_gradients(model, ds, plan, plan.items, config, next(batches))])
            loop.apply_step(opt, total, config, 1)

    steps(2)
    gc.collect()
    gc.disable()
    try:
        steps(4)
        outputs(model, ds)
        assert not cyclic_garbage()
    finally:
        gc.enable()


@pytest.mark.parametrize("chunk", [37, 10_000])
def test_layerwise_evaluation_equals_the_whole_graph_forward(chunk):
    """Evaluation after sampled training: layer by layer over chunks of nodes, every in-edge, = model.output."""
    from gatfast.data import make_csbm
    from gatfast.models import GATv2Network
    from gatfast.training.inference import layerwise_output

    ds = make_csbm(num_nodes=400, num_features=7, avg_degree=4, seed=3, dtype=np.float64)
    net = GATv2Network(7, 8, 2, num_layers=3, heads=2, seed=1, dtype=np.float64)
    whole = net.output(ds.graph, ds.x)
    chunked = layerwise_output(net, ds, chunk=chunk)
    np.testing.assert_allclose(chunked, whole, rtol=1e-11, atol=1e-13)


def test_relabel_in_parts_with_a_table_of_either_width_gives_first_use_order():
    # int32 slots for every batch that fits them, int64 beyond; the sampler relabels a hop in the
    # parts its threads picked, in order: any split gives what one pass gives
    from gatfast.kernels.sampling import relabel, relabel_into

    rng = np.random.default_rng(4)
    targets = rng.choice(10**12, 300, replace=False)  # ids beyond int32 hash like any other
    sources = np.concatenate([targets[rng.integers(0, 300, 500)], rng.integers(0, 10**12, 700)])
    rng.shuffle(sources)
    src_ids, local = relabel(targets, sources)
    first_use = list(dict.fromkeys(np.concatenate([targets, sources]).tolist()))
    assert src_ids.tolist() == first_use
    np.testing.assert_array_equal(src_ids[local], sources)
    for dtype, cuts in [(np.int32, []), (np.int64, [0, 1, 600, 1199]), (np.int32, [7, 7, 900])]:
        table = np.full(4096, -1, dtype)
        ids, loc = np.empty(1500, np.int64), np.empty(sources.size, np.int64)
        n = relabel_into(table, targets, ids, 0, loc[:0])
        for start, stop in zip([0, *cuts], [*cuts, sources.size]):
            n = relabel_into(table, sources[start:stop], ids, n, loc[start:stop])
        assert ids[:n].tolist() == first_use
        np.testing.assert_array_equal(loc, local)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")
@pytest.mark.parametrize("fanout", [3, 10, -1])
def test_a_hop_split_among_any_number_of_helpers_equals_the_one_call_hop(fanout, monkeypatch):
    # the threaded hop (the caller's short first part, then one part per helper, relabelled in
    # order) against the serial one-call kernel; more helpers than the pool has threads only queue
    from gatfast.kernels.sampling import pick_counts, sample_hop
    from gatfast.sampling.blocks import _pick_and_relabel, _pick_cuts

    g = skewed_graph(6, n=3000)
    targets = np.random.default_rng(1).permutation(3000)[:900].astype(np.int64)
    ptr = pick_counts(g.indptr, targets, fanout)
    key = np.uint64(99)
    one_call = sample_hop(g.indptr, g.indices, targets, fanout, key, False)
    np.testing.assert_array_equal(one_call[0], ptr)
    want = one_call[1:]
    monkeypatch.setattr(_runtime, "SERIAL_WORK", 1)  # every part worth a thread: as many as asked for
    for helpers in (0, 1, 2, 3):
        cuts = _pick_cuts(ptr, helpers, targets.size * 100)
        assert len(cuts) == helpers + 2 and cuts[0] == 0 and cuts[-1] == targets.size
        assert all(a < b for a, b in zip(cuts, cuts[1:]))  # no part empty here
        got = _pick_and_relabel(g, targets, fanout, key, ptr, False, helpers)
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b)
    assert _pick_cuts(ptr, 3, 1) == [0, targets.size]  # too little work: no helper
    assert _pick_cuts(ptr[:1], 3, 10**9) == [0, 0]  # no targets


def test_keyed_permutation_orders_by_draw_then_id():
    # the fast sort must give what sorting by (draw, id) gives, equal draws included
    from gatfast.sampling.blocks import keyed_permutation

    class FixedDraws:
        def __init__(self, draws):
            self.draws = np.asarray(draws, dtype=np.float64)

        def uniform(self, ids, width):
            return self.draws[:, None]

    ids = np.array([9, 4, 7, 1, 3], dtype=np.int64)
    for draws in ([0.5, 0.1, 0.9, 0.3, 0.7], [0.5, 0.1, 0.5, 0.1, 0.5], [0.2] * 5):
        want = ids[np.lexsort((ids, np.asarray(draws)))]
        np.testing.assert_array_equal(keyed_permutation(ids, FixedDraws(draws)), want)
    assert keyed_permutation(ids[:1], FixedDraws([0.3])).tolist() == [9]
    assert keyed_permutation(ids[:0], FixedDraws([])).size == 0
