"""CSRGraph construction, conversions, self loops, source order and batching."""

import copy
import pickle
import warnings

import naive
import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import CSRGraph, GATv2Layer, batch_graphs


def rows_of(graph):
    return [graph.indices[graph.indptr[i] : graph.indptr[i + 1]].tolist() for i in range(graph.num_nodes)]


def random_edge_index(rng, n, e):
    return rng.integers(0, n, size=(2, e))


# ---------------------------------------------------------------------- constructors


def test_from_edge_index_groups_by_target_and_keeps_order():
    ei = np.array([[3, 0, 1, 2, 0, 3], [1, 2, 1, 0, 1, 2]])
    g = CSRGraph.from_edge_index(ei, 5)
    assert g.num_nodes == 5 and g.nnz == 6
    # row i = sources of the edges into i, in edge_index order
    assert rows_of(g) == [[2], [3, 1, 0], [0, 3], [], []]
    np.testing.assert_array_equal(g.indptr, [0, 1, 4, 6, 6, 6])
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int64


@pytest.mark.parametrize("seed", range(3))
def test_from_edge_index_round_trip(seed):
    rng = np.random.default_rng(seed)
    ei = random_edge_index(rng, 20, 80)
    g = CSRGraph.from_edge_index(ei, 20)
    back = g.to_edge_index()
    assert back.shape == ei.shape and back.dtype == np.int64
    # same edges, stably sorted by target
    order = np.argsort(ei[1], kind="stable")
    np.testing.assert_array_equal(back, ei[:, order])
    assert CSRGraph.from_edge_index(back, 20) == g
    np.testing.assert_array_equal(back[1], g.targets())


def test_from_edge_index_keeps_duplicates():
    ei = np.array([[1, 1, 1, 2], [0, 0, 0, 0]])
    g = CSRGraph.from_edge_index(ei)
    assert g.nnz == 4
    assert rows_of(g) == [[1, 1, 1, 2], [], []]
    assert g.to_scipy()[0, 1] == 3  # duplicates add up in the adjacency


def test_from_edge_index_num_nodes():
    ei = np.array([[0, 2], [1, 1]])
    assert CSRGraph.from_edge_index(ei).num_nodes == 3
    g = CSRGraph.from_edge_index(ei, num_nodes=7)
    assert g.num_nodes == 7 and g.in_degree().tolist() == [0, 2, 0, 0, 0, 0, 0]
    empty = CSRGraph.from_edge_index(np.zeros((2, 0), dtype=np.int64), num_nodes=4)
    assert empty.num_nodes == 4 and empty.nnz == 0
    assert CSRGraph.from_edge_index(np.zeros((2, 0), dtype=np.int64)).num_nodes == 0


def test_from_scipy_and_to_scipy_round_trip():
    rng = np.random.default_rng(0)
    A = sp.random_array((30, 30), density=0.15, format="csr", rng=rng)
    A.data[:] = 1.0
    g = CSRGraph.from_scipy(A, rows="targets")
    assert g.num_nodes == 30 and g.nnz == A.nnz
    B = g.to_scipy()
    assert isinstance(B, sp.csr_array) and B.shape == A.shape
    assert (B != A).nnz == 0
    assert CSRGraph.from_scipy(B, rows="targets") == g
    # the edge j -> i is A[i, j]: row i holds the sources of i
    coo = A.tocoo()
    edges = sorted(zip(coo.row.tolist(), coo.col.tolist()))
    assert sorted(zip(g.targets().tolist(), g.indices.tolist())) == edges


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil"])
def test_from_scipy_accepts_formats_and_matrices(fmt):
    dense = np.array([[0, 2, 0], [1, 0, 3], [0, 0, 0]], dtype=float)
    for A in (sp.csr_array(dense).asformat(fmt), sp.csr_matrix(dense).asformat(fmt)):
        g = CSRGraph.from_scipy(A, rows="targets")
        assert [sorted(r) for r in rows_of(g)] == [[1], [0, 2], []]


