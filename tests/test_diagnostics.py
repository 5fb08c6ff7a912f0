"""Θ_R gradient-flow diagnostics against brute force.

The brute-force check: node ``i``'s contribution to row ``h*C + d`` of Θ_R is
structurally zero iff node ``i``'s output does not move, to first order,
when ``r_i^(h, d)`` moves. Perturbing the bias ``b_r[h*C + d]`` by ``±eps``
moves ``r^(h, d)`` of *every* node by ``eps`` (the bias column of Θ_R), and
node ``i``'s output depends on no other node's ``r``, so one pair of forward
passes per channel shows, for all nodes at once, whose output changes.
"""

import csv
import os

import naive
import numpy as np
import pytest

from gatfast import GATv2Layer
from gatfast.diagnostics import (
    CAUSES,
    ThetaRFlowRecorder,
    structural_zero_causes,
    theta_r_flow,
    theta_r_flow_from_cache,
)
from gatfast.kernels import ACTIVATIONS, gatv2_forward_edge_rows, gatv2_forward_rows
from gatfast.kernels.prefetch import PREFETCH_DISTANCE

EPS = 1e-4  # no regime flips: make_case keeps |z| > 1e-3
DEAD = 1e-10  # |Δout| / (2 eps) below this: no change (rounding gives ~1e-12)
LIVE = 1e-9  # above this: a real change; nothing may fall in between


def make_case(seed, n=20, max_degree=4, in_features=3, empty_rows=1, **kw):
    """A random graph, features and a float64 layer whose scores stay away from the kinks."""
    rng = np.random.default_rng(seed)
    graph = naive.random_graph(rng, n, max_degree, duplicates=True, empty_rows=empty_rows)
    x = rng.standard_normal((n, in_features))
    for _ in range(100):
        layer = GATv2Layer(in_features, 3, dtype=np.float64, seed=int(rng.integers(1 << 30)), **kw)
        naive.randomize_params(layer, rng, scale=0.7)
        _, cache = layer.forward(graph, x)
        g = cache.graph
        z = cache.xr[g.targets()] + cache.xl[g.indices]
        if z.size == 0 or np.abs(z).min() > 1e-3:  # no regime flip within ±eps
            return layer, graph, x
    raise AssertionError("could not draw scores away from zero")


def brute_force_changed(layer, graph, x):
    """(n, H, C) bool: does node i's output move when b_r[h*C + d] moves by ±EPS."""
    n, H, C = graph.num_nodes, layer.heads, layer.out_features
    base = layer.params["b_r"].copy()
    ratio = np.zeros((n, H, C))
    for h in range(H):
        for d in range(C):
            outs = []
            for sign in (1.0, -1.0):
                b = base.copy()
                b[h * C + d] += sign * EPS
                layer.params["b_r"] = b
                outs.append(layer.forward(graph, x)[0])
            ratio[:, h, d] = np.abs(outs[0] - outs[1]).max(axis=1) / (2 * EPS)
    layer.params["b_r"] = base
    ambiguous = (ratio > DEAD) & (ratio < LIVE)
    assert not ambiguous.any(), f"ratios between the thresholds: {ratio[ambiguous]}"
    return ratio >= LIVE


def kernel_attention_changed(layer, cache):
    """(n, H, C) bool from the forward kernel alone: does the attention output of node i
    move when column (h, d) of xr moves by ±EPS (covers shared weights and root weights)."""
    g = cache.graph
    n, H, C = cache.xr.shape
    kind = ACTIVATIONS[layer.attention_activation]
    slope = np.float64(layer.negative_slope)
    empty = np.zeros((0, H))
    if layer.edge_dim is None:
        kernel, edge = gatv2_forward_rows, ()
    else:
        weT = np.ascontiguousarray(cache.params["W_e"].reshape(H, C, layer.edge_dim).transpose(0, 2, 1))
        kernel, edge = gatv2_forward_edge_rows, (cache.inputs.u, weT)
    ratio = np.zeros((n, H, C))
    for h in range(H):
        for d in range(C):
            outs = []
            for sign in (1.0, -1.0):
                xr = cache.xr.copy()
                xr[:, h, d] += sign * EPS
                alpha = np.empty((g.nnz, H))
                out = np.empty((n, H, C))
                kernel(0, n, g.indptr, g.indices, cache.xl, xr, cache.params["att"], slope, kind, PREFETCH_DISTANCE,
                       *edge, empty, np.zeros(0), False, alpha, out)
                outs.append(out[:, h, :])
            ratio[:, h, d] = np.abs(outs[0] - outs[1]).max(axis=1) / (2 * EPS)
    ambiguous = (ratio > DEAD) & (ratio < LIVE)
    assert not ambiguous.any(), f"ratios between the thresholds: {ratio[ambiguous]}"
    return ratio >= LIVE


