"""Dataset loaders, writers and generators (gatfast.data)."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import CSRGraph
from gatfast.data import (
    DATA_DIR,
    GraphDataset,
    NodeDataset,
    load_dataset,
    load_karate,
    load_planetoid,
    load_tu,
    make_csbm,
    make_traffic_scenes,
    row_normalize,
    traffic_target,
    write_planetoid_npz,
)

REPO_DATA = DATA_DIR
CORA = REPO_DATA / "cora.npz"
MUTAG = REPO_DATA / "mutag.npz"
# The read-only shared datasets sit beside the checkout (CI clones with ../shared next to it).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CITESEER = SHARED_DATA / "citeseer.npz"
PUBMED = SHARED_DATA / "pubmed_structure.npz"


def undirected_pairs(graph):
    """Set of {i, j} pairs (i < j) of a graph."""
    ei = graph.to_edge_index()
    return {(min(a, b), max(a, b)) for a, b in ei.T.tolist()}


def is_symmetric(graph):
    A = graph.to_scipy()
    return (A != A.T).nnz == 0


def homophily(ds):
    ei = ds.graph.to_edge_index()
    return float(np.mean(ds.y[ei[0]] == ds.y[ei[1]]))


# ---------------------------------------------------------------------- karate
def test_karate_structure():
    ds = load_karate()
    assert isinstance(ds, NodeDataset)
    assert ds.num_nodes == 34 and ds.graph.nnz == 156
    assert len(undirected_pairs(ds.graph)) == 78
    assert is_symmetric(ds.graph) and not ds.graph.has_self_loops()
    deg = ds.graph.in_degree()
    assert deg[0] == 16 and deg[33] == 17 and deg.sum() == 156
    # The full degree sequence of Zachary's graph, sorted descending.
    assert sorted(deg.tolist(), reverse=True)[:6] == [17, 16, 12, 10, 9, 6]
    assert deg.min() == 1 and int(np.argmin(deg)) == 11
    assert np.bincount(ds.y).tolist() == [17, 17]
    assert ds.y[0] == 0 and ds.y[33] == 1  # Mr. Hi and the Officer lead opposite factions
    np.testing.assert_array_equal(ds.x, np.eye(34, dtype=np.float32))
    assert ds.x.dtype == np.float32 and load_karate(np.float64).x.dtype == np.float64
    assert ds.train_mask.all() and ds.val_mask.all() and ds.test_mask.all()
    assert ds.num_classes == 2 and ds.task == "node_classification"


def test_karate_matches_networkx():
    nx = pytest.importorskip("networkx")
    G = nx.karate_club_graph()
    ds = load_karate()
    assert undirected_pairs(ds.graph) == {(min(a, b), max(a, b)) for a, b in G.edges()}
    clubs = [0 if G.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(34)]
    assert ds.y.tolist() == clubs


def assert_node_datasets_equal(a, b):
    assert a.name == b.name and a.num_classes == b.num_classes and a.task == b.task
    assert a.graph == b.graph
    xa = a.x.toarray() if sp.issparse(a.x) else a.x
    xb = b.x.toarray() if sp.issparse(b.x) else b.x
    np.testing.assert_array_equal(xa, xb)
    assert xa.dtype == xb.dtype
    np.testing.assert_array_equal(a.y, b.y)
    for m in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(a, m), getattr(b, m))


def test_karate_npz_matches_embedded():
    from_file = load_planetoid(REPO_DATA / "karate.npz")
    assert sp.issparse(from_file.x)
    assert_node_datasets_equal(from_file, load_karate())


def test_write_roundtrip_is_atomic_and_exact(tmp_path):
    ds = make_csbm(num_nodes=60, num_features=5, seed=3)
    path = tmp_path / "csbm.npz"
    write_planetoid_npz(path, ds)
    assert [p.name for p in tmp_path.iterdir()] == ["csbm.npz"]  # no temp file left
    back = load_planetoid(path)
    assert back.graph == ds.graph
    np.testing.assert_array_equal(back.x.toarray(), ds.x)
    np.testing.assert_array_equal(back.y, ds.y)
    np.testing.assert_array_equal(back.test_mask, ds.test_mask)
    with pytest.raises(TypeError, match="dataset"):
        write_planetoid_npz(tmp_path / "bad.npz", load_tu(MUTAG))


# ---------------------------------------------------------------------- Planetoid
def test_cora():
    ds = load_planetoid(CORA)
    assert ds.name == "cora"
    assert ds.num_nodes == 2708 and ds.graph.nnz == 10556
    assert ds.x.shape == (2708, 1433) and sp.issparse(ds.x) and ds.x.nnz == 49216
    assert ds.x.dtype == np.float32
    assert ds.num_classes == 7
    assert np.bincount(ds.y).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert ds.y[:10].tolist() == [3, 4, 4, 0, 3, 2, 0, 3, 3, 2]
    assert [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)] == [140, 500, 1000]
    assert not (ds.train_mask & ds.test_mask).any()
    # edge_index is [src; dst] and CSR is by target: edge 0 -> 633 puts source 0 in row 633.
    g = ds.graph
    for target in (633, 1862, 2582):
        assert 0 in g.indices[g.indptr[target] : g.indptr[target + 1]]
    assert is_symmetric(g) and not g.has_self_loops()


def test_cora_normalized_features():
    raw = load_planetoid(CORA)
    ds = load_planetoid(CORA, dtype=np.float64, normalize_features=True)
    sums = np.asarray(ds.x.sum(axis=1)).ravel()
    np.testing.assert_allclose(sums, 1.0, rtol=1e-12)
    assert ds.x.dtype == np.float64
    # Same sparsity pattern; values are 1 / (row nnz) for binary rows.
    np.testing.assert_array_equal(ds.x.indices, raw.x.indices)
    np.testing.assert_allclose(ds.x.data, np.repeat(1.0 / np.diff(raw.x.indptr), np.diff(raw.x.indptr)))


def test_row_normalize_matches_pyg():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    from torch_geometric.transforms import NormalizeFeatures

    dense = np.array([[0, 0, 0], [1, 3, 0], [0.2, 0.3, 0], [0, 2, 0]], dtype=np.float64)
    ours_sparse = row_normalize(sp.csr_array(dense)).toarray()
    ours_dense = row_normalize(dense)
    ref = NormalizeFeatures()(Data(x=torch.tensor(dense))).x.numpy()
    np.testing.assert_allclose(ours_sparse, ref, rtol=1e-15)
    np.testing.assert_allclose(ours_dense, ref, rtol=1e-15)
    assert ref[0].sum() == 0  # a zero row stays zero
    np.testing.assert_allclose(dense[2], ref[2])  # rows summing below 1 are not scaled
    with pytest.raises(ValueError, match="non-negative"):
        row_normalize(sp.csr_array(-dense))


@pytest.mark.skipif(not CITESEER.exists(), reason="citeseer.npz not available")
def test_citeseer():
    ds = load_dataset(CITESEER)
    assert ds.num_nodes == 3327 and ds.graph.nnz == 9104 and ds.x.shape == (3327, 3703)
    assert ds.num_classes == 6 and ds.x.nnz == 105165
    assert [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)] == [120, 500, 1000]
    assert int((ds.graph.in_degree() == 0).sum()) == 48


@pytest.mark.skipif(not PUBMED.exists(), reason="pubmed_structure.npz not available")
def test_pubmed_structure_needs_synthetic_features():
    with pytest.raises(ValueError, match="synthetic_features"):
        load_planetoid(PUBMED)
    a = load_planetoid(PUBMED, synthetic_features=8, seed=1)
    b = load_planetoid(PUBMED, synthetic_features=8, seed=1)
    assert a.x.shape == (19717, 8) and a.graph.nnz == 88648 and a.num_classes == 3
    np.testing.assert_array_equal(a.x, b.x)


# ---------------------------------------------------------------------- malformed files
def cora_arrays():
    with np.load(CORA, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def write_npz(tmp_path, arrays, name="bad.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def _drop(a, key):
    a.pop(key)


def _set(key, value):
    def change(a):
        a[key] = value(a) if callable(value) else value

    return change


BAD_PLANETOID = {
    "missing key": (lambda a: _drop(a, "val_mask"), r"missing key\(s\) \['val_mask'\]"),
    "missing x key": (lambda a: _drop(a, "x_indptr"), r"missing key\(s\) \['x_indptr'\]"),
    "edge_index shape": (_set("edge_index", lambda a: a["edge_index"][0]), r"'edge_index' must have shape \(2, \*\)"),
    "edge out of range": (_set("edge_index", lambda a: a["edge_index"] + 1), r"'edge_index' must be < 2708"),
    "negative label": (_set("y", lambda a: a["y"] - 1), r"'y' must be >= 0"),
    "float labels": (_set("y", lambda a: a["y"].astype(float)), r"'y' must be an integer array"),
    "y length": (_set("y", lambda a: a["y"][:-1]), r"'y' must have shape \(2708\)"),
    "mask length": (_set("test_mask", lambda a: a["test_mask"][:-3]), r"'test_mask' must have shape \(2708\)"),
    "mask dtype": (_set("train_mask", lambda a: a["train_mask"].astype(np.int64)), r"'train_mask' must be a bool"),
    "x_shape": (_set("x_shape", np.array([2708, 10])), r"'x_indices' must be < 10"),
    "x_indptr": (_set("x_indptr", lambda a: a["x_indptr"][:-1]), r"'x_indptr' must have shape \(2709\)"),
    "x_data nan": (_set("x_data", lambda a: np.where(np.arange(a["x_data"].size) == 5, np.nan, a["x_data"])), "finite"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_PLANETOID))
def test_bad_planetoid_files(tmp_path, case):
    change, message = BAD_PLANETOID[case]
    arrays = cora_arrays()
    change(arrays)
    path = write_npz(tmp_path, arrays)
    with pytest.raises(ValueError, match=message) as info:
        load_planetoid(path)
    assert str(path) in str(info.value)  # the error names the file


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_planetoid(tmp_path / "nope.npz")
    path = write_npz(tmp_path, {"a": np.zeros(3)})
    with pytest.raises(ValueError, match="graph_indicator"):
        load_dataset(path)
    with pytest.raises(ValueError, match="missing key"):
        load_tu(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="junk.npz"):
        load_planetoid(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match="path_or_name"):
        load_dataset("no-such-dataset")


def test_object_arrays_are_refused(tmp_path):
    arrays = cora_arrays()
    arrays["y"] = np.array([object()] * 3, dtype=object)
    path = write_npz(tmp_path, arrays)
    with pytest.raises(ValueError, match="pickle"):
        load_planetoid(path)


# ---------------------------------------------------------------------- TU
def test_mutag():
    ds = load_tu(MUTAG)
    assert isinstance(ds, GraphDataset) and ds.name == "mutag"
    assert len(ds) == 188 and ds.num_classes == 2 and ds.task == "graph_classification"
    assert sum(g.num_nodes for g in ds.graphs) == 3371
    assert sum(g.nnz for g in ds.graphs) == 7442
    assert np.bincount(ds.y).tolist() == [63, 125]
    assert ds.num_features == 7
    x = np.concatenate(ds.xs)
    assert x.shape == (3371, 7) and np.all(x.sum(axis=1) == 1) and np.all(x.sum(axis=0) > 0)
    with np.load(MUTAG, allow_pickle=False) as z:
        node_labels, ei, gi = z["node_labels"], z["edge_index"], z["graph_indicator"]
    np.testing.assert_array_equal(x.argmax(axis=1), node_labels)
    # Every graph's local edges are the file's edges of that graph, shifted.
    graph, _, ptr, _ = ds.batch(np.arange(len(ds)))
    assert undirected_pairs(graph) == {(min(a, b), max(a, b)) for a, b in ei.T.tolist()}
    assert graph.nnz == ei.shape[1]
    np.testing.assert_array_equal(np.repeat(np.arange(188), np.diff(ptr)), gi)


def mutag_arrays():
    with np.load(MUTAG, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


BAD_TU = {
    "missing key": (lambda a: _drop(a, "graph_labels"), r"missing key\(s\) \['graph_labels'\]"),
    "decreasing indicator": (_set("graph_indicator", lambda a: a["graph_indicator"][::-1].copy()), "non-decreasing"),
    "crossing edge": (_set("edge_index", lambda a: np.concatenate([a["edge_index"], [[0], [3370]]], axis=1)), "different graphs"),
    "labels length": (_set("graph_labels", lambda a: a["graph_labels"][:-1]), r"'graph_labels' must have shape \(188\)"),
    "label out of range": (_set("graph_labels", lambda a: a["graph_labels"] + 1), r"'graph_labels' must be < 2"),
    "node_labels length": (_set("node_labels", lambda a: a["node_labels"][1:]), r"'node_labels' must have shape \(3371\)"),
    "edge out of range": (_set("edge_index", lambda a: a["edge_index"] * 2), r"'edge_index' must be < 3371"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_TU))
def test_bad_tu_files(tmp_path, case):
    change, message = BAD_TU[case]
    arrays = mutag_arrays()
    change(arrays)
    path = write_npz(tmp_path, arrays)
    with pytest.raises(ValueError, match=message) as info:
        load_tu(path)
    assert str(path) in str(info.value)


def test_tu_without_node_labels(tmp_path):
    arrays = mutag_arrays()
    del arrays["node_labels"], arrays["graph_label_values"]
    ds = load_tu(write_npz(tmp_path, arrays))
    assert ds.num_features == 1 and ds.num_classes == 2
    assert all(np.all(x == 1) for x in ds.xs)


def test_load_dataset_dispatch():
    assert load_dataset("karate").name == "karate"
    assert isinstance(load_dataset(MUTAG), GraphDataset)
    assert isinstance(load_dataset(str(CORA), dtype=np.float64), NodeDataset)
    if (DATA_DIR / "mutag.npz").is_file():
        assert len(load_dataset("mutag")) == 188
    csbm = load_dataset("csbm", num_nodes=100)
    assert csbm.num_nodes == 100 and csbm.graph == make_csbm(num_nodes=100, seed=0).graph
    traffic = load_dataset("traffic_scenes", num_graphs=7, seed=2, dtype=np.float64)
    assert len(traffic) == 7 and traffic.xs[0].dtype == np.float64


def test_load_dataset_common_options():
    # train() and the CLI pass dtype and normalize_features to every kind of dataset.
    for name in ("karate", MUTAG, CORA):
        ds = load_dataset(name, dtype=np.float64, normalize_features=True)
        xs = [ds.x] if isinstance(ds, NodeDataset) else ds.xs
        for x in xs:
            assert x.dtype == np.float64
            np.testing.assert_allclose(np.asarray(x.sum(axis=1)).ravel(), 1.0, rtol=1e-12)
    traffic = load_dataset("traffic_scenes", num_graphs=5, normalize_features=True)
    raw = load_dataset("traffic_scenes", num_graphs=5)
    np.testing.assert_allclose(traffic.xs[3], row_normalize(raw.xs[3]))
    assert not np.allclose(traffic.xs[3], raw.xs[3])
    assert traffic.xs[3].dtype == np.float32
    with pytest.raises(TypeError, match="path_or_name"):
        load_dataset(3)


# ---------------------------------------------------------------------- batching and folds
def test_batch_is_block_diagonal():
    ds = load_tu(MUTAG)
    idx = [5, 0, 187, 5]
    graph, x, ptr, y = ds.batch(idx)
    sizes = [ds.graphs[i].num_nodes for i in idx]
    assert ptr.tolist() == np.concatenate([[0], np.cumsum(sizes)]).tolist()
    assert isinstance(graph, CSRGraph) and graph.num_nodes == sum(sizes)
    A = graph.to_scipy().toarray()
    for b, i in enumerate(idx):
        block = slice(ptr[b], ptr[b + 1])
        np.testing.assert_array_equal(A[block, block], ds.graphs[i].to_scipy().toarray())
        np.testing.assert_array_equal(x[block], ds.xs[i])
    assert A.sum() == sum(ds.graphs[i].nnz for i in idx)  # nothing outside the blocks
    np.testing.assert_array_equal(y, ds.y[idx])
    for bad, err in (([], ValueError), ([188], ValueError), ([-1], ValueError), ([0.5], TypeError)):
        with pytest.raises(err, match="indices"):
            ds.batch(bad)


@pytest.mark.parametrize("k", [2, 5, 10])
def test_folds_are_stratified_partitions(k):
    ds = load_tu(MUTAG)
    folds = ds.folds(k=k, seed=1)
    assert len(folds) == k
    tests = np.concatenate([te for _, te in folds])
    assert np.sort(tests).tolist() == list(range(188))  # each graph tested exactly once
    overall = np.bincount(ds.y) / len(ds)
    for train, test in folds:
        assert np.intersect1d(train, test).size == 0 and train.size + test.size == 188
        assert abs(test.size - 188 / k) < 1
        counts = np.bincount(ds.y[test], minlength=2)
        assert np.all(np.abs(counts - overall * test.size) <= 1)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, ds.folds(k=k, seed=1)))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, ds.folds(k=k, seed=2)))


def test_folds_bad_k():
    ds = load_tu(MUTAG)
    with pytest.raises(ValueError, match="k must be"):
        ds.folds(k=1)
    with pytest.raises(ValueError, match="k must be"):
        ds.folds(k=189)


# ---------------------------------------------------------------------- generators
@pytest.mark.parametrize("h", [0.1, 0.5, 0.9])
def test_csbm_homophily_and_degree(h):
    ds = make_csbm(num_nodes=1500, num_classes=3, avg_degree=6.0, homophily=h, seed=0)
    assert abs(homophily(ds) - h) < 0.1
    assert ds.graph.nnz == 2 * round(1500 * 6.0 / 2)
    assert is_symmetric(ds.graph) and not ds.graph.has_self_loops()
    assert len(undirected_pairs(ds.graph)) == ds.graph.nnz // 2  # no duplicate edges
    assert np.bincount(ds.y).tolist() == [500, 500, 500]


def test_csbm_seeded_split_and_features():
    a = make_csbm(num_nodes=400, num_features=8, feature_signal=3.0, seed=7)
    b = make_csbm(num_nodes=400, num_features=8, feature_signal=3.0, seed=7)
    c = make_csbm(num_nodes=400, num_features=8, feature_signal=3.0, seed=8)
    assert_node_datasets_equal(a, b)
    assert a.graph != c.graph
    masks = np.stack([a.train_mask, a.val_mask, a.test_mask])
    assert np.all(masks.sum(axis=0) == 1) and masks.sum(axis=1).tolist() == [240, 80, 80]
    # Class means are feature_signal apart from the origin: their estimate has norm ~3.
    means = np.stack([a.x[a.y == k].mean(axis=0) for k in range(2)])
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 3.0, atol=0.5)
    flat = make_csbm(num_nodes=400, num_features=8, feature_signal=0.0, seed=7)
    assert np.linalg.norm(flat.x[flat.y == 0].mean(axis=0)) < 0.5


@pytest.mark.parametrize(
    "kwargs, err",
    [
        (dict(homophily=1.5), ValueError),
        (dict(num_classes=1), ValueError),
        (dict(avg_degree=400.0), ValueError),
        (dict(num_nodes=3), ValueError),
        (dict(num_features=2.5), TypeError),
        (dict(train_frac=0.9, val_frac=0.2), ValueError),
    ],
)
def test_csbm_bad_arguments(kwargs, err):
    name = next(iter(kwargs))
    with pytest.raises(err, match=name):
        make_csbm(**kwargs)


def test_traffic_scenes():
    ds = make_traffic_scenes(num_graphs=200, max_nodes=10, num_features=6, seed=0)
    assert len(ds) == 200 and ds.task == "node_regression" and ds.num_classes == 0
    assert ds.num_features == 6 and ds.num_targets == 2
    sizes = np.array([g.num_nodes for g in ds.graphs])
    assert sizes.min() >= 3 and sizes.max() <= 10
    deg = np.concatenate([g.in_degree() for g in ds.graphs])
    assert np.mean(deg <= 2) > 0.8 and deg.max() >= 3  # sparse, but not trivially so
    for g, x, t in zip(ds.graphs[:20], ds.xs, ds.y):
        assert is_symmetric(g) and not g.has_self_loops()
        pos, vel = x[:, :2].astype(np.float64), x[:, 2:4].astype(np.float64)
        # Independent per-node recomputation of the documented target.
        for i in range(g.num_nodes):
            nbrs = g.indices[g.indptr[i] : g.indptr[i + 1]]
            d = np.linalg.norm(pos[nbrs] - pos[i], axis=1)
            assert np.all(d < 0.2)
            far = np.setdiff1d(np.arange(g.num_nodes), np.append(nbrs, i))
            assert np.all(np.linalg.norm(pos[far] - pos[i], axis=1) >= 0.2)
            w = np.append(1 - d / 0.2, 1.0)
            want = (w[:, None] * vel[np.append(nbrs, i)]).sum(axis=0) / w.sum()
            np.testing.assert_allclose(t[i], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traffic_target(pos, vel, 0.2), t, rtol=1e-5, atol=1e-6)
    graph, x, ptr, y = ds.batch([2, 0])
    assert y.shape == (ds.graphs[2].num_nodes + ds.graphs[0].num_nodes, 2)
    np.testing.assert_array_equal(y[: ptr[1]], ds.y[2])
    np.testing.assert_array_equal(x[ptr[1] :], ds.xs[0])
    folds = ds.folds(k=4, seed=0)
    assert np.sort(np.concatenate([te for _, te in folds])).tolist() == list(range(200))


def test_traffic_scenes_seeded():
    a = make_traffic_scenes(num_graphs=30, seed=5)
    b = make_traffic_scenes(num_graphs=30, seed=5)
    c = make_traffic_scenes(num_graphs=30, seed=6)
    assert all(ga == gb for ga, gb in zip(a.graphs, b.graphs))
    assert all(
        np.array_equal(xa, xb) and np.array_equal(ya, yb) for xa, xb, ya, yb in zip(a.xs, b.xs, a.y, b.y)
    )
    assert not all(np.array_equal(xa, xc) for xa, xc in zip(a.xs, c.xs))
    with pytest.raises(ValueError, match="num_features"):
        make_traffic_scenes(num_features=3)
    with pytest.raises(ValueError, match="max_nodes"):
        make_traffic_scenes(min_nodes=5, max_nodes=4)


def test_dataclass_validation():
    ds = load_karate()
    with pytest.raises(ValueError, match="train_mask"):
        NodeDataset("k", ds.graph, ds.x, ds.y, ds.train_mask[:-1], ds.val_mask, ds.test_mask, 2)
    with pytest.raises(ValueError, match="task"):
        NodeDataset("k", ds.graph, ds.x, ds.y, ds.train_mask, ds.val_mask, ds.test_mask, 2, task="graph")
    with pytest.raises(ValueError, match="same length"):
        GraphDataset("g", [ds.graph], [ds.x, ds.x], np.array([0]), 1)


def test_graph_dataset_is_a_sequence_of_items():
    ds = load_dataset("mutag")
    graph, x, edge_attr = ds[3]
    assert graph is ds.graphs[3] and x is ds.xs[3] and edge_attr is ds.edge_attrs[3]
    assert ds[-1][0] is ds.graphs[-1] and len(list(ds)) == len(ds)
    plain = GraphDataset("plain", ds.graphs[:2], ds.xs[:2], ds.y[:2], 2)
    assert len(plain[1]) == 2
    with pytest.raises(IndexError, match="out of range for 2 graphs"):
        plain[2]
    with pytest.raises(TypeError, match="index must be an int"):
        plain[0:1]
