"""The one-call path of small layers (gatfast/layers/small.py) against the general path, bit for bit."""

import naive
import numpy as np
import pytest

from gatfast import CSRGraph, GATv2Layer, NonFiniteError
from gatfast.layers import small

CONFIGS = [
    dict(heads=1),
    dict(heads=3, concat=False),
    dict(heads=2, bias=False),
    dict(heads=2, add_self_loops=False),
    dict(heads=1, negative_slope=0.01, concat=False),
    dict(heads=2, attention_activation="softplus"),
    dict(heads=2, dropout=0.5),  # not training: no dropout, the fast path applies
]


def _id(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


def both_paths(monkeypatch, layer, graph, x, R, theta_r):
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(small, "ENABLED", enabled)
        out, cache = layer.forward(graph, x)
        grads = layer.backward(cache, R, theta_r=theta_r)
        results.append((out, cache, grads))
    return results


def count_calls(monkeypatch):
    calls = {"forward": 0, "backward": 0}
    for name, key in (("small_layer_forward", "forward"), ("small_layer_backward", "backward")):
        kernel = getattr(small, name)

        def spy(*args, _kernel=kernel, _key=key):
            calls[_key] += 1
            return _kernel(*args)

        monkeypatch.setattr(small, name, spy)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("theta_r", ["linear", "pairwise"])
def test_same_bits_as_the_general_path(monkeypatch, cfg, dtype, theta_r):
    rng = np.random.default_rng(len(_id(cfg)))
    graph = naive.mixed_graph(rng, n=12, hub_degree=9)
    layer = GATv2Layer(5, 7, dtype=dtype, seed=2, **cfg)
    naive.randomize_params(layer, rng)
    x = rng.standard_normal((12, 5)).astype(dtype)
    R = rng.standard_normal((12, layer.out_dim)).astype(dtype)
    calls = count_calls(monkeypatch)
    (out, cache, grads), (out_g, cache_g, grads_g) = both_paths(monkeypatch, layer, graph, x, R, theta_r)
    assert calls == {"forward": 1, "backward": 1}  # the fast path ran once each way, the general one once
    assert out.tobytes() == out_g.tobytes()
    assert cache.alpha.tobytes() == cache_g.alpha.tobytes()
    assert cache.graph == cache_g.graph
    assert list(grads) == list(grads_g)
    for name in grads:
        assert grads[name].dtype == dtype, name
        assert grads[name].tobytes() == grads_g[name].tobytes(), name


def test_a_general_cache_takes_the_fast_backward(monkeypatch):
    rng = np.random.default_rng(0)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, heads=2, seed=0)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    monkeypatch.setattr(small, "ENABLED", False)
    out, cache = layer.forward(graph, x)
    want = layer.backward(cache, np.ones_like(out))
    monkeypatch.setattr(small, "ENABLED", True)
    calls = count_calls(monkeypatch)
    got = layer.backward(cache, np.ones_like(out))
    assert calls["backward"] == 1
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name


@pytest.mark.parametrize(
    "cfg",
    [dict(edge_dim=2), dict(residual=True), dict(root_weight="theta_r"), dict(share_weights=True)],
    ids=_id,
)
def test_other_layers_take_the_general_path(monkeypatch, cfg):
    rng = np.random.default_rng(1)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, seed=0, **cfg)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    attr = rng.standard_normal((graph.nnz, 2)).astype(np.float32) if "edge_dim" in cfg else None
    calls = count_calls(monkeypatch)
    out, cache = layer.forward(graph, x, attr)
    layer.backward(cache, np.ones_like(out))
    assert calls == {"forward": 0, "backward": 0}


def test_large_inputs_and_dropout_in_training_take_the_general_path(monkeypatch):
    rng = np.random.default_rng(2)
    calls = count_calls(monkeypatch)
    big = CSRGraph.from_edge_index(rng.integers(0, 300, (2, 900)), 300)
    layer = GATv2Layer(16, 8, heads=4, seed=0)
    layer.forward(big, rng.standard_normal((300, 16)).astype(np.float32))
    scene = naive.mixed_graph(rng)
    drop = GATv2Layer(4, 3, seed=0, dropout=0.5)
    drop.forward(scene, rng.standard_normal((scene.num_nodes, 4)).astype(np.float32), training=True)
    float64_input = rng.standard_normal((scene.num_nodes, 4))  # converted first: the general path
    drop.forward(scene, float64_input)
    assert calls["forward"] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("n", [12, 600])  # the one-call kernel, and a graph too big for it
