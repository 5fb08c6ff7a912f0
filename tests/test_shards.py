"""Training steps split into shards: the same result as the whole batch, and sampled training."""

import numpy as np
import pytest

import gatfast
from gatfast import RandomKeys
from gatfast.data import load_dataset, make_csbm
from gatfast.training import TrainConfig, build_model
from gatfast.training.steps import add_shards, epoch_plans, shard_gradients, split_shards

pytestmark = pytest.mark.usefixtures("one_numba_thread")


def _grads_of_plan(model, ds, config, plan, shards):
    results = [shard_gradients(model, ds, plan, items, config) for items in split_shards(plan.items, shards)]
    return add_shards(results)


@pytest.mark.parametrize(
    "dataset, options",
    [
        ("karate", dict()),  # full batch, dropout 0.6 on features and attention
        ("mutag", dict(dropout=0.3, attention_dropout=0.3)),  # graph batches with edge features
        ("csbm", dict(fanout=(4, 3), batch_size=40)),  # sampled blocks, dropout
        ("traffic_scenes", dict(dropout=0.2)),  # per-node regression on many graphs
    ],
)
def test_shards_add_up_to_the_whole_batch(dataset, options):
    """Keyed randomness: any split of a batch sees the same masks and samples, so only rounding differs."""
    ds = load_dataset(dataset, dtype=np.float64, **({"num_nodes": 300} if dataset == "csbm" else {}))
    if dataset == "traffic_scenes":
        ds = gatfast.data.make_traffic_scenes(num_graphs=40, seed=0, dtype=np.float64)
    config = TrainConfig.preset(gatfast.training.preset_for(ds), dtype="float64", **options)
    model = build_model(ds, config, seed=0)
    splits = gatfast.training.splits.default_graph_splits(ds, 0) if hasattr(ds, "graphs") else None
    plan = epoch_plans(ds, config, splits, epoch=3)[0]
    whole = _grads_of_plan(model, ds, config, plan, 1)
    for shards in (2, 3):
        split = _grads_of_plan(model, ds, config, plan, shards)
        assert split.count == whole.count
        assert split.loss_sum == pytest.approx(whole.loss_sum, rel=1e-12)
        for name, g in whole.grads.items():
            np.testing.assert_allclose(split.grads[name], g, rtol=1e-10, atol=1e-13, err_msg=name)


def test_training_with_shards_matches_one_shard():
    ds = make_csbm(num_nodes=200, seed=1, dtype=np.float64)
    runs = [gatfast.train(ds, epochs=4, fanout=(3, 3), batch_size=32, shards=s, dtype="float64", quiet=True)
            for s in (1, 4)]
    for a, b in zip(runs[0].history, runs[1].history):
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    pa, pb = runs[0].model.parameters(), runs[1].model.parameters()
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], rtol=1e-9, atol=1e-12, err_msg=k)


def test_keyed_dropout_depends_on_the_node_not_the_batch():
    keys = RandomKeys(5, 1, 2).child(1, 0)
    from gatfast.models import apply_dropout

    x = np.ones((6, 4))
    a, _ = apply_dropout(x, 0.5, keys, np.array([10, 11, 12, 13, 14, 15]))
    b, _ = apply_dropout(x[:2], 0.5, keys, np.array([13, 11]))
    np.testing.assert_array_equal(b[0], a[3])
    np.testing.assert_array_equal(b[1], a[1])
    assert 0 < np.count_nonzero(a) < a.size


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.5, 0.6, 0.75, 1e-300, 1 - 2.0**-53, 0.3 + 2.0**-54])
def test_keyed_dense_dropout_is_the_formula_of_its_draws(p, dtype):
    """The fused kernel compares integer draw bits with a threshold: the same masks as ``uniform >= p``."""
    from gatfast.models import apply_dropout

    keys = RandomKeys(9, 4).child(2)
    ids = np.array([0, 7, 3, 2**40 + 5, 123456789, 1])
    x = np.random.default_rng(0).standard_normal((ids.size, 33)).astype(dtype)
    y, mask = apply_dropout(x, p, keys, ids)
    expected = ((keys.uniform(ids, 33) >= p) / (1.0 - p)).astype(dtype)
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(y, x * expected)