def test_from_scipy_drops_explicit_zeros():
    A = sp.csr_array(
        (np.array([1.0, 0.0, 2.0, 0.0]), np.array([1, 2, 0, 1]), np.array([0, 2, 4, 4])), shape=(3, 3)
    )
    assert A.nnz == 4
    g = CSRGraph.from_scipy(A)
    assert g.nnz == 2
    assert rows_of(g) == [[1], [0], []]
    # weights are not kept: to_scipy gives ones
    np.testing.assert_array_equal(g.to_scipy().toarray(), [[0, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize("indices", [[0, 1, 2], [2, 0, 1]], ids=["sorted", "unsorted"])
def test_from_scipy_does_not_modify_its_input(indices):
    # an explicit zero (and unsorted columns) make scipy canonicalise the arrays
    A = sp.csr_array((np.array([1.0, 0.0, 2.0]), np.array(indices), np.array([0, 3, 3, 3])), shape=(3, 3))
    # (A.sum() would itself sort A's indices in place, so compare dense copies)
    data, idx, indptr, dense = A.data.copy(), A.indices.copy(), A.indptr.copy(), A.toarray()
    g = CSRGraph.from_scipy(A, rows="targets")
    assert g.nnz == 2
    np.testing.assert_array_equal(A.indptr, indptr)
    np.testing.assert_array_equal(A.indices, idx)
    np.testing.assert_array_equal(A.data, data)
    np.testing.assert_array_equal(A.toarray(), dense)


def test_from_scipy_keeps_a_canonical_input_intact():
    A = sp.csr_array((np.array([1.0, 3.0, 2.0]), np.array([0, 2, 1]), np.array([0, 2, 2, 3])), shape=(3, 3))
    arrays = [A.data.copy(), A.indices.copy(), A.indptr.copy()]
    CSRGraph.from_scipy(A, rows="targets")
    for before, after in zip(arrays, [A.data, A.indices, A.indptr]):
        np.testing.assert_array_equal(after, before)


def test_graph_arrays_are_copies_and_read_only():
    indptr = np.array([0, 1, 3])
    indices = np.array([1, 0, 1])
    g = CSRGraph(indptr, indices)
    indices[0] = 0
    assert g.indices[0] == 1
    with pytest.raises(ValueError):
        g.indices[0] = 0
    with pytest.raises(ValueError):
        g.indptr[0] = 1


def test_in_degree():
    rng = np.random.default_rng(1)
    ei = random_edge_index(rng, 25, 120)
    g = CSRGraph.from_edge_index(ei, 25)
    np.testing.assert_array_equal(g.in_degree(), np.bincount(ei[1], minlength=25))
    assert g.in_degree().sum() == g.nnz


# ---------------------------------------------------------------------- self loops


def test_with_self_loops_semantics():
    g = naive.rows_graph([[2, 0, 0, 1], [], [2, 2], [0, 1, 3, 2]])
    loops = g.with_self_loops()
    # existing loops removed (all copies), the others kept in order, one loop appended per row
    assert rows_of(loops) == [[2, 1, 0], [1], [2], [0, 1, 2, 3]]
    assert loops.with_self_loops() == loops
    assert g.with_self_loops() is loops  # cached
    assert rows_of(g) == [[2, 0, 0, 1], [], [2, 2], [0, 1, 3, 2]]  # the original is unchanged
    assert rows_of(g.without_self_loops()) == [[2, 1], [], [], [0, 1, 2]]


@pytest.mark.parametrize("self_loops", [False, True])
def test_cached_derived_graphs_make_no_reference_cycles(self_loops, cyclic_garbage):
    """A graph dies with its last reference: a cycle through its cache would keep its arrays (and every
    sampled block's, one per step) until the cyclic garbage collector runs."""
    import gc

    rng = np.random.default_rng(0)
    g = naive.random_graph(rng, 30, 4, self_loops=self_loops, duplicates=True, empty_rows=2)

    def use(h):
        looped = h.with_self_loops()
        assert looped.with_self_loops() is looped and looped.loop_layout().graph is looped
        kept = looped.loop_layout().kept
        np.testing.assert_array_equal(kept, np.flatnonzero(looped.indices != looped.targets()))
        h.without_self_loops().without_self_loops().source_order()
        h.source_order()

    use(CSRGraph(g.indptr, g.indices, 30))  # first calls compile, which leaves garbage
    gc.collect()
    gc.disable()
    try:
        use(CSRGraph(g.indptr, g.indices, 30))
        assert not cyclic_garbage()
    finally:
        gc.enable()


@pytest.mark.parametrize("seed", range(3))
def test_with_self_loops_one_per_node(seed):
    rng = np.random.default_rng(seed)
    g = naive.random_graph(rng, 40, 6, self_loops=True, duplicates=True, empty_rows=3)
    loops = g.with_self_loops()
    t = loops.targets()
    is_loop = loops.indices == t
    np.testing.assert_array_equal(np.bincount(t[is_loop], minlength=40), np.ones(40))
    # the loop is the last edge of each row
    np.testing.assert_array_equal(loops.indices[loops.indptr[1:] - 1], np.arange(40))
    assert loops.nnz == g.without_self_loops().nnz + 40
    assert not g.without_self_loops().has_self_loops()


@pytest.mark.parametrize("seed", range(3))
def test_with_self_loops_matches_pyg(seed):
    torch = pytest.importorskip("torch")
    utils = pytest.importorskip("torch_geometric.utils")
    rng = np.random.default_rng(seed)
    n = 30
    ei = random_edge_index(rng, n, 120)  # loops and duplicates included
    ei[:, :5] = np.arange(5)  # a few certain self loops
    ref, _ = utils.remove_self_loops(torch.from_numpy(ei))
    ref, _ = utils.add_self_loops(ref, num_nodes=n)
    ref = ref.numpy()
    ours = CSRGraph.from_edge_index(ei, n).with_self_loops()
    assert ours == CSRGraph.from_edge_index(ref, n)
    for i in range(n):
        want = ref[0][ref[1] == i].tolist()
        assert rows_of(ours)[i] == want


# ---------------------------------------------------------------------- source order


@pytest.mark.parametrize("seed", range(4))
def test_source_order(seed):
    rng = np.random.default_rng(seed)
    g = naive.random_graph(rng, 35, 7, self_loops=True, duplicates=True, empty_rows=4)
    src_indptr, src_edges = g.source_order()
    assert src_indptr.dtype == np.int64 and src_edges.dtype == np.int64
    assert src_indptr.shape == (g.num_nodes + 1,) and src_indptr[0] == 0 and src_indptr[-1] == g.nnz
    # every edge exactly once
    np.testing.assert_array_equal(np.sort(src_edges), np.arange(g.nnz))
    for j in range(g.num_nodes):
        block = src_edges[src_indptr[j] : src_indptr[j + 1]]
        assert np.all(g.indices[block] == j)  # grouped by source
        assert np.all(np.diff(block) > 0)  # ascending edge id
    assert g.source_order()[1] is src_edges  # built once


# ---------------------------------------------------------------------- batching


def test_batch_graphs_block_diagonal():
    rng = np.random.default_rng(5)
    graphs = [naive.random_graph(rng, n, 4, self_loops=True, duplicates=True) for n in (5, 1, 9, 3)]
    graphs.append(CSRGraph.from_edge_index(np.zeros((2, 0), dtype=np.int64), 2))  # no edges
    big, graph_ptr = batch_graphs(graphs)
    np.testing.assert_array_equal(graph_ptr, [0, 5, 6, 15, 18, 20])
    assert graph_ptr.dtype == np.int64
    assert big.num_nodes == 20 and big.nnz == sum(g.nnz for g in graphs)
    want = sp.block_diag([g.to_scipy() for g in graphs], format="csr")
    assert (big.to_scipy() != want).nnz == 0
    for k, g in enumerate(graphs):
        lo, hi = graph_ptr[k], graph_ptr[k + 1]
        sub = [[j - lo for j in r] for r in rows_of(big)[lo:hi]]
        assert sub == rows_of(g)  # row order inside each graph kept


def test_batch_graphs_single_graph():
    g = naive.rows_graph([[1], [0, 1]])
    big, graph_ptr = batch_graphs([g])
    assert big == g
    np.testing.assert_array_equal(graph_ptr, [0, 2])


# ---------------------------------------------------------------------- the direction of a scipy matrix
def _directed():
    return sp.csr_array(([1.0, 1.0], ([0, 0], [1, 2])), shape=(3, 3))  # A[0, 1], A[0, 2]


def test_from_scipy_warns_only_when_the_direction_is_ambiguous():
    with pytest.warns(UserWarning, match=r"rows='sources'.*rows="):
        g = CSRGraph.from_scipy(_directed())
    assert rows_of(g) == [[1, 2], [], []]  # read as rows = targets, as before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert CSRGraph.from_scipy(_directed(), rows="targets") == g
        assert rows_of(CSRGraph.from_scipy(_directed(), rows="sources")) == [[], [0], [0]]
        sym = _directed() + _directed().T
        CSRGraph.from_scipy(sym)  # undirected: both readings agree
        CSRGraph.from_scipy(sp.csr_array(np.ones((3, 4))))  # rectangular: a block
        # values do not make a pattern asymmetric, and neither do explicit zeros
        weighted = sp.coo_array(([2.0, 5.0, 0.0], ([0, 1, 2], [1, 0, 1])), shape=(3, 3))
        assert weighted.nnz == 3
        CSRGraph.from_scipy(weighted)
    with pytest.warns(UserWarning, match="rows="):  # with attributes every stored entry is an edge
        CSRGraph.from_scipy(weighted, edge_attr=np.ones(3))
        # a matrix given straight to a layer is read as rows = targets (documented there), silently
        GATv2Layer(2, 2, seed=0).forward(_directed(), np.ones((3, 2), np.float32))


def test_from_scipy_warning_points_at_the_caller():
    with pytest.warns(UserWarning) as record:
        CSRGraph.from_scipy(_directed())
    assert record[0].filename == __file__


def test_graphs_are_shared_by_copies_since_they_are_immutable():
    g = CSRGraph.from_edge_index(np.array([[0, 1], [1, 2]]), 3)
    g.source_order()
    assert copy.copy(g) is g and copy.deepcopy(g) is g
    assert copy.deepcopy([g, g])[0] is g
    assert pickle.loads(pickle.dumps(g)) == g


class _FakeData:
    """What CSRGraph.from_pyg reads of a torch_geometric Data object."""

    def __init__(self, edge_index, num_nodes, edge_attr=None):
        self.edge_index, self.num_nodes, self.edge_attr = edge_index, num_nodes, edge_attr


def test_from_pyg_reads_a_data_like_object_without_torch():
    ei = np.array([[1, 2, 0], [0, 0, 2]])
    attr = np.array([[1.0], [2.0], [3.0]], np.float32)
    g = CSRGraph.from_pyg(_FakeData(ei, 4))
    assert g == CSRGraph.from_edge_index(ei, 4)
    g2, a2 = CSRGraph.from_pyg(_FakeData(ei, 4, attr))
    assert g2 == g and a2.dtype == np.float32
    np.testing.assert_array_equal(a2, CSRGraph.from_edge_index(ei, 4, edge_attr=attr)[1])
    assert CSRGraph.from_pyg(_FakeData(ei, 4, attr), edge_attr=False) == g
    with pytest.raises(ValueError, match="edge_attr=True"):
        CSRGraph.from_pyg(_FakeData(ei, 4), edge_attr=True)
    with pytest.raises(TypeError, match="edge_attr must be None, True or False"):
        CSRGraph.from_pyg(_FakeData(ei, 4), edge_attr=attr)
    with pytest.raises(TypeError, match="edge_index"):
        CSRGraph.from_pyg(object())
    with pytest.raises(ValueError, match="num_nodes is 2"):
        CSRGraph.from_pyg(_FakeData(ei, 2))


@pytest.mark.parametrize("shape", [(30, 30), (30, 45), (45, 30), (1, 1), (0, 5)])
@pytest.mark.parametrize("seed", range(3))
def test_structure_kernels_equal_the_numpy_formulations(shape, seed):
    # self loops, duplicate edges and empty rows included; bipartite both ways
    from gatfast.kernels.structure import loop_layout, source_major

    rng = np.random.default_rng(seed)
    n_dst, n_src = shape
    deg = rng.integers(0, 6, n_dst)
    indptr = np.r_[0, np.cumsum(deg)].astype(np.int64)
    indices = rng.integers(0, max(n_src, 1), indptr[-1]).astype(np.int64)
    loops_at = np.flatnonzero(rng.random(indices.size) < 0.2)
    rows = np.repeat(np.arange(n_dst), deg)
    indices[loops_at] = np.minimum(rows[loops_at], n_src - 1)
    for got, want in zip(source_major(indices, n_src), naive.source_major(indices, n_src)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(
        loop_layout(indptr, indices, n_dst, n_src), naive.loop_layout(indptr, indices, n_dst, n_src)
    ):
        np.testing.assert_array_equal(got, want)
