"""GAT+ layer variants (softplus attention, root weights): gradients and the pitfall.

The formulas are derived in ``docs/VARIANTS.md``. Checked here:

* closed-form gradients against central finite differences in float64, for
  every combination of activation and root weight, both Θ_R forms;
* against autograd on PyG's ``GATv2Conv`` (a subclass with softplus in the
  score; the root weights added on top with the conv's own ``lin_r`` or a
  ``Linear`` for Θ_n);
* the claims of VARIANTS.md about where Θ_R gets gradient.
"""

import naive
import numpy as np
import pytest

from gatfast import CSRGraph, GATv2Layer

EPS = 1e-6
FD_TOL = 1e-6
EXACT_TOL = 1e-12


def make_layer(seed, in_features=4, out_features=3, scale=1.0, **kw):
    layer = GATv2Layer(in_features, out_features, dtype=np.float64, seed=seed, **kw)
    naive.randomize_params(layer, np.random.default_rng(seed), scale=scale)
    return layer


def finite_differences(layer, graph, x, R):
    """Central differences of ``L = sum(out * R)`` for every parameter and ``x``."""

    def loss(xx):
        return float(np.sum(layer.forward(graph, xx)[0] * R))

    def fd_of(arr, setter):
        grad = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            vals = []
            for sign in (1.0, -1.0):
                moved = arr.copy()
                moved[idx] += sign * EPS
                vals.append(setter(moved))
            grad[idx] = (vals[0] - vals[1]) / (2 * EPS)
        return grad

    fd = {}
    for name in list(layer.params):
        base = layer.params[name].copy()

        def set_param(v, name=name):
            layer.params[name] = v
            return loss(x)

        fd[name] = fd_of(base, set_param)
        layer.params[name] = base
    fd["x"] = fd_of(x, loss)
    return fd


