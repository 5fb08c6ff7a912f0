"""Moving models between PyG and gatfast: GATv2Layer.from_pyg / to_pyg / to_pyg_state_dict,
GATv2Network.from_pyg / to_pyg, CSRGraph.from_pyg, in float64 to 1e-12 relative."""

import subprocess
import sys

import naive
import numpy as np
import pytest

from gatfast import CSRGraph, GATv2Layer, GATv2Network

torch = pytest.importorskip("torch")
pyg_nn = pytest.importorskip("torch_geometric.nn")
from torch_geometric.data import Data  # noqa: E402

TOL = 1e-12


def random_conv(seed, *args, **kwargs):
    """A float64 GATv2Conv with every parameter (biases included) drawn at random."""
    torch.manual_seed(seed)
    conv = pyg_nn.GATv2Conv(*args, **kwargs).double()
    with torch.no_grad():
        for p in conv.parameters():
            p.normal_()
    return conv.eval()


def random_edges(rng, n_src, n_dst, e=40):
    """edge_index with duplicates and index-equal self loops, and a few empty target rows."""
    src = rng.integers(0, n_src, e)
    dst = rng.integers(0, max(1, n_dst - 2), e)
    loops = np.arange(min(3, n_src, n_dst))
    return np.stack([np.r_[src, loops, src[:2]], np.r_[dst, loops, dst[:2]]])


def pyg_out(conv, x, ei, attr=None):
    xt = tuple(torch.from_numpy(a) for a in x) if isinstance(x, tuple) else torch.from_numpy(x)
    at = None if attr is None else torch.from_numpy(attr)
    with torch.no_grad():
        return conv(xt, torch.from_numpy(ei), at).numpy()


