"""Edge features and blocks all the way up: datasets, the network, training, checkpoints, the CLI."""

import json

import naive
import numpy as np
import pytest

import gatfast
from gatfast import CSRGraph, GATv2Network
from gatfast.cli import main
from gatfast.data import load_dataset, make_traffic_scenes
from gatfast.training import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_numba_thread")


# ---------------------------------------------------------------------- datasets
def test_mutag_bond_types_are_one_hot_edge_features_in_csr_order():
    ds = load_dataset("mutag")
    assert ds.edge_dim == 4 and len(ds.edge_attrs) == len(ds.graphs)
    raw = np.load(gatfast.data.DATA_DIR / "mutag.npz")
    labels, ei, gi = raw["edge_labels"], raw["edge_index"], raw["graph_indicator"]
    start = np.searchsorted(gi, np.arange(len(ds.graphs)))
    for g in (0, 7, 100):
        graph, attr = ds.graphs[g], ds.edge_attrs[g]
        np.testing.assert_array_equal(attr.sum(axis=1), 1.0)  # one-hot
        mine = gi[ei[1]] == g
        # edge (src, dst) of the file -> its label; every CSR edge must carry its own label
        want = {(int(s), int(d)): int(lbl) for s, d, lbl in zip(ei[0, mine], ei[1, mine], labels[mine])}
        got = {(int(s) + start[g], int(t) + start[g]): int(np.argmax(a))
               for s, t, a in zip(graph.indices, graph.targets(), attr)}
        assert got == want
    assert load_dataset("mutag", edge_features=False).edge_dim is None


def test_traffic_scene_edges_carry_distance_and_relative_velocity():
    ds = make_traffic_scenes(num_graphs=4, seed=3)
    plain = gatfast.data.without_edge_features(ds)
    assert ds.edge_dim == 3 and plain.edge_dim is None
    for graph, x, attr in zip(ds.graphs, ds.xs, ds.edge_attrs):
        pos, vel = x[:, :2], x[:, 2:4]
        src, dst = graph.indices, graph.targets()
        np.testing.assert_allclose(attr[:, 0], np.linalg.norm(pos[dst] - pos[src], axis=1), rtol=1e-6)
        np.testing.assert_allclose(attr[:, 1:], vel[src] - vel[dst], rtol=1e-6)
    # the node data do not depend on the edge features (same random stream as before)
    old = make_traffic_scenes(num_graphs=4, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(old.xs, ds.xs))


def test_batches_carry_edge_attributes_in_csr_order():
    ds = load_dataset("mutag")
    batch = ds.batch([3, 1, 4])
    graph, x, ptr, y = batch  # still unpacks as four
    assert batch.edge_attr.shape == (graph.nnz, 4)
    np.testing.assert_array_equal(batch.edge_attr, np.concatenate([ds.edge_attrs[i] for i in (3, 1, 4)]))


# ---------------------------------------------------------------------- the network
def _fd(loss, arr, eps=1e-6):
    g = np.zeros_like(arr)
    for idx in np.ndindex(arr.shape):
        old = arr[idx]
        arr[idx] = old + eps
        lp = loss()
        arr[idx] = old - eps
        lm = loss()
        arr[idx] = old
        g[idx] = (lp - lm) / (2 * eps)
    return g


def test_network_with_edge_features_matches_finite_differences():
    rng = np.random.default_rng(0)
    ds = make_traffic_scenes(num_graphs=3, seed=1, dtype=np.float64)
    graph, x, ptr, y = batch = ds.batch([0, 1, 2])
    attr = batch.edge_attr.copy()
    net = GATv2Network(4, 3, 2, num_layers=2, heads=2, dropout=0.0, attention_dropout=0.0, edge_dim=3,
                       dtype=np.float64, seed=0)
    R = rng.standard_normal((graph.num_nodes, 2))
    out, cache = net.forward(graph, x, edge_attr=attr)
    grads = net.backward(cache, R)
    params = net.parameters()

    def loss():
        return float(np.sum(net.forward(graph, x, edge_attr=attr)[0] * R))

    for name in ("layers.0.W_e", "layers.1.W_e", "layers.0.W_r", "layers.1.att"):
        assert naive.rel_err(grads[name], _fd(loss, params[name])) < 1e-6, name
    assert naive.rel_err(grads["edge_attr"], _fd(loss, attr)) < 1e-6  # summed over both layers


def test_network_over_blocks_matches_finite_differences_and_the_full_graph():
    rng = np.random.default_rng(1)
    # two blocks: 9 sources -> 6 targets -> 4 targets, targets first among sources
    b0 = CSRGraph.from_edge_index(np.array([[6, 7, 8, 0, 1, 2, 3, 4, 5, 8, 7], [0, 0, 1, 2, 3, 3, 4, 5, 5, 4, 2]]),
                                  size=(9, 6))
    b1 = CSRGraph.from_edge_index(np.array([[4, 5, 0, 1, 2, 3, 5], [0, 1, 1, 2, 3, 3, 0]]), size=(6, 4))
    net = GATv2Network(3, 2, 2, num_layers=2, heads=2, dropout=0.0, attention_dropout=0.0, dtype=np.float64,
                       seed=0)
    x = rng.standard_normal((9, 3))
    R = rng.standard_normal((4, 2))
    out, cache = net.forward([b0, b1], x)
    assert out.shape == (4, 2)
    grads = net.backward(cache, R)

    def loss():
        return float(np.sum(net.forward([b0, b1], x)[0] * R))

    assert naive.rel_err(grads["x"], _fd(loss, x)) < 1e-6
    for name in ("layers.0.W_l", "layers.1.W_r", "layers.0.att"):
        assert naive.rel_err(grads[name], _fd(loss, net.parameters()[name])) < 1e-6, name
    with pytest.raises(ValueError, match="one block per layer"):
        net.forward([b0], x)
    with pytest.raises(ValueError, match=r"graph\[1\] must have as many sources"):
        net.forward([b0, b0], x)
    with pytest.raises(ValueError, match="square graph, or a list of 2 blocks"):
        net.forward(b0, x)