def test_output_is_forwards_output_without_a_cache(monkeypatch, cfg, dtype, n):
    rng = np.random.default_rng(len(_id(cfg)) + n)
    graph = naive.mixed_graph(rng, n=n, hub_degree=9)
    layer = GATv2Layer(5, 7, dtype=dtype, seed=2, **cfg)
    naive.randomize_params(layer, rng)
    x = rng.standard_normal((n, 5)).astype(dtype)
    calls = count_calls(monkeypatch)
    out = layer.output(graph, x)
    assert calls["forward"] == (n == 12)  # the fast path where it applies
    want, _ = layer.forward(graph, x)
    assert out.dtype == dtype and out.tobytes() == want.tobytes()
    assert x.flags.writeable  # the caller's array, untouched
    out[:] = 0.0  # the caller's own array: the next call is not affected
    assert layer.output(graph, x).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "cfg", [dict(heads=4), dict(heads=3, concat=False), dict(heads=2, bias=False)], ids=_id
)
@pytest.mark.parametrize("n", [10, small.FEW_ROWS])
@pytest.mark.parametrize("theta_r", ["linear", "pairwise"])
def test_few_wide_rows_take_the_one_call_forward_with_the_general_bits(monkeypatch, cfg, dtype, n, theta_r):
    """A network's middle layer on one scene (10 x 64 -> 4 x 16): the product is not small, but the
    rows are few, so the forward takes the one call with the dense tile's projections; its output,
    attention and cache give the general path's bits, and its backward is the general one."""
    rng = np.random.default_rng(n)
    graph = CSRGraph.from_edge_index(rng.integers(0, n, (2, 2 * n)), n)
    layer = GATv2Layer(64, 16, dtype=dtype, seed=1, **cfg)
    naive.randomize_params(layer, rng)
    x = rng.standard_normal((n, 64)).astype(dtype)
    assert not small.is_small(n, 64, layer.heads * 16)
    R = rng.standard_normal((n, layer.out_dim)).astype(dtype)
    calls = count_calls(monkeypatch)
    (out, cache, grads), (out_g, cache_g, grads_g) = both_paths(monkeypatch, layer, graph, x, R, theta_r)
    assert calls == {"forward": 1, "backward": 0}
    assert out.tobytes() == out_g.tobytes()
    for name in ("xl", "xr", "alpha"):
        assert getattr(cache, name).tobytes() == getattr(cache_g, name).tobytes(), name
    for name in grads_g:
        assert grads[name].tobytes() == grads_g[name].tobytes(), name
    monkeypatch.setattr(small, "ENABLED", True)
    assert layer.output(graph, x).tobytes() == out_g.tobytes()


def test_few_rows_stay_within_one_chunk_of_the_general_path():
    """The one-call forward restates the general path's decisions (see ``small._one_call_forward``): its
    rows must be ones the general path projects as one chunk on the calling thread, or the two paths
    would still agree on the bits but no longer do the same work on the same thread."""
    from gatfast.layers import dense

    assert small.FEW_ROWS <= dense.MIN_ROW_CHUNK


def test_more_rows_or_narrow_outputs_take_the_general_forward(monkeypatch):
    rng = np.random.default_rng(2)
    calls = count_calls(monkeypatch)
    n = small.FEW_ROWS + 1
    graph = CSRGraph.from_edge_index(rng.integers(0, n, (2, 2 * n)), n)
    GATv2Layer(40, 16, heads=4, seed=0).forward(graph, rng.standard_normal((n, 40)).astype(np.float32))
    graph = CSRGraph.from_edge_index(rng.integers(0, 200, (2, 400)), 200)  # a product BLAS makes
    GATv2Layer(40, 3, heads=1, seed=0).forward(graph, rng.standard_normal((200, 40)).astype(np.float32))
    dense = CSRGraph.from_edge_index(np.indices((200, 200)).reshape(2, -1), 200)  # attention work for threads
    GATv2Layer(40, 16, heads=4, seed=0).forward(dense, rng.standard_normal((200, 40)).astype(np.float32))
    assert calls == {"forward": 0, "backward": 0}