@pytest.mark.parametrize("loops", ["added", "removed", "as given"])
@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("graph_loops", ["some", "one per node, first", "one per node, last", "two on some"])
def test_keyed_attention_dropout_is_the_formula_of_its_draws(loops, bipartite, graph_loops):
    import naive

    rng = np.random.default_rng(3)
    n_dst, n_src = (30, 45) if bipartite else (40, 40)
    dst = np.repeat(np.arange(n_dst), rng.integers(0, 6, n_dst))
    src = rng.integers(0, n_src, dst.size)
    src[::4] = dst[::4]  # self loops (pairs i -> i), some of them twice
    if graph_loops != "some":  # every target i < min(n_src, n_dst) gets a loop: as many edges as once replaced
        keep = src != dst
        src, dst = src[keep], dst[keep]
        targets = np.arange(min(n_src, n_dst))
        extra = targets[::3] if graph_loops == "two on some" else targets[:0]
        loop = np.concatenate([targets, extra])
        first = graph_loops != "one per node, last"
        src = np.concatenate([loop, src] if first else [src, loop])
        dst = np.concatenate([loop, dst] if first else [dst, loop])
    g = gatfast.CSRGraph.from_edge_index(np.stack([src, dst]), size=(n_src, n_dst))
    options = {"added": {}, "removed": {"root_weight": "theta_r"}, "as given": {"add_self_loops": False}}[loops]
    p, heads = 0.4, 3
    layer = gatfast.GATv2Layer(5, 4, heads=heads, dropout=p, seed=0, dtype=np.float64, **options)
    keys = RandomKeys(2, 7).for_graph(rng.permutation(10 * g.nnz)[: g.nnz], rng.permutation(10 * n_dst)[:n_dst])
    x = rng.standard_normal((n_src, 5))
    _, cache = layer.forward(g, x, training=True, rng=keys)
    draws = naive.keyed_attention_draws(keys, g, cache.graph, heads, loops_removed=loops == "removed")
    np.testing.assert_array_equal(cache.edge_scale, (draws >= p) / (1 - p))


def test_keep_threshold_splits_the_draw_bits_where_the_float_comparison_does():
    from gatfast.kernels.random import keep_threshold

    rng = np.random.default_rng(1)
    grid = np.arange(1, 2**20) * 2.0**-20  # points where a draw equals p exactly
    ps = np.concatenate([[0.0, 1.0, 5e-324, 2.0**-53, 1 - 2.0**-53], grid[::997], rng.random(200),
                         np.nextafter(grid[::1999], 0), np.nextafter(grid[::1999], 1)])
    for p in ps:
        t = int(keep_threshold(p))
        assert 0 <= t <= 2**53
        for bits in (t - 1, t, t + 1):
            if 0 <= bits < 2**53:
                assert (bits * 2.0**-53 >= p) == (bits >= t), (p, bits)


def test_sampled_training_learns_cora():
    result = gatfast.train("cora", fanout=(10, 10), batch_size=256, epochs=40, patience=None, quiet=True, seed=0)
    assert result.metrics["val_accuracy"] > 0.6 and result.metrics["test_accuracy"] > 0.6


def test_fanout_errors_name_the_option():
    with pytest.raises(ValueError, match="fanout must have one entry per layer"):
        gatfast.train("karate", fanout=(5,), epochs=1, quiet=True)
    with pytest.raises(ValueError, match="fanout .*node datasets"):
        gatfast.train("mutag", fanout=(5, 5, 5), epochs=1, quiet=True)
    with pytest.raises(ValueError, match="fanout entries must be >= 1"):
        TrainConfig(fanout=(5, 0))
    assert TrainConfig(fanout="10,-1").fanout == (10, -1)