def test_bipartite_network_takes_a_pair():
    rng = np.random.default_rng(2)
    block = CSRGraph.from_edge_index(np.array([[0, 1, 2, 3], [0, 0, 1, 2]]), size=(4, 3))
    net = GATv2Network((5, 2), 4, 3, num_layers=1, out_heads=2, dropout=0.5, attention_dropout=0.0,
                       dtype=np.float64, seed=0)
    x = (rng.standard_normal((4, 5)), rng.standard_normal((3, 2)))
    out, cache = net.forward(block, x, training=True, rng=np.random.default_rng(0))
    grads = net.backward(cache, np.ones_like(out))
    assert grads["x"][0].shape == (4, 5) and grads["x"][1].shape == (3, 2)
    with pytest.raises(TypeError, match="must be a pair"):
        net.forward(block, x[0])


# ---------------------------------------------------------------------- training, checkpoints, CLI
def test_train_uses_the_datasets_edge_features_unless_told_not_to(tmp_path):
    small = dict(epochs=1, layers=1, hidden=2, heads=1, quiet=True)
    with_edges = gatfast.train("mutag", save=str(tmp_path / "e.npz"), **small)
    assert with_edges.model.edge_dim == 4 and with_edges.config.edge_features
    without = gatfast.train("mutag", edge_features=False, **small)
    assert without.model.edge_dim is None
    model, meta = load_checkpoint(tmp_path / "e.npz")
    assert model.edge_dim == 4 and meta["train_config"]["edge_features"] is True
    # a model with edge features does not fit a dataset without, with a clear message
    plain = load_dataset("mutag", edge_features=False)
    with pytest.raises(ValueError, match="the model uses 4 edge features but dataset 'mutag' has no edge"):
        gatfast.evaluate(model, plain)


def test_checkpoints_from_before_edge_features_still_load(tmp_path):
    model = GATv2Network(3, 2, 2, num_layers=1, seed=0)
    path = tmp_path / "old.npz"
    save_checkpoint(path, model, {"task": "node_classification"})
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    config = json.loads(str(arrays["config"]))
    for key in ("edge_dim", "fill_value"):  # gatfast 0.1 wrote neither
        config["model"].pop(key)
    arrays["config"] = np.array(json.dumps(config))
    np.savez(path, **arrays)
    loaded, _ = load_checkpoint(path)
    assert loaded.edge_dim is None
    g = CSRGraph.from_edge_index(np.array([[0, 1], [1, 0]]), 2)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(loaded.output(g, x), model.output(g, x))


def test_cli_trains_mutag_with_and_without_edge_features(tmp_path, capsys):
    common = ["train", "--dataset", "mutag", "--epochs", "1", "--layers", "1", "--hidden", "2", "--heads", "1"]
    assert main(common) == 0
    assert "4 edge features" in capsys.readouterr().out
    assert main(common + ["--no-edge-features", "--fill-value", "max"]) == 0
    out = capsys.readouterr().out
    assert "edge features" not in out.split("\n")[0] and "edge_features=False" in out


@pytest.mark.parametrize("options", [["--edge-dim", "3"], ["--bipartite"], ["--edge-dim", "2", "--bipartite"]])
def test_gradcheck_with_edge_features_and_bipartite(options, capsys):
    assert main(["gradcheck", "--nodes", "6", *options]) == 0
    out = capsys.readouterr().out
    worst = float(out.split("worst relative error:")[1].split()[0])
    assert worst < 1e-6
    if "--edge-dim" in options:
        assert "edge_attr" in out and "W_e" in out
    if "--bipartite" in options:
        assert "x_src" in out and "x_dst" in out


def test_theta_r_diagnostics_see_the_edge_term():
    from gatfast.diagnostics import theta_r_flow

    rng = np.random.default_rng(0)
    # a star: every node aggregates from all others, edge features push z across zero
    n = 6
    ei = np.array([[j for i in range(n) for j in range(n) if j != i], [i for i in range(n) for j in range(n) if j != i]])
    graph, attr = CSRGraph.from_edge_index(ei, n, edge_attr=rng.standard_normal((ei.shape[1], 2)))
    layer = gatfast.GATv2Layer(3, 4, edge_dim=2, dtype=np.float64, seed=0)
    x = np.zeros((n, 3))  # without the edge term all z would be equal within a row: all "same_regime"
    plain = gatfast.GATv2Layer(3, 4, dtype=np.float64, seed=0)
    assert theta_r_flow(plain, graph, x).fractions["same_regime"].mean() == 1.0
    layer.params["W_e"] = 5 * rng.standard_normal(layer.params["W_e"].shape)
    flow = theta_r_flow(layer, graph, x, edge_attr=attr)
    assert flow.fractions["same_regime"].mean() < 0.5
