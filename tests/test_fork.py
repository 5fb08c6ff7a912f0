"""A child forked after the parent ran parallel kernels works (GNU OpenMP cannot be used after fork)."""

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import multiprocessing as mp, sys
    import numba, numpy as np
    import gatfast

    def work(_=None):
        rng = np.random.default_rng(0)
        g = gatfast.CSRGraph.from_edge_index(rng.integers(0, 3000, (2, 40000)), 3000)
        layer = gatfast.GATv2Layer(16, 16, heads=2, seed=0)
        x = rng.standard_normal((3000, 16)).astype(np.float32)
        out, cache = layer.forward(g, x)
        grads = layer.backward(cache, np.ones_like(out))
        return out, grads["W_l"]

    if __name__ == "__main__":
        method = sys.argv[1]
        parent = work()  # big enough for the parallel kernels: libgomp's threads now exist
        with mp.get_context(method).Pool(2) as pool:
            results = pool.map(work, range(2))
        for out, gw in results:
            assert np.array_equal(out, parent[0]) and np.array_equal(gw, parent[1])
        print("ok", numba.threading_layer())
    """
)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_children_compute_the_same_bits(tmp_path, method):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok")