CONFIGS = [
    dict(heads=2),
    dict(heads=2, add_self_loops=False),
    dict(heads=3, concat=False),
    dict(heads=1, negative_slope=0.01, add_self_loops=False),
    dict(heads=2, negative_slope=-0.5),
    dict(heads=2, attention_activation="softplus"),
    dict(heads=2, attention_activation="softplus", add_self_loops=False),
    dict(heads=2, root_weight="theta_r"),
    dict(heads=2, root_weight="theta_n", concat=False),
    dict(heads=2, root_weight="theta_r", attention_activation="softplus"),
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mask_matches_brute_force(cfg, seed):
    layer, graph, x = make_case(seed, **cfg)
    flow = theta_r_flow(layer, graph, x)
    changed = brute_force_changed(layer, graph, x)
    np.testing.assert_array_equal(flow.mask, ~changed)
    _, cache = layer.forward(graph, x)
    np.testing.assert_array_equal(flow.attention_mask, ~kernel_attention_changed(layer, cache))
    if layer.root_weight == "theta_r":
        assert not flow.mask.any() and flow.attention_mask.any()
    else:
        # not a vacuous check: both outcomes occur
        assert flow.mask.any() and not flow.mask.all()


@pytest.mark.parametrize("seed", [3, 4])
def test_shared_weights_attention_mask(seed):
    # with share_weights there is no b_r; check the attention path at the kernel level
    layer, graph, x = make_case(seed, heads=2, share_weights=True)
    _, cache = layer.forward(graph, x)
    flow = theta_r_flow_from_cache(layer, cache)
    np.testing.assert_array_equal(flow.attention_mask, ~kernel_attention_changed(layer, cache))


@pytest.mark.parametrize("activation", ["leaky_relu", "softplus"])
def test_pairwise_gradient_is_exactly_zero_on_mask(activation):
    """The paper's pairwise form gives bitwise 0.0 exactly where the mask says so.

    ``P_i`` depends on node i's upstream gradient only, so with ``grad_out``
    nonzero on row i alone, ``∂L/∂b_r`` is exactly node i's contribution ``P_i``.
    """
    layer, graph, x = make_case(5, n=30, heads=2, attention_activation=activation)
    flow = theta_r_flow(layer, graph, x)
    out, cache = layer.forward(graph, x)
    rng = np.random.default_rng(0)
    n, H, C = graph.num_nodes, layer.heads, layer.out_features
    for i in range(n):
        grad_out = np.zeros_like(out)
        grad_out[i] = rng.standard_normal(out.shape[1])
        p_i = layer.backward(cache, grad_out, theta_r="pairwise")["b_r"].reshape(H, C)
        assert np.all(p_i[flow.mask[i]] == 0.0), i
        assert np.all(p_i[~flow.mask[i]] != 0.0), i


def test_causes_on_hand_made_graph():
    # rows: 0 empty, 1 <- {2}, 2 <- {0, 1, 3}, 3 <- {1, 1} (duplicate edge)
    graph = naive.rows_graph([[], [2], [0, 1, 3], [1, 1]])
    layer = GATv2Layer(2, 2, add_self_loops=False, dtype=np.float64, seed=0)
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0]])
    # channel 0: z = 10 + (1, 2, 3) at node 2, all > 0; channel 1: z = x_j^(0) - 0.5, mixed signs
    layer.params["W_r"] = np.zeros((2, 2))
    layer.params["W_l"] = np.array([[1.0, 2.0], [1.0, 0.0]])
    layer.params["b_r"] = np.array([10.0, -0.5])
    layer.params["b_l"] = np.zeros(2)
    layer.params["att"] = np.array([[1.0, 1.0]])
    flow = theta_r_flow(layer, graph, x)
    code = {name: k + 1 for k, name in enumerate(CAUSES)}
    assert flow.cause[0].tolist() == [[code["no_edges"]] * 2]
    assert flow.cause[1].tolist() == [[code["single_edge"]] * 2]
    # node 2: channel 0 all positive -> same regime; channel 1: z = 0.5, -0.5, -1.5 -> live
    assert flow.cause[2].tolist() == [[code["same_regime"], 0]]
    # node 3: two copies of the same edge -> equal z -> same regime in every channel
    assert flow.cause[3].tolist() == [[code["same_regime"]] * 2]
    np.testing.assert_array_equal(flow.fraction, [[1.0, 0.75]])
    np.testing.assert_array_equal(flow.fractions["same_regime"], [[0.5, 0.25]])
    assert flow.dead_fraction == pytest.approx(7 / 8)

    # z == 0 counts as the negative regime, exactly as the kernels' ``z > 0`` test
    layer.params["b_r"] = np.array([10.0, -1.0])  # channel 1: z = 0, -1, -2 at node 2
    assert theta_r_flow(layer, graph, x).cause[2, 0, 1] == code["same_regime"]

    # negative_slope == 1: LeakyReLU is the identity, every multi-edge row is dead
    lin = GATv2Layer(2, 2, add_self_loops=False, negative_slope=1.0, dtype=np.float64, seed=0)
    lin.params.update(dict(layer.params))
    assert theta_r_flow(lin, graph, x).mask.all()

    # softplus: distinct z values are live, the duplicate edge is not
    soft = GATv2Layer(2, 2, add_self_loops=False, attention_activation="softplus",
                      dtype=np.float64, seed=0)
    soft.params.update(dict(layer.params))
    sflow = theta_r_flow(soft, graph, x)
    assert sflow.cause[2].tolist() == [[0, 0]]
    assert sflow.cause[3].tolist() == [[code["same_regime"]] * 2]