VARIANTS = [
    dict(heads=2, attention_activation="softplus"),
    dict(heads=2, concat=False, attention_activation="softplus", negative_slope=0.01),
    dict(heads=2, root_weight="theta_r"),
    dict(heads=2, concat=False, root_weight="theta_r", attention_activation="softplus"),
    dict(heads=2, root_weight="theta_n", attention_activation="softplus"),
    dict(heads=1, concat=False, root_weight="theta_n"),
    dict(heads=2, root_weight="theta_r", share_weights=True, attention_activation="softplus"),
    dict(heads=2, root_weight="theta_n", share_weights=True, bias=False),
    dict(heads=2, root_weight="theta_r", residual=True, bias=False),
    dict(heads=2, concat=False, root_weight="theta_n", residual=True, attention_activation="softplus"),
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


@pytest.mark.parametrize("cfg", VARIANTS, ids=_id)
def test_variant_gradients_match_finite_differences(cfg):
    rng = np.random.default_rng(len(_id(cfg)))
    graph = naive.mixed_graph(rng)  # empty, single-edge, hub, duplicate and self-loop rows
    layer = make_layer(seed=4, **cfg)
    x = rng.standard_normal((graph.num_nodes, layer.in_features))
    out, cache = layer.forward(graph, x)
    g = cache.graph
    z = cache.xr[g.targets()] + cache.xl[g.indices]
    assert np.abs(z).min() > 1e-4, "a score sits on the LeakyReLU kink; pick another seed"
    R = rng.standard_normal(out.shape)
    fd = finite_differences(layer, graph, x, R)
    for theta_r in ("linear", "pairwise"):
        grads = layer.backward(cache, R, theta_r=theta_r)
        assert set(grads) == set(fd)
        for name, want in fd.items():
            assert np.linalg.norm(want) > 0, f"{name}: degenerate check, zero gradient"
            err = naive.rel_err(grads[name], want)
            assert err < FD_TOL, f"{theta_r} {name}: relative error {err:.2e}"


@pytest.mark.parametrize("cfg", VARIANTS, ids=_id)
def test_pairwise_equals_linear_for_variants(cfg):
    rng = np.random.default_rng(50)
    rows = [rng.choice(40, size=int(rng.integers(0, 12)), replace=False).tolist() for _ in range(40)]
    graph = naive.rows_graph(rows)
    layer = make_layer(seed=6, **cfg)
    x = rng.standard_normal((40, layer.in_features))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    lin = layer.backward(cache, R, theta_r="linear")
    pair = layer.backward(cache, R, theta_r="pairwise")
    for name in lin:
        assert naive.rel_err(lin[name], pair[name]) < EXACT_TOL, name


# ---------------------------------------------------------------------- PyG autograd


def _torch_reference(layer, graph, x, R):
    """Output and autograd gradients of the same variant built from PyG pieces."""
    torch = pytest.importorskip("torch")
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    F = torch.nn.functional

    class SoftplusGATv2Conv(pyg_nn.GATv2Conv):
        """GATv2Conv with softplus in place of LeakyReLU in the score (no edge features)."""

        def edge_update(self, x_j, x_i, edge_attr, index, ptr, dim_size):
            from torch_geometric.utils import softmax

            s = (F.softplus(x_i + x_j) * self.att).sum(dim=-1)
            return softmax(s, index, ptr, dim_size)

    H, C = layer.heads, layer.out_features
    cls = SoftplusGATv2Conv if layer.attention_activation == "softplus" else pyg_nn.GATv2Conv
    conv = cls(layer.in_features, C, heads=H, concat=layer.concat,
               negative_slope=layer.negative_slope, add_self_loops=False, bias=layer.bias,
               share_weights=layer.share_weights).double()
    p = {k: torch.tensor(v, requires_grad=True) for k, v in layer.params.items()}
    with torch.no_grad():
        conv.lin_l.weight.copy_(p["W_l"])
        if not layer.share_weights:
            conv.lin_r.weight.copy_(p["W_r"])
        conv.att.copy_(p["att"].reshape(1, H, C))
        if layer.bias:
            conv.lin_l.bias.copy_(p["b_l"])
            if not layer.share_weights:
                conv.lin_r.bias.copy_(p["b_r"])
            conv.bias.copy_(p["bias"])
    xt = torch.tensor(x, requires_grad=True)
    ei = torch.from_numpy(layer.attention_graph(graph).to_edge_index())
    out, (_, alpha) = conv(xt, ei, return_attention_weights=True)
    n = x.shape[0]

    def heads_out(v):
        v = v.view(n, H, C)
        return v.reshape(n, H * C) if layer.concat else v.mean(dim=1)

    if layer.root_weight == "theta_r":
        out = out + heads_out((conv.lin_l if layer.share_weights else conv.lin_r)(xt))
    elif layer.root_weight == "theta_n":
        out = out + heads_out(F.linear(xt, p["W_n"], p.get("b_n")))
    if layer.residual:
        out = out + xt @ p["W_res"].T
    (out * torch.from_numpy(R)).sum().backward()
    grads = {"W_l": conv.lin_l.weight.grad, "att": conv.att.grad.reshape(H, C), "x": xt.grad}
    if not layer.share_weights:
        grads["W_r"] = conv.lin_r.weight.grad
    if layer.bias:
        grads["b_l"] = conv.lin_l.bias.grad
        if not layer.share_weights:
            grads["b_r"] = conv.lin_r.bias.grad
        grads["bias"] = conv.bias.grad
    for k in ("W_n", "b_n", "W_res"):
        if k in p:
            grads[k] = p[k].grad
    grads = {k: v.numpy() for k, v in grads.items()}
    return out.detach().numpy(), alpha.detach().numpy(), grads


@pytest.mark.parametrize("cfg", VARIANTS, ids=_id)
def test_variants_match_pyg_autograd(cfg):
    rng = np.random.default_rng(21)
    n = 30
    ei = rng.integers(0, n, size=(2, 100))
    graph = CSRGraph.from_edge_index(ei, n)  # random self loops and duplicates included
    layer = make_layer(seed=8, in_features=5, out_features=4, **cfg)
    x = rng.standard_normal((n, 5))
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape)
    ref_out, ref_alpha, ref_grads = _torch_reference(layer, graph, x, R)
    assert naive.rel_err(out, ref_out) < 1e-12
    assert naive.rel_err(cache.alpha, ref_alpha.reshape(cache.alpha.shape)) < 1e-12
    grads = layer.backward(cache, R)
    assert set(grads) == set(ref_grads)
    for name in grads:
        err = naive.rel_err(grads[name], ref_grads[name])
        assert err < 1e-10, f"{name}: {err:.2e}"


def test_theta_n_matches_pyg_residual():
    """``root_weight="theta_n"`` without bias is PyG's GATv2Conv(residual=True, add_self_loops=False)."""
    torch = pytest.importorskip("torch")
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    rng = np.random.default_rng(3)
    n, H, C = 25, 3, 4
    graph = CSRGraph.from_edge_index(rng.integers(0, n, size=(2, 80)), n)
    layer = make_layer(seed=2, in_features=5, out_features=C, heads=H, root_weight="theta_n", bias=False)
    conv = pyg_nn.GATv2Conv(5, C, heads=H, add_self_loops=False, bias=False, residual=True).double()
    with torch.no_grad():
        conv.lin_l.weight.copy_(torch.from_numpy(layer.params["W_l"]))
        conv.lin_r.weight.copy_(torch.from_numpy(layer.params["W_r"]))
        conv.att.copy_(torch.from_numpy(layer.params["att"]).reshape(1, H, C))
        conv.res.weight.copy_(torch.from_numpy(layer.params["W_n"]))
    x = rng.standard_normal((n, 5))
    ei = torch.from_numpy(graph.without_self_loops().to_edge_index())
    xt = torch.tensor(x, requires_grad=True)
    ref = conv(xt, ei)
    R = rng.standard_normal(ref.shape)
    (ref * torch.from_numpy(R)).sum().backward()
    out, cache = layer.forward(graph, x)  # drops the graph's self loops itself
    assert naive.rel_err(out, ref.detach().numpy()) < 1e-12
    grads = layer.backward(cache, R)
    assert naive.rel_err(grads["W_n"], conv.res.weight.grad.numpy()) < 1e-12
    assert naive.rel_err(grads["W_r"], conv.lin_r.weight.grad.numpy()) < 1e-10
    assert naive.rel_err(grads["x"], xt.grad.numpy()) < 1e-10