LAYER_CFGS = [
    dict(heads=1),
    dict(heads=3),
    dict(heads=3, concat=False),
    dict(heads=2, share_weights=True),
    dict(heads=2, residual=True),
    dict(heads=3, concat=False, residual=True, share_weights=True),
    dict(heads=2, bias=False),
    dict(heads=2, negative_slope=0.05, add_self_loops=False),
    dict(heads=2, dropout=0.3),
    dict(heads=2, edge_dim=3),
    dict(heads=4, edge_dim=1, fill_value="max", concat=False),
    dict(heads=2, edge_dim=2, fill_value=0.5, residual=True),
    dict(heads=2, edge_dim=2, fill_value="vector"),
    dict(heads=2, edge_dim=3, add_self_loops=False, share_weights=True),
    dict(heads=2, bipartite=True),
    dict(heads=3, bipartite=True, edge_dim=2, residual=True, concat=False),
    dict(heads=2, bipartite=True, add_self_loops=False, bias=False),
    dict(heads=2, bipartite=True, share_weights=True, fill_value="add", edge_dim=2),
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


@pytest.mark.parametrize("cfg", LAYER_CFGS, ids=_id)
def test_layer_from_pyg_and_back_gives_the_same_outputs(cfg):
    cfg = dict(cfg)
    rng = np.random.default_rng(len(_id(cfg)))
    bipartite = cfg.pop("bipartite", False)
    if cfg.get("fill_value") == "vector":
        cfg["fill_value"] = torch.tensor([0.25, -1.5], dtype=torch.float64)
    share = cfg.get("share_weights", False)
    f_src, f_dst = (5, 5) if share else (5, 4)
    n_src, n_dst = (12, 7) if bipartite else (10, 10)
    conv = random_conv(1, (f_src, f_dst) if bipartite else f_src, 3, **cfg)
    ei = random_edges(rng, n_src, n_dst)
    x = (rng.standard_normal((n_src, f_src)), rng.standard_normal((n_dst, f_dst))) if bipartite \
        else rng.standard_normal((n_src, f_src))
    attr = rng.standard_normal((ei.shape[1], cfg["edge_dim"])) if cfg.get("edge_dim") else None
    want = pyg_out(conv, x, ei, attr)

    layer = GATv2Layer.from_pyg(conv)
    assert layer.dtype == np.float64 and layer.get_config()["in_features"] == ([f_src, f_dst] if bipartite else f_src)
    graph = CSRGraph.from_edge_index(ei, size=(n_src, n_dst)) if bipartite else CSRGraph.from_edge_index(ei, n_src)
    if attr is not None:
        graph, attr_csr = CSRGraph.from_edge_index(ei, size=(n_src, n_dst) if bipartite else None,
                                                   num_nodes=None if bipartite else n_src, edge_attr=attr)
    got, _ = layer.forward(graph, x, None if attr is None else attr_csr)
    assert naive.rel_err(got, want) < TOL

    # and back: a fresh conv from the layer, and the state dict into the original conv's twin
    back = layer.to_pyg().eval()
    assert naive.rel_err(pyg_out(back, x, ei, attr), got) < TOL
    sd = layer.to_pyg_state_dict()
    assert list(sd) == list(conv.state_dict())
    twin = random_conv(2, (f_src, f_dst) if bipartite else f_src, 3, **cfg)
    twin.load_state_dict(sd)
    for key, value in conv.state_dict().items():
        assert torch.equal(twin.state_dict()[key], value), key


def test_layer_from_pyg_copies_and_keeps_float32():
    conv = pyg_nn.GATv2Conv(6, 4, heads=2, edge_dim=2)
    layer = GATv2Layer.from_pyg(conv)
    assert layer.dtype == np.float32
    np.testing.assert_array_equal(layer.params["W_l"], conv.lin_l.weight.detach().numpy())
    layer.params["W_l"][:] = 0.0  # the conv is not affected
    assert conv.lin_l.weight.abs().sum() > 0
    assert GATv2Layer.from_pyg(conv, dtype=np.float64).dtype == np.float64
    half = pyg_nn.GATv2Conv(6, 4).half()
    with pytest.raises(ValueError, match="float16.*dtype="):
        GATv2Layer.from_pyg(half)
    assert GATv2Layer.from_pyg(half, dtype=np.float32).dtype == np.float32


def test_layer_from_pyg_refuses_what_gatfast_cannot_express():
    with pytest.raises(TypeError, match="GATv2Conv"):
        GATv2Layer.from_pyg(pyg_nn.GATConv(4, 2))
    with pytest.raises(ValueError, match="lazy"):
        GATv2Layer.from_pyg(pyg_nn.GATv2Conv(-1, 2))
    with pytest.raises(ValueError, match="aggr"):
        GATv2Layer.from_pyg(pyg_nn.GATv2Conv(4, 2, aggr="mean"))
    with pytest.raises(ValueError, match="flow"):
        GATv2Layer.from_pyg(pyg_nn.GATv2Conv(4, 2, flow="target_to_source"))
    lazy = pyg_nn.GATv2Conv(-1, 2, heads=2)  # initialised by a first call: fine
    lazy(torch.ones(3, 5), torch.tensor([[0, 1], [1, 2]]))
    assert GATv2Layer.from_pyg(lazy).in_features == 5
    for variant in (dict(root_weight="theta_r"), dict(attention_activation="softplus")):
        layer = GATv2Layer(4, 2, **variant)
        for method in (layer.to_pyg, layer.to_pyg_state_dict):
            with pytest.raises(ValueError, match="GAT\\+"):
                method()


def test_load_pyg_state_dict_checks_keys_and_shapes_before_copying():
    layer = GATv2Layer(4, 3, heads=2, share_weights=True, seed=0)
    before = layer.params.copy_arrays()
    sd = {k: v.clone() for k, v in layer.to_pyg_state_dict().items()}
    sd["lin_r.weight"] = sd["lin_r.weight"] + 1.0
    with pytest.raises(ValueError, match="lin_r.weight.*shares"):
        layer.load_pyg_state_dict(sd)
    del sd["lin_r.weight"], sd["lin_r.bias"]  # shared weights may leave lin_r out
    sd["att"] = torch.zeros(1, 2, 3, dtype=torch.float32)
    layer.load_pyg_state_dict(sd)
    assert not layer.params["att"].any()
    with pytest.raises(KeyError, match="missing 'bias'"):
        layer.load_pyg_state_dict({k: v for k, v in sd.items() if k != "bias"})
    with pytest.raises(KeyError, match="unexpected key 'res.weight'"):
        layer.load_pyg_state_dict({**sd, "res.weight": torch.zeros(6, 4)})
    sd["lin_l.weight"] = torch.zeros(6, 5)
    sd["att"] = torch.ones(1, 2, 3)
    with pytest.raises(ValueError, match=r"state_dict\['lin_l.weight'\] must have shape \(6, 4\)"):
        layer.load_pyg_state_dict(sd)
    assert not layer.params["att"].any()  # nothing was copied
    assert set(before) == set(layer.params)


# ---------------------------------------------------------------------- stacks
def pyg_forward(model, x, ei, attr=None, batch=None, readout=None, act=torch.nn.functional.elu):
    """The forward pass gatfast/models/pyg.py documents, in eval mode."""
    convs = model["convs"] if isinstance(model, torch.nn.ModuleDict) else model
    h = torch.from_numpy(x)
    at = None if attr is None else torch.from_numpy(attr)
    with torch.no_grad():
        for l, conv in enumerate(convs):
            h = conv(h, torch.from_numpy(ei), at)
            if readout is not None or l < len(convs) - 1:
                h = act(h)
        if readout is not None:
            from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

            pool = {"sum": global_add_pool, "mean": global_mean_pool, "max": global_max_pool}[readout]
            h = model["head"](pool(h, torch.from_numpy(batch)))
    return h.numpy()


STACKS = [
    dict(layers=2, heads=4, hidden=3, out_heads=1),
    dict(layers=3, heads=2, hidden=4, out_heads=3, residual=True, edge_dim=2),
    dict(layers=2, heads=3, hidden=2, out_heads=2, share_weights=True, edge_dim=3, fill_value="min",
         activation="relu"),
    dict(layers=1, heads=1, hidden=5, out_heads=2),
    dict(layers=2, heads=2, hidden=3, readout="sum", edge_dim=2),
    dict(layers=3, heads=1, hidden=4, readout="max", residual=True),
]


@pytest.mark.parametrize("cfg", STACKS, ids=_id)
def test_network_from_pyg_and_back_gives_the_same_outputs(cfg):
    rng = np.random.default_rng(len(_id(cfg)))
    L, H, C, F, K = cfg["layers"], cfg["heads"], cfg["hidden"], 6, 3
    readout, edge_dim = cfg.get("readout"), cfg.get("edge_dim")
    common = dict(residual=cfg.get("residual", False), edge_dim=edge_dim, share_weights=cfg.get("share_weights", False),
                  fill_value=cfg.get("fill_value", "mean"))
    convs, width = [], F
    for l in range(L):
        last = l == L - 1 and readout is None
        heads, out = (cfg["out_heads"], K) if last else (H, C)
        convs.append(random_conv(10 + l, width, out, heads=heads, concat=not last, **common))
        width = H * C
    model = torch.nn.ModuleDict({"convs": torch.nn.ModuleList(convs)})
    if readout is not None:
        torch.manual_seed(5)
        model["head"] = torch.nn.Linear(H * C, K).double()
    act = torch.nn.functional.relu if cfg.get("activation") == "relu" else torch.nn.functional.elu

    sizes = [5, 8, 4]  # three graphs in one batch
    n = sum(sizes)
    ei = np.concatenate([random_edges(rng, s, s, e=3 * s) + off for s, off in zip(sizes, np.cumsum([0] + sizes[:-1]))],
                        axis=1)
    batch = np.repeat(np.arange(3), sizes)
    x = rng.standard_normal((n, F))
    attr = rng.standard_normal((ei.shape[1], edge_dim)) if edge_dim else None
    want = pyg_forward(model, x, ei, attr, batch, readout, act)

    net = GATv2Network.from_pyg(model, readout=readout, activation=cfg.get("activation", "elu"))
    assert net.num_layers == L and net.dtype == np.float64 and net.readout == readout
    if attr is not None:
        graph, attr_csr = CSRGraph.from_edge_index(ei, n, edge_attr=attr)
    else:
        graph, attr_csr = CSRGraph.from_edge_index(ei, n), None
    ptr = np.r_[0, np.cumsum(sizes)] if readout else None
    got = net.output(graph, x, ptr, edge_attr=attr_csr)
    assert got.shape == want.shape
    assert naive.rel_err(got, want) < TOL

    back = net.to_pyg().eval()
    assert naive.rel_err(pyg_forward(back, x, ei, attr, batch, readout, act), got) < TOL
    sd = net.to_pyg_state_dict()
    assert list(sd) == list(model.state_dict())
    for key, value in model.state_dict().items():
        assert torch.equal(sd[key], value), key
    # a plain ModuleList (no head) converts too, and the state dict loads into a fresh network
    if readout is None:
        assert naive.rel_err(GATv2Network.from_pyg(model["convs"], activation=net.activation).output(
            graph, x, edge_attr=attr_csr), got) < TOL
    twin = GATv2Network(**{**net.get_config(), "seed": 3})
    twin.load_pyg_state_dict(model.state_dict())
    np.testing.assert_array_equal(twin.output(graph, x, ptr, edge_attr=attr_csr), got)


def test_network_from_pyg_refuses_structures_it_cannot_express():
    def convs(*specs):
        return torch.nn.ModuleList([pyg_nn.GATv2Conv(i, o, **kw) for i, o, kw in specs])

    with pytest.raises(ValueError, match="layer 1 has residual=True"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2)), (4, 3, dict(concat=False, residual=True))))
    with pytest.raises(ValueError, match="hidden layers are all alike"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2)), (4, 3, dict(heads=1)), (3, 3, dict(concat=False))))
    with pytest.raises(ValueError, match="bias=False"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2, bias=False)), (4, 3, dict(concat=False, bias=False))))
    with pytest.raises(ValueError, match="averages its heads"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2, concat=False)), (2, 3, dict(concat=False))))
    with pytest.raises(ValueError, match="last layer concatenates"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2)), (4, 3, dict(heads=2))))
    with pytest.raises(ValueError, match="layer 1 takes 5 features but layer 0 gives 4"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2)), (5, 3, dict(concat=False))))
    with pytest.raises(ValueError, match="needs the classifier"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2))), readout="sum")
    with pytest.raises(ValueError, match="readout is None"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2))), head=torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="pooled features"):
        GATv2Network.from_pyg(convs((4, 2, dict(heads=2))), head=torch.nn.Linear(3, 2), readout="mean")
    with pytest.raises(TypeError, match="layer 0: conv must be"):
        GATv2Network.from_pyg([torch.nn.Linear(3, 2)])
    with pytest.raises(ValueError, match="at least one"):
        GATv2Network.from_pyg(torch.nn.ModuleList())
    with pytest.raises(ValueError, match="activation"):
        GATv2Network.from_pyg(convs((4, 2, dict())), activation="gelu")
    net = GATv2Network(4, 2, 3, heads=2, seed=0)
    sd = net.to_pyg_state_dict()
    with pytest.raises(KeyError, match="unexpected key 'convs.2.att'"):
        net.load_pyg_state_dict({**sd, "convs.2.att": sd["convs.0.att"]})
    with pytest.raises(KeyError, match="layer 1: .*missing 'bias'"):
        net.load_pyg_state_dict({k: v for k, v in sd.items() if k != "convs.1.bias"})