def test_zero_attention_channel_is_dead():
    layer, graph, x = make_case(6, heads=2)
    att = layer.params["att"].copy()
    att[1, 2] = 0.0
    layer.params["att"] = att
    flow = theta_r_flow(layer, graph, x)
    assert flow.mask[:, 1, 2].all()
    assert flow.att_zero.tolist() == [[False] * 3, [False, False, True]]
    assert (flow.cause[:, 1, 2] == 1 + CAUSES.index("zero_att")).any()
    np.testing.assert_array_equal(flow.mask, ~brute_force_changed(layer, graph, x))


def test_self_loops_count_as_edges():
    # 0 -> 1 only: with loops node 1 has 2 edges (can be live), node 0 one (dead)
    graph = naive.rows_graph([[], [0]])
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    layer = GATv2Layer(2, 4, dtype=np.float64, seed=3)
    flow = theta_r_flow(layer, graph, x)
    assert flow.in_degree.tolist() == [1, 2]
    assert (flow.cause[0] == 1 + CAUSES.index("single_edge")).all()
    no_loops = GATv2Layer(2, 4, add_self_loops=False, dtype=np.float64, seed=3)
    flow = theta_r_flow(no_loops, graph, x)
    assert flow.in_degree.tolist() == [0, 1]
    assert (flow.cause[0] == 1 + CAUSES.index("no_edges")).all()


def test_fractions_and_grad_norms():
    layer, graph, x = make_case(7, heads=2, root_weight="theta_n")
    rng = np.random.default_rng(1)
    grad_out = rng.standard_normal((graph.num_nodes, layer.out_dim))
    flow = theta_r_flow(layer, graph, x, grad_out=grad_out)
    np.testing.assert_allclose(flow.fraction, flow.mask.mean(axis=0))
    np.testing.assert_allclose(sum(flow.fractions.values()), flow.attention_mask.mean(axis=0))
    _, cache = layer.forward(graph, x)
    grads = layer.backward(cache, grad_out)
    assert set(flow.grad_norms) == set(layer.params)
    for k, v in flow.grad_norms.items():
        assert v == pytest.approx(np.linalg.norm(grads[k]), rel=1e-12)
    s = flow.summary()
    assert s["dead_fraction"] == pytest.approx(flow.mask.mean())
    assert s["grad_norm_W_n"] == flow.grad_norms["W_n"]


def test_structural_zero_causes_float32_matches_kernel_rounding():
    # z is formed in float32 as in the kernels; a tie in float32 is a tie in the diagnosis
    indptr = np.array([0, 2], dtype=np.int64)
    indices = np.array([0, 0], dtype=np.int64)
    xl = np.array([[[1.0]]], dtype=np.float32)
    xr = np.array([[[-1.0]]], dtype=np.float32)
    att = np.ones((1, 1), dtype=np.float32)
    cause = structural_zero_causes(indptr, indices, xl, xr, att, 0.2, "softplus")
    assert cause[0, 0, 0] == 1 + CAUSES.index("same_regime")


def test_bad_arguments():
    layer, graph, x = make_case(8, heads=1)
    with pytest.raises(TypeError, match="layer"):
        theta_r_flow("not a layer", graph, x)
    with pytest.raises(ValueError, match="grad_out or grads"):
        theta_r_flow(layer, graph, x, grad_out=np.zeros((graph.num_nodes, 3)), grads={})
    with pytest.raises(TypeError, match="cache"):
        theta_r_flow_from_cache(layer, object())
    with pytest.raises(ValueError, match="existing directory"):
        ThetaRFlowRecorder("/nonexistent-dir-gatfast/x.csv")


