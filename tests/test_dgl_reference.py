"""DGL's GATv2Conv (the benchmark peer in bench/reference_dgl.py) against gatfast, in float64.

DGL 2.1 lives in its own environment (``bash bench/setup_dgl_env.sh``), so in
gatfast's environment this whole file is skipped. Run it with the DGL python::

    PYTHONPATH=. ~/.cache/gatfast/dgl-venv/bin/python -m pytest -q tests/test_dgl_reference.py

It checks that the weight mapping, the edge direction, the self-loop handling
and the 2-layer recipe make DGL compute exactly gatfast's function, so that
the benchmark compares equal work.
"""

import sys
from pathlib import Path

import naive
import numpy as np
import pytest

import gatfast
from gatfast import CSRGraph, GATv2Layer
from gatfast.models import mse_loss, softmax_cross_entropy

torch = pytest.importorskip("torch")
pytest.importorskip("dgl")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import reference_dgl as R  # noqa: E402
import workloads  # noqa: E402

TOL = 1e-10

CFGS = [
    dict(heads=1),
    dict(heads=3),
    dict(heads=1, concat=False),
    dict(heads=3, concat=False),
    dict(heads=3, share_weights=True),
    dict(heads=3, bias=False),
    dict(heads=3, negative_slope=0.01),
    dict(heads=3, residual=True),
    dict(heads=2, concat=False, residual=True),
    dict(heads=2, concat=False, bias=False, residual=True, share_weights=True),
    dict(heads=3, add_self_loops=False),
    dict(heads=1, concat=False, add_self_loops=False),
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


def dgl_run(mod, graph, x, R_):
    """DGL output, attention and gradients (gatfast's names, plus ``x``) for upstream gradient ``R_``."""
    g = R.dgl_graph(graph)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    out, alpha = mod(g, xt, get_attention=True)
    (out * torch.from_numpy(R_)).sum().backward()
    grads = R.gatfast_grads(mod)
    grads["x"] = xt.grad.numpy()
    return out.detach().numpy(), alpha.detach().numpy(), grads


@pytest.mark.parametrize("cfg", CFGS, ids=_id)
def test_layer_matches_gatfast_float64(cfg):
    rng = np.random.default_rng(len(_id(cfg)))
    graph = naive.mixed_graph(rng, n=15, hub_degree=9)  # duplicates, loops, empty rows, a hub
    layer = GATv2Layer(6, 4, dtype=np.float64, seed=1, **cfg)
    naive.randomize_params(layer, rng)  # biases too (they start at zero)
    x = rng.standard_normal((graph.num_nodes, 6))

    out, cache = layer.forward(graph, x)
    mod = R.layer_from_gatfast(layer)
    assert next(mod.parameters()).dtype == torch.float64
    R_ = rng.standard_normal(out.shape)
    # DGL adds no loops of its own: it gets the graph gatfast's attention runs on
    got_out, got_alpha, got = dgl_run(mod, layer.attention_graph(graph), x, R_)

    assert got_out.shape == out.shape
    assert R.rel_err(got_out, out) < TOL
    assert R.rel_err(got_alpha, cache.alpha) < TOL  # same edge order, same direction
    for theta_r in ("linear", "pairwise"):
        want = layer.backward(cache, R_, theta_r=theta_r)
        assert set(got) == set(want)
        for name, w in want.items():
            err = R.rel_err(got[name], w)
            assert err < TOL, f"{theta_r} {name}: {err:.2e}"


def test_edge_direction_is_source_to_target():
    # a path 0 -> 1 -> 2 and nothing else: node 0 has no in-edge, node 2 hears only from 1
    graph = CSRGraph.from_edge_index(np.array([[0, 1], [1, 2]]), 3)
    assert graph.to_edge_index().tolist() == [[0, 1], [1, 2]]
    g = R.dgl_graph(graph)
    assert g.in_degrees().tolist() == [0, 1, 1]
    assert [t.tolist() for t in g.edges()] == [[0, 1], [1, 2]]

    layer = GATv2Layer(2, 2, add_self_loops=False, dtype=np.float64, seed=0)
    naive.randomize_params(layer, np.random.default_rng(0))
    x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    out = R.layer_from_gatfast(layer)(g, torch.from_numpy(x)).detach().numpy()
    p = layer.params
    # one in-edge: attention 1, the message is the source's W_l x_j + b_l, plus the output bias
    np.testing.assert_allclose(out[1], p["W_l"] @ x[0] + p["b_l"] + p["bias"], rtol=1e-12)
    np.testing.assert_allclose(out[2], p["W_l"] @ x[1] + p["b_l"] + p["bias"], rtol=1e-12)
    # no in-edge: DGL is allowed the node (allow_zero_in_degree) and aggregates nothing, as gatfast
    np.testing.assert_allclose(out[0], p["bias"], rtol=1e-12)
    np.testing.assert_allclose(out, layer.forward(graph, x)[0], rtol=1e-12)


@pytest.mark.parametrize("layers", [2, 3])
def test_network_matches_gatfast_float64(layers):
    """The 2-layer recipe (cross-entropy) and the 3-layer scenes network (MSE), any depth mapped alike."""
    rng = np.random.default_rng(3)
    graph = naive.mixed_graph(rng, n=20, hub_degree=12).with_self_loops()
    n, f, classes = graph.num_nodes, 7, 3
    x = rng.standard_normal((n, f))
    model = gatfast.GATv2Network(f, 4, classes if layers == 2 else 2, num_layers=layers, heads=3,
                                 dtype=np.float64, seed=2)
    for layer in model.layers:
        naive.randomize_params(layer, rng)
    logits, cache = model.forward(graph, x, training=False)
    if layers == 2:
        y = rng.integers(0, classes, n)
        mask = rng.random(n) < 0.5
        _, grad = softmax_cross_entropy(logits, y, mask)
    else:
        y = rng.standard_normal((n, 2))
        _, grad = mse_loss(logits, y)
    want = model.backward(cache, grad)

    net = R.network_from_gatfast(model)
    assert len(net.convs) == layers
    net.eval()  # no dropout
    out = net(R.dgl_graph(graph), torch.from_numpy(x))
    if layers == 2:
        m = torch.from_numpy(mask)
        torch.nn.functional.cross_entropy(out[m], torch.from_numpy(y)[m]).backward()
    else:
        torch.nn.functional.mse_loss(out, torch.from_numpy(y)).backward()
    assert R.rel_err(out.detach().numpy(), logits) < TOL
    for l, conv in enumerate(net.convs):
        for k, v in R.gatfast_grads(conv).items():
            assert R.rel_err(v, want[f"layers.{l}.{k}"]) < TOL, f"layers.{l}.{k}"


def test_bipartite_layer_matches_gatfast_float64():
    """(x_src, x_dst) of different widths on DGL's bipartite graph: output and both input gradients."""
    rng = np.random.default_rng(5)
    n_src, n_dst = 9, 6
    src = rng.integers(0, n_src, 30)
    dst = rng.integers(0, n_dst, 30)
    graph = CSRGraph.from_edge_index(np.stack([src, dst]), size=(n_src, n_dst))
    layer = GATv2Layer((5, 3), 4, heads=2, add_self_loops=False, dtype=np.float64, seed=1)
    naive.randomize_params(layer, rng)
    x_src, x_dst = rng.standard_normal((n_src, 5)), rng.standard_normal((n_dst, 3))
    out, cache = layer.forward(graph, (x_src, x_dst))
    R_ = rng.standard_normal(out.shape)
    want = layer.backward(cache, R_)
    mod = R.layer_from_gatfast(layer)
    xs = torch.from_numpy(x_src).requires_grad_(True)
    xd = torch.from_numpy(x_dst).requires_grad_(True)
    got = mod(R.dgl_graph(graph, bipartite=True), (xs, xd))
    (got * torch.from_numpy(R_)).sum().backward()
    assert R.rel_err(got.detach().numpy(), out) < TOL
    assert R.rel_err(xs.grad.numpy(), want["x"][0]) < TOL and R.rel_err(xd.grad.numpy(), want["x"][1]) < TOL
    for k, v in R.gatfast_grads(mod).items():
        assert R.rel_err(v, want[k]) < TOL, k


def test_edge_features_are_refused():
    layer = GATv2Layer(4, 2, edge_dim=3, seed=0)
    with pytest.raises(ValueError, match="no edge features"):
        R.layer_from_gatfast(layer)
    with pytest.raises(ValueError, match="no edge features"):
        R.DglRunner(workloads.make_workload("large-edge", "tiny"))


def test_dgl_has_no_output_bias_of_its_own():
    # the reason DglGATv2 adds gatfast's output bias itself
    mod = R.make_layer(in_features=3, out_features=2, heads=2)
    names = {k for k, _ in mod.conv.named_parameters()}
    assert names == {"fc_src.weight", "fc_src.bias", "fc_dst.weight", "fc_dst.bias", "attn"}
    with pytest.raises(ValueError, match="identity"):
        R.make_layer(in_features=4, out_features=2, heads=2, residual=True)


@pytest.mark.parametrize("name", [n for n in workloads.WORKLOADS if workloads.dgl_can_run(n)])
def test_runner_agrees_with_gatfast_float32(name):
    w = workloads.make_workload(name, "tiny")
    errs = R.agreement_errors(w)
    assert errs["out"] < R.FLOAT32_TOL and max(errs.values()) < R.FLOAT32_TOL, errs
    assert R.check_agreement(w) == max(errs.values())
    if w.bipartite:
        assert {"x_src", "x_dst"} <= set(errs)
    r = R.DglRunner(w)
    out = r.forward()
    assert tuple(out.shape) == (w.num_nodes, w.out_dim)
    r.forward_backward()
    if w.kind == "layer":
        r.backward_only(r.forward_cache())
    before = [p.detach().clone() for p in r.model.parameters()]
    r.train_step()
    assert any(not torch.equal(a, b) for a, b in zip(before, r.model.parameters()))  # Adam moved them


def test_agreement_detects_a_wrong_mapping(monkeypatch):
    # the check must be able to fail: swap source and target projections
    w = workloads.make_workload("degree-4-linear", "tiny")
    real = R.load_gatfast_params

    def swapped(mod, params):
        params = dict(params)
        params["W_l"], params["W_r"] = params["W_r"], params["W_l"]
        real(mod, params)

    monkeypatch.setattr(R, "load_gatfast_params", swapped)
    with pytest.raises(AssertionError, match="DGL and gatfast differ"):
        R.check_agreement(w)
