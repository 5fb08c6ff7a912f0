"""Results are the same bits for any Numba thread count, and the SIMD sums keep their documented order."""

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import gatfast
import gatfast.layers.passes as passes
from gatfast import CSRGraph, GATv2Layer
from gatfast.kernels.prefetch import PREFETCH_DISTANCE
from gatfast.kernels.simd import dot_rows, leaky_score

N_NODES = 3000
N_EDGES = 30000

needs_two_threads = pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="Numba was started with fewer than 2 threads"
)


def big_graph(seed=0):
    """~30000 random edges (duplicates and loops included) plus a few hubs of 200 in-edges."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, N_NODES, N_EDGES)
    dst = rng.integers(0, N_NODES, N_EDGES)
    hubs = np.repeat(rng.choice(N_NODES, 5, replace=False), 200)
    src = np.concatenate([src, rng.integers(0, N_NODES, hubs.size)])
    dst = np.concatenate([dst, hubs])
    return CSRGraph.from_edge_index(np.stack([src, dst]), N_NODES)


def run(layer, graph, x, grad_out, training, edge_attr=None):
    out, cache = layer.forward(graph, x, edge_attr, training=training, rng=np.random.default_rng(1))
    result = {"out": out, "alpha": cache.alpha}
    for theta_r in ("linear", "pairwise"):
        for name, grad in layer.backward(cache, grad_out, theta_r=theta_r).items():
            result[f"{theta_r}/{name}"] = grad
    return result


@pytest.fixture
def restore_threads():
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


@needs_two_threads
@pytest.mark.parametrize(
    "dtype, kw",
    [
        (np.float32, dict(heads=3, concat=True)),
        (np.float64, dict(heads=2, concat=False, residual=True, dropout=0.2)),
        (np.float32, dict(heads=2, attention_activation="softplus", root_weight="theta_r")),
        (np.float32, dict(heads=2, edge_dim=3, out_features=17, dropout=0.1)),
        (np.float64, dict(heads=1, edge_dim=1, out_features=33, concat=False)),
    ],
)
# prefetch: the backward of big graphs (with LeakyReLU, the source records)
@pytest.mark.parametrize("prefetch", [False, True])
def test_same_bits_for_one_and_two_threads(restore_threads, monkeypatch, dtype, kw, prefetch):
    if prefetch:
        monkeypatch.setattr(passes, "source_pass_ahead", lambda gathered, span: PREFETCH_DISTANCE)
        monkeypatch.setattr(passes, "RECORD_MIN_ROW_BYTES", 0)
    graph = big_graph()
    rng = np.random.default_rng(2)
    kw = dict(kw)
    layer = GATv2Layer(8, kw.pop("out_features", 4), dtype=dtype, seed=3, **kw)
    x = rng.standard_normal((N_NODES, 8)).astype(dtype)
    attr = None if layer.edge_dim is None else rng.standard_normal((graph.nnz, layer.edge_dim)).astype(dtype)
    grad_out = rng.standard_normal((N_NODES, layer.out_dim)).astype(dtype)
    training = layer.dropout > 0
    results = {}
    for threads in (1, 2):
        numba.set_num_threads(threads)
        assert numba.get_num_threads() == threads
        results[threads] = run(layer, graph, x, grad_out, training, attr)
    one, two = results[1], results[2]
    assert set(one) == set(two)
    for name in one:
        a, b = one[name], two[name]
        if a is None:
            assert b is None
            continue
        assert a.dtype == b.dtype == dtype, name
        assert a.tobytes() == b.tobytes(), f"{name} differs between 1 and 2 threads"
    assert np.abs(one["linear/att"]).max() > 0  # the gradients are not trivially zero


SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import numba
    sys.path.insert(0, {tests!r})
    from test_determinism import GATv2Layer, big_graph, run, N_NODES

    assert numba.get_num_threads() == int(sys.argv[2])
    import gatfast
    assert gatfast.__file__ == sys.argv[3], (gatfast.__file__, sys.argv[3])
    graph = big_graph(seed=5)
    rng = np.random.default_rng(6)
    layer = GATv2Layer(6, 4, heads=2, dtype=np.float64, seed=7)
    x = rng.standard_normal((N_NODES, 6))
    grad_out = rng.standard_normal((N_NODES, layer.out_dim))
    np.savez(sys.argv[1], **run(layer, graph, x, grad_out, False))
    """
)


@needs_two_threads
def test_same_bits_across_processes(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(__file__)))
    # the child imports the same gatfast as this process
    path_entries = [os.path.dirname(os.path.dirname(gatfast.__file__))]
    path_entries += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    saved = {}
    for threads in (1, 2):
        env = dict(os.environ, NUMBA_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join(path_entries))
        path = tmp_path / f"threads{threads}.npz"
        subprocess.run(
            [sys.executable, str(script), str(path), str(threads), gatfast.__file__],
            env=env,
            check=True,
            timeout=300,
        )
        saved[threads] = dict(np.load(path))
    assert set(saved[1]) == set(saved[2]) and len(saved[1]) > 10
    for name, a in saved[1].items():
        assert a.tobytes() == saved[2][name].tobytes(), name


@numba.njit
def _simd_sums(a, b, att, slope):
    """``dot_rows`` and ``leaky_score`` of the rows ``a[r], b[r]`` (head 0), for every ``r``."""
    dots = np.empty(a.shape[0], a.dtype)
    scores = np.empty(a.shape[0], a.dtype)
    for r in range(a.shape[0]):
        dots[r] = dot_rows(a, r, b, r, 0)
        scores[r] = leaky_score(att, a, r, b, r, 0, slope)
    return dots, scores


def fixed_order_sum(terms):
    """The order documented in gatfast/kernels/simd.py, one IEEE operation at a time.

    Lane ``l`` sums the terms ``l, l + 8, ...`` of the full 8-term chunks, the lanes are added
    as ``((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))``, then the tail one by one.
    """
    full = len(terms) // 8 * 8
    lanes = [terms.dtype.type(0.0)] * 8
    for base in range(0, full, 8):
        lanes = [lanes[k] + terms[base + k] for k in range(8)]
    total = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
    for c in range(full, len(terms)):
        total = total + terms[c]
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [7, 8, 9, 24, 33])
def test_simd_sums_follow_the_documented_order(dtype, channels):
    """The bits of a result (saved outputs, other CPUs) depend on the order of the channel sums.

    Every other order is as accurate, so only an exact comparison with the documented one
    notices a change of it; terms spread over twelve orders of magnitude round differently
    in almost any other order.
    """
    rng = np.random.default_rng(channels)
    rows = 20
    spread = 10.0 ** rng.uniform(-6, 6, (3, rows, 1, channels))
    a, b, w = (rng.standard_normal(spread.shape) * spread).astype(dtype)
    att = w[0]  # (1, channels): one head
    slope = dtype(0.2)
    dots, scores = _simd_sums(a, b, att, slope)
    for r in range(rows):
        z = a[r, 0] + b[r, 0]
        act = np.where(z > 0, z, slope * z)
        assert dots[r].tobytes() == fixed_order_sum(a[r, 0] * b[r, 0]).tobytes(), r
        assert scores[r].tobytes() == fixed_order_sum(att[0] * act).tobytes(), r