def test_recorder_writes_csv_and_plot(tmp_path):
    layer, graph, x = make_case(9, heads=2)
    rng = np.random.default_rng(2)
    path = tmp_path / "flow.csv"
    rec = ThetaRFlowRecorder(path)
    for epoch in range(3):
        _, cache = layer.forward(graph, x)
        grads = layer.backward(cache, rng.standard_normal((graph.num_nodes, layer.out_dim)))
        rec.record(epoch, layer, graph, x, grads)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert float(rows[0]["dead_fraction"]) == pytest.approx(theta_r_flow(layer, graph, x).dead_fraction)
    assert {"grad_norm_W_r", "frac_same_regime"} <= set(rows[0])
    assert os.listdir(tmp_path) == ["flow.csv"]  # no temp files left behind
    pytest.importorskip("matplotlib")
    rec.plot(tmp_path / "flow.png")
    assert (tmp_path / "flow.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_network_flows_match_per_layer_brute_force():
    model_mod = pytest.importorskip("gatfast.models")
    from gatfast.diagnostics import theta_r_flow_network

    rng = np.random.default_rng(11)
    graph = naive.random_graph(rng, 25, 3, empty_rows=2)
    x = rng.standard_normal((25, 4))
    model = model_mod.GATv2Network(4, 3, 2, num_layers=2, heads=2, dropout=0.0, attention_dropout=0.0,
                                   dtype=np.float64, seed=3)
    for layer in model.layers:
        naive.randomize_params(layer, rng, scale=0.7)
    out, cache = model.forward(graph, x)
    grads = model.backward(cache, rng.standard_normal(out.shape))
    flows = theta_r_flow_network(model, graph, x, grads)
    assert len(flows) == 2
    for l, (layer, flow) in enumerate(zip(model.layers, flows)):
        h = cache.layer_caches[l].x  # the layer's own input
        np.testing.assert_array_equal(flow.mask, theta_r_flow(layer, graph, h).mask)
        np.testing.assert_array_equal(flow.mask, ~brute_force_changed(layer, graph, h))
        assert flow.grad_norms["W_r"] == pytest.approx(np.linalg.norm(grads[f"layers.{l}.W_r"]))
    with pytest.raises(ValueError, match="grads"):
        theta_r_flow_network(model, graph, x, [{}])


def test_pitfall_experiment_quick(tmp_path):
    """Smoke test of the experiment: files, one row per run, definitions applied as documented."""
    experiments = pytest.importorskip("gatfast.diagnostics.pitfall")
    res = experiments.run_pitfall(seeds=2, quick=True, out_dir=tmp_path, variants=["GATv2", "theta_r"],
                                  archs=["1 layer"], quiet=True)
    assert len(res.runs) == 4 and len(res.table) == 2
    for r in res.runs:
        assert r["fails_to_learn"] == (not r["val_mse"] < experiments.FAIL_FRACTION * r["baseline_mean_mse"])
        assert r["no_gain_over_linear"] == (not r["val_mse"] < r["baseline_linear_mse"])
        assert 0.0 <= r["dead_theta_r_mean"] <= 1.0
    theta_r = [r for r in res.runs if r["variant"] == "theta_r"]
    gatv2 = [r for r in res.runs if r["variant"] == "GATv2"]
    assert all(r["dead_theta_r_mean"] == 0.0 for r in theta_r)
    assert all(r["dead_theta_r_mean"] > 0.5 for r in gatv2)  # most scene nodes have <= 1 neighbour
    with open(res.files["runs"], newline="") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert "| 1 layer | theta_r |" in (tmp_path / "summary.md").read_text()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
    with pytest.raises(ValueError, match="variants"):
        experiments.run_pitfall(seeds=1, quick=True, out_dir=tmp_path, variants=["nope"], quiet=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("activation", ["leaky_relu", "softplus"])
def test_mask_with_edge_features_matches_brute_force(seed, activation):
    """The edge term moves each edge's z separately; the mask must follow it exactly."""
    rng = np.random.default_rng(seed + 10)
    graph = naive.random_graph(rng, 16, 4, duplicates=True, empty_rows=1)
    x = rng.standard_normal((16, 3))
    attr = rng.standard_normal((graph.nnz, 2))
    for _ in range(100):
        layer = GATv2Layer(3, 3, heads=2, edge_dim=2, attention_activation=activation, dtype=np.float64,
                           seed=int(rng.integers(1 << 30)))
        naive.randomize_params(layer, rng, scale=0.7)
        _, cache = layer.forward(graph, x, attr)
        g = cache.graph
        weT = cache.params["W_e"].reshape(2, 3, 2).transpose(0, 2, 1)
        z = cache.xr[g.targets()] + cache.xl[g.indices] + np.einsum("hdc,ed->ehc", weT, cache.inputs.u)
        if np.abs(z).min() > 1e-3:
            break
    flow = theta_r_flow(layer, graph, x, edge_attr=attr)
    np.testing.assert_array_equal(flow.attention_mask, ~kernel_attention_changed(layer, cache))
    assert flow.mask.any() and not flow.mask.all()