# ---------------------------------------------------------------------- the pitfall, per variant


def _same_regime_case(activation, root_weight=None):
    """Node 0 aggregates from 1, 2, 3 (no self loops); every score z > 0 (large b_r)."""
    graph = naive.rows_graph([[1, 2, 3], [], [], []])
    layer = make_layer(seed=1, in_features=2, out_features=2, add_self_loops=False,
                       attention_activation=activation, root_weight=root_weight)
    layer.params["b_r"] = np.full(2, 50.0)
    x = np.array([[0.3, -0.2], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]])
    return layer, graph, x


def test_softplus_gives_gradient_where_leaky_relu_gives_none():
    """Same sign pattern in every channel: LeakyReLU sends Θ_R exactly 0, softplus does not."""
    R = np.ones((4, 2))
    R[0] = [1.0, -2.0]
    leaky, graph, x = _same_regime_case("leaky_relu")
    _, cache = leaky.forward(graph, x)
    assert (cache.xr[0] + cache.xl[1:]).min() > 0
    g = leaky.backward(cache, R, theta_r="pairwise")
    assert np.all(g["W_r"] == 0.0) and np.all(g["b_r"] == 0.0)
    # the pitfall is Θ_R's alone: Θ_L and a still learn
    assert np.linalg.norm(g["W_l"]) > 0 and np.linalg.norm(g["att"]) > 0

    soft, graph, x = _same_regime_case("softplus")
    soft.params["b_r"] = np.full(2, 1.0)  # keep the sigmoid away from saturation
    _, cache = soft.forward(graph, x)
    g = soft.backward(cache, R, theta_r="pairwise")
    assert np.all(g["b_r"] != 0.0)


def test_theta_r_root_gives_gradient_to_single_edge_nodes():
    """Every row has one in-edge: the attention path is dead, the root term is not.

    Then ∂L/∂Θ_R is exactly the root term Σ_i g_i ⊗ h̃_i (VARIANTS.md).
    """
    rng = np.random.default_rng(5)
    n = 6
    graph = naive.rows_graph([[(i + 1) % n] for i in range(n)])
    layer = make_layer(seed=3, heads=2, root_weight="theta_r")
    x = rng.standard_normal((n, 4))
    out, cache = layer.forward(graph, x)
    np.testing.assert_array_equal(cache.alpha, 1.0)
    R = rng.standard_normal(out.shape)
    grads = layer.backward(cache, R, theta_r="pairwise")
    np.testing.assert_allclose(grads["W_r"], R.T @ x, rtol=1e-14, atol=0)
    np.testing.assert_allclose(grads["b_r"], R.sum(axis=0), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(grads["att"], 0.0)


def test_theta_n_leaves_theta_r_gradient_unchanged():
    """The Θ_n root adds a path to the output that bypasses Θ_R: ∂L/∂Θ_R equals the
    plain layer's on the loop-free graph, and ∂L/∂Θ_n = Σ_i g_i ⊗ h̃_i."""
    rng = np.random.default_rng(9)
    graph = naive.mixed_graph(rng)
    plus = make_layer(seed=7, heads=2, root_weight="theta_n")
    plain = GATv2Layer(4, 3, heads=2, add_self_loops=False, dtype=np.float64, seed=0)
    for k in plain.params:
        plain.params[k] = plus.params[k]
    x = rng.standard_normal((graph.num_nodes, 4))
    out, cache = plus.forward(graph, x)
    out0, cache0 = plain.forward(graph.without_self_loops(), x)
    n_term = x @ plus.params["W_n"].T + plus.params["b_n"]
    np.testing.assert_allclose(out, out0 + n_term, rtol=1e-13, atol=1e-13)
    R = rng.standard_normal(out.shape)
    g, g0 = plus.backward(cache, R), plain.backward(cache0, R)
    for k in ("W_r", "b_r", "W_l", "b_l", "att", "bias"):
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g["W_n"], R.T @ x, rtol=1e-13)
    np.testing.assert_allclose(g["b_n"], R.sum(axis=0), rtol=1e-13)


@pytest.mark.parametrize("root_weight", ["theta_r", "theta_n"])
def test_root_weight_ignores_self_loops(root_weight):
    rng = np.random.default_rng(2)
    graph = naive.rows_graph([[0, 1], [0, 1, 2], [2]])  # explicit self loops
    layer = make_layer(seed=5, root_weight=root_weight, add_self_loops=True)
    g = layer.attention_graph(graph)
    assert not g.has_self_loops()
    assert g.in_degree().tolist() == [1, 2, 0]
    x = rng.standard_normal((3, 4))
    out_loops, _ = layer.forward(graph, x)
    out_plain, _ = layer.forward(graph.without_self_loops(), x)
    np.testing.assert_array_equal(out_loops, out_plain)