def test_the_cache_keeps_its_own_copy_of_x():
    rng = np.random.default_rng(3)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, heads=2, seed=0)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    out, cache = layer.forward(graph, x)
    want = layer.backward(cache, np.ones_like(out))
    x[:] = 0.0  # the caller reuses its buffer before the backward pass
    got = layer.backward(cache, np.ones_like(out))
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name
    assert not cache.inputs.x_src.flags.writeable


def test_errors_are_the_general_paths():
    rng = np.random.default_rng(4)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, seed=0)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    bad = x.copy()
    bad[2, 1] = np.nan
    with pytest.raises(NonFiniteError, match="x must be finite"):
        layer.forward(graph, bad)
    with pytest.raises(ValueError, match="in_features = 4"):
        layer.forward(graph, x[:, :3].copy())
    layer.params["W_l"] = np.full(layer.params["W_l"].shape, 1e30)
    with pytest.raises(NonFiniteError, match="overflow"):
        layer.forward(graph, x * 1e10)
    layer.params["W_l"].shape = (layer.params["W_l"].size,)  # reshaped in place behind the dict's back
    with pytest.raises(ValueError, match="W_l"):
        layer.forward(graph, x)


@pytest.mark.parametrize("n", [0, 1, 300])  # no rows; one; two blocks of the ∂a partial sums
def test_same_bits_at_the_edges_of_the_size_range(monkeypatch, n):
    rng = np.random.default_rng(n)
    graph = CSRGraph.from_edge_index(rng.integers(0, max(n, 1), (2, 3 * n)), n)
    layer = GATv2Layer(2, 16, heads=1, concat=False, seed=1)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    R = rng.standard_normal((n, 16)).astype(np.float32)
    calls = count_calls(monkeypatch)
    (out, _, grads), (out_g, _, grads_g) = both_paths(monkeypatch, layer, graph, x, R, "linear")
    assert calls == {"forward": 1, "backward": 1}
    assert out.tobytes() == out_g.tobytes()
    for name in grads:
        assert grads[name].tobytes() == grads_g[name].tobytes(), name


def test_grad_out_is_checked_as_the_fast_backward_reads_it(monkeypatch):
    rng = np.random.default_rng(5)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, heads=2, seed=0)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    out, cache = layer.forward(graph, x)
    R = rng.standard_normal(out.shape).astype(np.float32)
    want = layer.backward(cache, R)
    calls = count_calls(monkeypatch)
    # converted (float64, a transposed view) first, then the one kernel call
    for given in (R.astype(np.float64), np.asfortranarray(R)):
        got = layer.backward(cache, given)
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), name
    assert calls["backward"] == 2
    for value in (np.nan, np.inf):
        bad = R.copy()
        bad[-1, -1] = value  # the last element read: no early exit hides it
        with pytest.raises(NonFiniteError, match="grad_out must be finite"):
            layer.backward(cache, bad)
    with pytest.raises(ValueError, match="grad_out"):
        layer.backward(cache, R[:-1].copy())
    with pytest.raises(ValueError, match="theta_r"):
        layer.backward(cache, R, theta_r="quadratic")
    with pytest.raises(TypeError, match="theta_r must be one of"):
        layer.backward(cache, R, theta_r=["linear"])


def test_nan_in_a_row_no_edge_reads_is_refused_on_the_fast_path(monkeypatch):
    graph = CSRGraph.from_edge_index(np.array([[0, 1], [1, 0]]), 4)  # nodes 2 and 3: no edges
    layer = GATv2Layer(3, 2, add_self_loops=False, seed=0)
    x = np.ones((4, 3), np.float32)
    x[3, 0] = np.nan
    calls = count_calls(monkeypatch)
    with pytest.raises(NonFiniteError, match="x must be finite"):
        layer.forward(graph, x)
    assert calls["forward"] == 1  # the fast path saw it and handed over to the general one