# ---------------------------------------------------------------------- Data and scipy matrices
def test_csrgraph_from_pyg_data():
    rng = np.random.default_rng(0)
    ei = random_edges(rng, 9, 9)
    attr = rng.standard_normal((ei.shape[1], 2)).astype(np.float32)
    data = Data(x=torch.ones(9, 3), edge_index=torch.from_numpy(ei), edge_attr=torch.from_numpy(attr))
    graph, a = CSRGraph.from_pyg(data)
    want_graph, want_attr = CSRGraph.from_edge_index(ei, 9, edge_attr=attr)
    assert graph == want_graph and a.dtype == np.float32
    np.testing.assert_array_equal(a, want_attr)
    assert CSRGraph.from_pyg(Data(edge_index=torch.from_numpy(ei), num_nodes=12)).num_nodes == 12
    assert CSRGraph.from_pyg(data, edge_attr=False) == graph


def test_to_scipy_sparse_matrix_needs_rows_sources_and_the_warning_says_so():
    from torch_geometric.utils import to_scipy_sparse_matrix

    ei = np.array([[1, 2, 0], [0, 0, 2]])  # 1 -> 0, 2 -> 0, 0 -> 2
    A = to_scipy_sparse_matrix(torch.from_numpy(ei), num_nodes=3)  # A[src, dst]
    right = CSRGraph.from_edge_index(ei, 3)
    assert CSRGraph.from_scipy(A, rows="sources") == right
    with pytest.warns(UserWarning, match="to_scipy_sparse_matrix.*rows='sources'"):
        wrong = CSRGraph.from_scipy(A)
    assert wrong == CSRGraph.from_edge_index(ei[::-1], 3) != right  # every edge reversed


def test_without_torch_state_dicts_are_numpy_and_from_pyg_says_what_to_install():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['torch_geometric'] = None\n"
        "import numpy as np, gatfast\n"
        "layer = gatfast.GATv2Layer(3, 2, heads=2, seed=0)\n"
        "sd = layer.to_pyg_state_dict()\n"
        "assert all(type(v) is np.ndarray for v in sd.values()) and sd['att'].shape == (1, 2, 2)\n"
        "assert gatfast.GATv2Network(3, 2, 2, seed=0).to_pyg_state_dict()['convs.1.bias'].shape == (2,)\n"
        "for call in (lambda: gatfast.GATv2Layer.from_pyg(object()), layer.to_pyg):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as exc:\n"
        "        assert 'pip install gatfast[crosscheck]' in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError('no ImportError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
