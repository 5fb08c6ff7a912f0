"""Tests for gatfast.model.GATv2Network: finite differences through the whole
stack (with feature and attention dropout), PyG cross-check, API behaviour."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import CSRGraph, RandomKeys, batch_graphs
from gatfast.layers import GATv2Layer
from gatfast.models import GATv2Network, Linear

SEED = 1234


pytestmark = pytest.mark.usefixtures("one_numba_thread")


def random_graph(rng, n, nnz, isolated=()):
    """Random directed graph without self loops; nodes in ``isolated`` get no in-edges."""
    src = rng.integers(0, n, nnz)
    dst = rng.integers(0, n, nnz)
    keep = (src != dst) & ~np.isin(dst, isolated)
    return CSRGraph.from_edge_index(np.stack([src[keep], dst[keep]]), n)


def randomize(model, rng, scale=0.5):
    """Give every parameter (biases included) random nonzero values."""
    model.load_parameters({k: rng.normal(size=v.shape) * scale for k, v in model.parameters().items()})


def node_problem(rng, in_features=3):
    g = random_graph(rng, 7, 18, isolated=(6,))
    x = rng.normal(size=(7, in_features))
    return g, x, None


def graph_problem(rng, in_features=3):
    graphs = [random_graph(rng, 4, 8), CSRGraph([0], []), random_graph(rng, 5, 10, isolated=(0,))]
    g, ptr = batch_graphs(graphs)
    x = rng.normal(size=(g.num_nodes, in_features))
    return g, x, ptr


def numeric_grad(f, arr, eps=1e-6):
    out = np.zeros_like(arr)
    flat, gflat = arr.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * eps)
    return out


def check_gradients(model, g, x, ptr, theta_r="linear", training=True):
    """Compare model.backward with central differences of sum(R * out).

    In training mode every forward gets a fresh generator with the same seed,
    so the feature and attention dropout masks are identical in every call.
    """
    rng = np.random.default_rng(0)

    def run():
        return model.forward(g, x, graph_ptr=ptr, training=training, rng=np.random.default_rng(SEED))

    out, cache = run()
    R = rng.normal(size=out.shape)
    grads = model.backward(cache, R, theta_r=theta_r)
    assert list(grads) == list(model.parameters()) + ["x"]

    def loss():
        return float(np.sum(R * run()[0]))

    for name, arr in list(model.parameters().items()) + [("x", x)]:
        num = numeric_grad(loss, arr)
        np.testing.assert_allclose(grads[name], num, rtol=1e-6, atol=1e-8, err_msg=name)
    return cache


@pytest.mark.parametrize("theta_r", ["linear", "pairwise"])
@pytest.mark.parametrize("readout", [None, "mean", "sum", "max"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("num_layers", [2, 3])
def test_network_gradients_with_dropout(num_layers, residual, readout, theta_r):
    rng = np.random.default_rng(num_layers * 10 + residual)
    g, x, ptr = (graph_problem if readout else node_problem)(rng)
    model = GATv2Network(
        3, 3, 2, num_layers=num_layers, heads=2, out_heads=2, dropout=0.3, attention_dropout=0.3,
        residual=residual, readout=readout, dtype=np.float64, seed=7,
    )
    randomize(model, rng)
    cache = check_gradients(model, g, x, ptr, theta_r=theta_r)
    # the check ran through real dropout: some features and some attention weights were dropped
    assert any((m == 0).any() for m in cache.masks)
    assert all((lc.edge_scale == 0).any() for lc in cache.layer_caches)
    if readout:
        assert cache.head_mask is not None and cache.head_mask.shape == (3, 6)


@pytest.mark.parametrize(
    "kw",
    [
        dict(activation="relu"),
        dict(activation="identity", share_weights=True),
        dict(attention_activation="softplus", root_weight="theta_r"),
        dict(root_weight="theta_n", residual=True),
        dict(add_self_loops=False, out_heads=1),
        dict(num_layers=1, out_heads=3),
        dict(num_layers=1, readout="max"),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
@pytest.mark.parametrize("training", [True, False])
def test_network_gradients_variants(kw, training):
    rng = np.random.default_rng(5)
    kw = {"num_layers": 2, "out_heads": 2, **kw}
    g, x, ptr = (graph_problem if kw.get("readout") else node_problem)(rng)
    model = GATv2Network(3, 2, 3, heads=2, dropout=0.25, attention_dropout=0.25, dtype=np.float64, seed=3, **kw)
    randomize(model, rng)
    check_gradients(model, g, x, ptr, training=training)


def test_architecture_matches_docstring():
    m = GATv2Network(10, 8, 4, num_layers=3, heads=8, out_heads=2)
    assert [type(layer) for layer in m.layers] == [GATv2Layer] * 3
    assert [(lay.in_features, lay.out_features, lay.heads, lay.concat) for lay in m.layers] == [
        (10, 8, 8, True), (64, 8, 8, True), (64, 4, 2, False)
    ]
    assert all(lay.dropout == 0.6 for lay in m.layers) and m.head is None
    r = GATv2Network(10, 8, 4, num_layers=2, heads=4, readout="sum", attention_dropout=0.1, residual=True)
    assert [(lay.out_features, lay.heads, lay.concat) for lay in r.layers] == [(8, 4, True)] * 2
    assert all(lay.dropout == 0.1 and lay.residual for lay in r.layers)
    assert isinstance(r.head, Linear) and (r.head.in_features, r.head.out_features) == (32, 4)
    one = GATv2Network(10, 8, 4, num_layers=1, out_heads=3)
    assert len(one.layers) == 1 and (one.layers[0].heads, one.layers[0].concat) == (3, False)


def pyg_reference(model, g, x, ptr):
    """The same network written with torch_geometric, parameters copied; returns (out, grads)."""
    torch = pytest.importorskip("torch")
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    ei = torch.from_numpy(g.to_edge_index())
    h = torch.tensor(x, requires_grad=True)
    inp = h
    tensors = {}
    for l, layer in enumerate(model.layers):
        conv = pyg_nn.GATv2Conv(
            layer.in_features, layer.out_features, heads=layer.heads, concat=layer.concat,
            residual=layer.residual, add_self_loops=True,
        ).double()
        p = {k: torch.from_numpy(v.copy()) for k, v in layer.params.items()}
        with torch.no_grad():
            conv.lin_l.weight.copy_(p["W_l"])
            conv.lin_l.bias.copy_(p["b_l"])
            conv.lin_r.weight.copy_(p["W_r"])
            conv.lin_r.bias.copy_(p["b_r"])
            conv.att.copy_(p["att"][None])
            conv.bias.copy_(p["bias"])
            if layer.residual:
                conv.res.weight.copy_(p["W_res"])
        tensors.update({f"layers.{l}.W_l": conv.lin_l.weight, f"layers.{l}.b_l": conv.lin_l.bias,
                        f"layers.{l}.W_r": conv.lin_r.weight, f"layers.{l}.b_r": conv.lin_r.bias,
                        f"layers.{l}.bias": conv.bias, f"layers.{l}.att": conv.att})
        if layer.residual:
            tensors[f"layers.{l}.W_res"] = conv.res.weight
        h = conv(h, ei)
        if model.readout is not None or l < len(model.layers) - 1:
            h = torch.nn.functional.elu(h)
    if model.readout is not None:
        pool = getattr(pyg_nn, {"mean": "global_mean_pool", "sum": "global_add_pool", "max": "global_max_pool"}[
            model.readout])
        batch = torch.from_numpy(np.repeat(np.arange(len(ptr) - 1), np.diff(ptr)))
        h = pool(h, batch, size=len(ptr) - 1)
        lin = torch.nn.Linear(model.head.in_features, model.head.out_features).double()
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(model.head.params["weight"]))
            lin.bias.copy_(torch.from_numpy(model.head.params["bias"]))
        tensors.update({"head.weight": lin.weight, "head.bias": lin.bias})
        h = lin(h)
    R = torch.from_numpy(np.random.default_rng(1).normal(size=tuple(h.shape)))
    (h * R).sum().backward()
    grads = {k: t.grad.numpy().reshape(model.parameters()[k].shape) for k, t in tensors.items()}
    grads["x"] = inp.grad.numpy()
    return h.detach().numpy(), R.numpy(), grads


@pytest.mark.parametrize("readout", [None, "mean", "max"])
def test_network_matches_pyg_stack(readout):
    rng = np.random.default_rng(11)
    g, x, ptr = (graph_problem if readout else node_problem)(rng, in_features=4)
    model = GATv2Network(4, 3, 2, num_layers=3, heads=2, out_heads=2, residual=True, readout=readout,
                         dtype=np.float64, seed=0)
    randomize(model, rng)
    ref_out, R, ref_grads = pyg_reference(model, g, x, ptr)
    out, cache = model.forward(g, x, graph_ptr=ptr)
    np.testing.assert_allclose(out, ref_out, rtol=1e-10, atol=1e-12)
    grads = model.backward(cache, R)
    for k in model.parameters():
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-9, atol=1e-11, err_msg=k)
    np.testing.assert_allclose(grads["x"], ref_grads["x"], rtol=1e-9, atol=1e-11)


def test_parameters_are_the_model_arrays_and_load_copies_in_place():
    rng = np.random.default_rng(0)
    g, x, _ = node_problem(rng)
    m = GATv2Network(3, 4, 2, heads=2, seed=1, dtype=np.float64)
    params = m.parameters()
    assert params["layers.0.W_l"] is m.layers[0].params["W_l"]
    before = m.output(g, x)
    params["layers.1.bias"] += 1.0  # in-place update, as an optimizer does
    np.testing.assert_allclose(m.output(g, x), before + 1.0)

    other = GATv2Network(3, 4, 2, heads=2, seed=2, dtype=np.float64)
    assert not np.allclose(other.output(g, x), m.output(g, x))
    ids = {k: id(v) for k, v in other.parameters().items()}
    src = {k: v.copy() for k, v in m.parameters().items()}
    other.load_parameters(src)
    np.testing.assert_array_equal(other.output(g, x), m.output(g, x))
    assert {k: id(v) for k, v in other.parameters().items()} == ids
    src["layers.0.W_l"][:] = 0  # the model holds copies, not the caller's arrays
    assert np.any(other.parameters()["layers.0.W_l"] != 0)
    assert m.num_parameters() == sum(v.size for v in params.values())


def test_load_parameters_validates_everything_first():
    m = GATv2Network(3, 4, 2, heads=2, seed=1)
    good = {k: np.zeros_like(v) for k, v in m.parameters().items()}
    before = {k: v.copy() for k, v in m.parameters().items()}
    bad_shape = dict(good, **{"layers.1.att": np.zeros((2, 2))})
    with pytest.raises(ValueError, match=r"params\['layers.1.att'\] must have shape \(1, 2\)"):
        m.load_parameters(bad_shape)
    missing = {k: v for k, v in good.items() if k != "layers.0.b_r"}
    with pytest.raises(KeyError, match="params is missing 'layers.0.b_r'"):
        m.load_parameters(missing)
    with pytest.raises(KeyError, match="unexpected key 'head.weight'"):
        m.load_parameters(dict(good, **{"head.weight": np.zeros((2, 2))}))
    nan = dict(good, **{"layers.0.W_l": np.full((8, 3), np.nan)})
    with pytest.raises(ValueError, match=r"params\['layers.0.W_l'\] must be finite"):
        m.load_parameters(nan)
    with pytest.raises(TypeError, match="params must be a mapping"):
        m.load_parameters([1, 2])
    for k, v in m.parameters().items():  # nothing was half-loaded
        np.testing.assert_array_equal(v, before[k])


def test_get_config_is_json_and_rebuilds_the_model():
    m = GATv2Network(5, 3, 2, num_layers=3, heads=2, readout="max", residual=True, dropout=0.2,
                     attention_activation="softplus", dtype=np.float64, seed=9)
    cfg = json.loads(json.dumps(m.get_config()))
    m2 = GATv2Network(**cfg)
    assert m2.get_config() == m.get_config()
    p1, p2 = m.parameters(), m2.parameters()
    assert list(p1) == list(p2)
    for k in p1:  # same seed -> same initialisation
        np.testing.assert_array_equal(p1[k], p2[k])
    m3 = GATv2Network(**dict(cfg, seed=10))
    assert not np.array_equal(m3.parameters()["layers.0.W_l"], p1["layers.0.W_l"])


def test_forward_training_dropout_is_reproducible_and_eval_is_deterministic():
    rng = np.random.default_rng(3)
    g, x, _ = node_problem(rng)
    m = GATv2Network(3, 4, 2, heads=2, seed=0)
    a = m.forward(g, x, training=True, rng=np.random.default_rng(5))[0]
    b = m.forward(g, x, training=True, rng=np.random.default_rng(5))[0]
    c = m.forward(g, x, training=True, rng=np.random.default_rng(6))[0]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    e = m.output(g, x)
    np.testing.assert_array_equal(e, m.forward(g, x, training=False, rng=np.random.default_rng(6))[0])
    assert not np.allclose(a, e)
    # without rng the model's own generator advances: two training passes differ
    assert not np.array_equal(m.forward(g, x, training=True)[0], m.forward(g, x, training=True)[0])


def test_sparse_input_stays_sparse():
    rng = np.random.default_rng(4)
    g = random_graph(rng, 30, 90)
    dense = (rng.random((30, 12)) < 0.2) * rng.normal(size=(30, 12))
    xs = sp.csr_matrix(dense)
    m = GATv2Network(12, 4, 3, heads=2, seed=0, dtype=np.float64)
    np.testing.assert_allclose(m.output(g, xs), m.output(g, dense), rtol=1e-12, atol=1e-14)
    out, cache = m.forward(g, xs, training=True, rng=np.random.default_rng(0))
    assert sp.issparse(cache.layer_caches[0].x)
    assert cache.masks[0].shape == (xs.nnz,) and (cache.masks[0] == 0).any()
    grads = m.backward(cache, np.ones_like(out))
    assert "x" not in grads and list(grads) == list(m.parameters())
    # the parameter gradients equal those of the dense input with the same values dropped
    dropped = cache.layer_caches[0].x.toarray()
    ref = GATv2Network(**m.get_config())
    ref.load_parameters(m.parameters())
    ref_out, ref_cache = ref.forward(g, dropped, training=False)
    # hidden dropout differs between the runs, so compare the eval-mode first layer only
    lc = m.layers[0].forward(g, sp.csr_array(dropped))[1]
    g_sparse = m.layers[0].backward(lc, np.ones((30, 8)))
    g_dense = ref.layers[0].backward(ref_cache.layer_caches[0], np.ones((30, 8)))
    np.testing.assert_allclose(g_sparse["W_l"], g_dense["W_l"], rtol=1e-12, atol=1e-14)


def test_float32_model_and_inputs_untouched():
    rng = np.random.default_rng(5)
    g, x, ptr = graph_problem(rng, in_features=3)
    x0 = x.copy()
    m = GATv2Network(3, 4, 2, heads=2, readout="mean", seed=0)
    out, cache = m.forward(g, x, graph_ptr=ptr, training=True)
    assert out.dtype == np.float32 and out.shape == (3, 2)
    grads = m.backward(cache, np.ones_like(out))
    assert all(v.dtype == np.float32 for v in grads.values())
    np.testing.assert_array_equal(x, x0)
    # an empty graph in the batch still gets an output (pooled to 0, then the head's bias)
    np.testing.assert_allclose(m.output(g, x, ptr)[1], m.head.params["bias"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="readout must be None, 'mean', 'sum' or 'max'"):
        GATv2Network(3, 4, 2, readout="attention")
    with pytest.raises(ValueError, match="activation must be one of"):
        GATv2Network(3, 4, 2, activation="tanh")
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        GATv2Network(3, 4, 2, num_layers=0)
    with pytest.raises(ValueError, match="attention_dropout must be < 1"):
        GATv2Network(3, 4, 2, attention_dropout=1.0)
    with pytest.raises(ValueError, match="dropout must be >= 0"):
        GATv2Network(3, 4, 2, dropout=-0.5)
    with pytest.raises(TypeError, match="seed must be None or an int"):
        GATv2Network(3, 4, 2, seed=1.5)
    with pytest.raises(TypeError, match="hidden_features must be an int"):
        GATv2Network(3, "4", 2)
    with pytest.raises(ValueError, match="attention_activation must be one of"):
        GATv2Network(3, 4, 2, attention_activation="tanh")

    rng = np.random.default_rng(0)
    g, x, ptr = graph_problem(rng)
    node = GATv2Network(3, 4, 2, heads=2)
    pooled = GATv2Network(3, 4, 2, heads=2, readout="sum")
    with pytest.raises(ValueError, match="graph_ptr is required with readout='sum'"):
        pooled.forward(g, x)
    with pytest.raises(ValueError, match="graph_ptr must be None for a node-level model"):
        node.forward(g, x, graph_ptr=ptr)
    with pytest.raises(ValueError, match="graph_ptr must end at num_nodes"):
        pooled.forward(g, x, graph_ptr=np.array([0, 3]))
    with pytest.raises(ValueError, match="x must have in_features = 3 columns"):
        node.forward(g, x[:, :2])
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        node.forward(g, x, training=True, rng=42)
    with pytest.raises(TypeError, match="graph must be a gatfast.CSRGraph"):
        node.forward(np.eye(g.num_nodes), x)
    out, cache = node.forward(g, x)
    with pytest.raises(ValueError, match=r"grad_out must have shape \(9, 2\)"):
        node.backward(cache, np.ones((9, 3)))
    with pytest.raises(ValueError, match="theta_r must be one of"):
        node.backward(cache, np.ones_like(out), theta_r="quadratic")
    with pytest.raises(TypeError, match="cache must be the NetworkCache"):
        node.backward(None, np.ones_like(out))


@pytest.mark.parametrize("kind", ["square", "blocks", "bipartite"])
@pytest.mark.parametrize("nodes", [16, 3000])  # the fast small path and the general one
def test_backward_without_input_grad_gives_the_same_parameter_gradients(kind, nodes):
    """input_grad=False (what training uses) skips only the input gradient: every other gradient is the same bits."""
    from gatfast.data import make_csbm
    from gatfast.sampling import sample_blocks

    rng = np.random.default_rng(0)
    ds = make_csbm(num_nodes=nodes, num_features=9, avg_degree=3, seed=1)
    f_in = (9, 5) if kind == "bipartite" else 9
    layers = 1 if kind == "bipartite" else 2
    net = GATv2Network(f_in, 8, 3, num_layers=layers, heads=2, seed=0, dropout=0.3, attention_dropout=0.2)
    if kind == "square":
        graph, x = ds.graph, ds.x
    elif kind == "blocks":
        from gatfast._random import RandomKeys

        batch = sample_blocks(ds.graph, np.arange(0, nodes, 3), [4, 4], RandomKeys(0, 1, 2))
        graph, x = batch.graphs, ds.x[batch.input_ids]
    else:
        graph = sp.random(nodes // 2, nodes, density=4 / nodes, format="csr", random_state=2)
        x = (ds.x, rng.normal(size=(nodes // 2, 5)).astype(np.float32))
    out, cache = net.forward(graph, x, training=True, rng=np.random.default_rng(3))
    grad = rng.normal(size=out.shape).astype(out.dtype)
    full = net.backward(cache, grad)
    lean = net.backward(cache, grad, input_grad=False)
    assert "x" in full and "x" not in lean
    assert set(lean) == set(full) - {"x"}
    for k in lean:
        assert np.array_equal(lean[k], full[k]), k


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflowing BLAS call warns before the error
@pytest.mark.parametrize("nodes", [7, 3000])  # the fast small path and the general one
def test_non_finite_values_are_still_refused_with_the_layer_checks_skipped(nodes):
    # the layers skip the finiteness pass over what the network already checked: its input
    # and the gradients the layers pass down; what comes from the caller is still checked
    rng = np.random.default_rng(nodes)
    g = random_graph(rng, nodes, 3 * nodes)
    x = rng.normal(size=(nodes, 3)).astype(np.float32)
    model = GATv2Network(3, 4, 2, heads=2, num_layers=3, dtype=np.float32, seed=0)
    for value in (np.nan, np.inf):
        bad = x.copy()
        bad[-1, -1] = value
        with pytest.raises(ValueError, match="x must be finite"):
            model.forward(g, bad)
        out, cache = model.forward(g, x, training=True, rng=np.random.default_rng(0))
        grad = np.ones_like(out)
        grad[-1, -1] = value
        with pytest.raises(ValueError, match="grad_out must be finite"):
            model.backward(cache, grad)
    huge = model.parameters()["layers.1.W_l"]
    huge[...] = 3e38  # an overflow inside the network is caught where it happens
    with pytest.raises(ValueError, match="overflow"):
        model.forward(g, x * 1e3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("keyed", [False, True])  # NumPy masks; the fused keyed pass that flags it as it writes
@pytest.mark.parametrize("nodes", [7, 3000])  # the fast small path and the general one
def test_a_dropout_overflow_on_a_row_no_edge_reads_is_refused(nodes, keyed):
    # x * 1 / (1 - p) overflows for |x| near float32's maximum; the last node has no edges and
    # no self loop, so the inf would never reach an output: the dropout output is checked
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, nodes - 1, (2, 3 * nodes))
    g = CSRGraph.from_edge_index(np.stack([src, dst]), nodes)
    model = GATv2Network(16, 2, 2, num_layers=2, heads=1, dropout=0.5, add_self_loops=False, dtype=np.float32,
                         seed=0)
    x = np.ones((nodes, 16), np.float32)
    x[-1] = 3e38  # 16 values: some survive the dropout
    with pytest.raises(ValueError, match="must be finite"):
        model.forward(g, x, training=True, rng=RandomKeys(0) if keyed else np.random.default_rng(0))


def test_x_finite_skips_only_the_nan_pass_and_never_a_cast_check():
    # the training loop checks its dataset once and passes x_finite=True for the rows it gathers
    from gatfast.models.stack import stack_forward

    g = CSRGraph.from_edge_index(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), 4)
    model = GATv2Network(3, 4, 2, num_layers=2, heads=2, dtype=np.float32, seed=0)
    x = np.ones((4, 3), np.float32)
    x[2, 1] = np.nan
    with pytest.raises(ValueError, match="must be finite"):
        stack_forward(model, g, x, None, False, np.random.default_rng(0), None)
    # skipped: a broken promise still never passes silently, the layer's output check stops it
    with pytest.raises(ValueError, match="layer output"):
        stack_forward(model, g, x, None, False, np.random.default_rng(0), None, x_finite=True)
    big = np.full((4, 3), 1e300)  # finite in float64, inf once cast to the model's float32
    with pytest.raises(ValueError):
        stack_forward(model, g, big, None, False, np.random.default_rng(0), None, x_finite=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nodes", [16, 3000])  # the fast small path and the general one
@pytest.mark.parametrize("readout", [None, "mean"])
def test_training_backward_through_the_activations_gives_the_evaluation_bits(dtype, nodes, readout):
    """A training forward keeps ELU's derivative from its one evaluation of exp (float32): the backward then
    multiplies by it. Without dropout that is the same function as the evaluation-mode forward, whose
    backward evaluates exp again: every gradient must be the same bits."""
    from gatfast.data import make_csbm

    ds = make_csbm(num_nodes=nodes, num_features=9, avg_degree=3, seed=1)
    x = (ds.x * 3).astype(dtype)  # many negative pre-activations
    net = GATv2Network(9, 17, 3, num_layers=3, heads=2, out_heads=1, seed=0, dtype=dtype, readout=readout,
                       dropout=0.0, attention_dropout=0.0)
    ptr = None if readout is None else np.array([0, nodes // 2, nodes])
    out_t, cache_t = net.forward(ds.graph, x, training=True, graph_ptr=ptr)
    out_e, cache_e = net.forward(ds.graph, x, training=False, graph_ptr=ptr)
    assert np.array_equal(out_t, out_e)
    slopes = [s is not None for s in cache_t.slopes]
    activations = 3 if readout else 2  # the last layer too when a readout follows
    assert slopes == [dtype == np.float32] * activations and cache_e.slopes == [None] * activations
    grad = np.random.default_rng(1).normal(size=out_t.shape).astype(dtype)
    want = net.backward(cache_e, grad)
    got = net.backward(cache_t, grad)
    assert set(got) == set(want)
    for k in want:
        assert got[k].view(np.uint8).tobytes() == want[k].view(np.uint8).tobytes(), k


@pytest.mark.parametrize("nodes", [10, 3000])  # the layers' one-call path (a road scene), and the general one
@pytest.mark.parametrize("readout", [None, "mean"])
def test_output_keeps_no_layer_cache_and_gives_forwards_bits(monkeypatch, nodes, readout):
    from gatfast.data import make_csbm
    from gatfast.layers import small

    ds = make_csbm(num_nodes=nodes, num_features=9, avg_degree=2, seed=1)
    net = GATv2Network(9, 8, 3, num_layers=3, heads=2, seed=0, readout=readout)
    ptr = None if readout is None else np.array([0, nodes // 2, nodes])
    want, _ = net.forward(ds.graph, ds.x, graph_ptr=ptr)
    kept = []
    original = small.forward

    def spy(layer, graph, x, edge_attr, training, keep_cache=True):
        kept.append(keep_cache)
        return original(layer, graph, x, edge_attr, training, keep_cache)

    monkeypatch.setattr(small, "forward", spy)
    got = net.output(ds.graph, ds.x, graph_ptr=ptr)
    assert got.tobytes() == want.tobytes()
    assert kept == [False] * 3
    assert ds.x.flags.writeable


@pytest.mark.parametrize("nodes", [16, 3000])
@pytest.mark.parametrize("out_features", [1, 8, 17])  # the kernel's vector channels and its tail
@pytest.mark.parametrize("ahead", [None, 16])  # the source pass without prefetch, and with (signs)
def test_backward_without_input_grad_skips_the_edge_attribute_gradient(monkeypatch, nodes, out_features, ahead):
    """With edge features, input_grad=False also leaves out "edge_attr" (its per-edge sums are skipped):
    every parameter's gradient is the same bits, in the layer and in a network."""
    import gatfast.layers.passes as passes

    monkeypatch.setattr(passes, "source_pass_ahead", lambda gathered, span: ahead)
    rng = np.random.default_rng(5)
    g = random_graph(rng, nodes, 4 * nodes)
    x = rng.normal(size=(nodes, 6)).astype(np.float32)
    attr = rng.normal(size=(g.nnz, 3)).astype(np.float32)
    layer = GATv2Layer(6, out_features, heads=2, edge_dim=3, seed=1)
    out, cache = layer.forward(g, x, attr)
    grad = rng.normal(size=out.shape).astype(out.dtype)
    full = layer.backward(cache, grad)
    lean = layer.backward(cache, grad, input_grad=False)
    assert full["edge_attr"].shape == attr.shape and np.abs(full["edge_attr"]).sum() > 0
    assert lean["edge_attr"] is None and set(lean) == set(full)
    for k in layer.params:
        assert np.array_equal(lean[k], full[k]), k
    again = layer.backward(cache, grad)  # the skipped pass leaves nothing behind for the next call
    assert np.array_equal(again["edge_attr"], full["edge_attr"])

    net = GATv2Network(6, 8, 3, num_layers=2, heads=2, edge_dim=3, seed=0)
    out, cache = net.forward(g, x, edge_attr=attr)
    grad = rng.normal(size=out.shape).astype(out.dtype)
    full = net.backward(cache, grad)
    lean = net.backward(cache, grad, input_grad=False)
    assert "edge_attr" in full and "edge_attr" not in lean
    assert set(lean) == set(full) - {"x", "edge_attr"}
    for k in lean:
        assert np.array_equal(lean[k], full[k]), k