SHARED_SPECIALISATIONS = """
import numpy as np
from numba import types
from gatfast import CSRGraph, GATv2Layer
from gatfast.layers import small
from gatfast.kernels import backward, forward, gemm, pairwise

small.COMPILE_AFTER_CALLS = 0  # the one-call kernels from the first call, as with a warm cache
rng = np.random.default_rng(0)
graph = CSRGraph.from_edge_index(rng.integers(0, 12, (2, 40)), 12)
# a small layer, and a few wide rows whose projections both paths make with the dense tile
for layer, width in ((GATv2Layer(5, 7, heads=2, seed=0), 5), (GATv2Layer(64, 16, heads=2, seed=0), 64)):
    x = rng.standard_normal((12, width)).astype(np.float32)
    for enabled in (True, False):
        small.ENABLED = enabled
        out, cache = layer.forward(graph, x)
        for form in ("linear", "pairwise"):
            layer.backward(cache, np.ones_like(out), theta_r=form)
for kernel in (forward.gatv2_forward_rows, backward.gatv2_backward_target_blocks,
               backward.gatv2_backward_source_rows, pairwise.gatv2_pairwise_theta_r_rows, gemm.matmul_pair_rows):
    sigs = kernel.signatures
    literal = [s for s in sigs if any(isinstance(t, types.Literal) for t in s)]
    print(kernel.py_func.__name__, len(sigs), len(literal))
"""


@pytest.mark.slow
def test_the_small_path_shares_the_general_paths_specialisations(tmp_path):
    # each extra specialisation of these kernels is seconds of compiling on a first run (a literal 0
    # or a writable gradient from inside the small kernels made one each); with an empty cache every
    # specialisation compiles, nested ones included, and shows in the kernel's signatures
    import os
    import subprocess
    import sys

    script = tmp_path / "specialisations.py"
    script.write_text(SHARED_SPECIALISATIONS)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr
    counts = {name: (int(n), int(lit)) for name, n, lit in (line.split() for line in run.stdout.splitlines())}
    assert counts == {
        "gatv2_forward_rows": (1, 0),
        "gatv2_backward_target_blocks": (1, 0),
        # one graph of 12 nodes: on either path the target pass does the source pass (passes.source_sums_cuts)
        "gatv2_backward_source_rows": (0, 0),
        "gatv2_pairwise_theta_r_rows": (1, 0),
        "matmul_pair_rows": (1, 0),  # x @ W; 12 rows are too few for the tiled backward (TILED_BACKWARD_ROWS)
    }


@pytest.mark.parametrize("cached", [True, False])
def test_uncached_kernels_wait_for_enough_small_calls(monkeypatch, cached):
    # compiling the one-call kernels costs seconds: without them in the cache, a process makes
    # COMPILE_AFTER_CALLS small calls on the general path first (the same bits either way)
    from gatfast import _runtime

    monkeypatch.setattr(small, "COMPILE_AFTER_CALLS", 3)
    monkeypatch.setattr(small, "_decided", set())
    monkeypatch.setattr(small, "_waiting", {})
    monkeypatch.setattr(_runtime, "compiled_or_cached", lambda kernel: cached)
    rng = np.random.default_rng(6)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, heads=2, seed=0)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    calls = count_calls(monkeypatch)
    seen, results = [], []
    for _ in range(5):
        out, cache = layer.forward(graph, x)
        grads = layer.backward(cache, np.ones_like(out))
        seen.append((calls["forward"], calls["backward"]))
        results.append((out.tobytes(), {k: v.tobytes() for k, v in grads.items()}))
    if cached:
        assert seen == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    else:
        assert seen == [(0, 0), (0, 0), (0, 0), (1, 1), (2, 2)]
    assert all(r == results[0] for r in results)
    big = CSRGraph.from_edge_index(rng.integers(0, 1000, (2, 3000)), 1000)  # not small: not counted
    monkeypatch.setattr(small, "_decided", set())
    monkeypatch.setattr(small, "_waiting", {})
    layer.forward(big, rng.standard_normal((1000, 4)).astype(np.float32))
    assert small._waiting == {} and small._decided == set()


def test_the_one_call_kernels_first_call_is_under_the_compile_notice(monkeypatch):
    # the compile after COMPILE_AFTER_CALLS small calls takes seconds: the notice must cover it,
    # not a call that went the general way before
    from gatfast import _runtime

    keys = []
    real = _runtime.compile_notice
    monkeypatch.setattr(_runtime, "compile_notice", lambda key, *a: keys.append(key) or real(("test", key)))
    monkeypatch.setattr(small, "_called", set())
    rng = np.random.default_rng(7)
    graph = naive.mixed_graph(rng)
    layer = GATv2Layer(4, 3, seed=0)
    x = rng.standard_normal((graph.num_nodes, 4)).astype(np.float32)
    for _ in range(2):
        out, cache = layer.forward(graph, x)
        layer.backward(cache, np.ones_like(out))
    assert keys == [("small_forward", "f"), ("small_backward", "f")]
