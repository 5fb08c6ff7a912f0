"""Backward pass of one GATv2 layer (given the forward cache), side by side with PyG and DGL.

For PyG and DGL the autograd graph is kept (``retain_graph=True``) so that only the
backward pass is timed, as for gatfast.
"""

import numpy as np
import pytest
from conftest import libraries
from workloads import WORKLOADS

LAYER = [n for n, (kind, _) in WORKLOADS.items() if kind == "layer"]


@pytest.mark.parametrize("lib", libraries())
@pytest.mark.parametrize("name", LAYER)
def test_backward(benchmark, get_workload, make_runner, name, lib):
    w = get_workload(name)
    if lib != "gatfast" and name.endswith("pairwise"):
        pytest.skip("PyG and DGL have one backward; the pairwise Θ_R form is gatfast's")
    runner = make_runner(lib, w)
    cache = runner.forward_cache()
    benchmark.group = f"backward {name}"
    benchmark.extra_info.update(nodes=w.num_nodes, edges=w.graph.nnz, edge_dim=w.edge_dim, bipartite=w.bipartite)
    grads = benchmark(runner.backward_only, cache)
    if lib == "gatfast":
        assert np.all(np.isfinite(grads["att"]))
        if w.edge_dim:
            assert grads["edge_attr"].shape == w.edge_attr.shape
