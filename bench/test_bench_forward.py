"""Forward pass of one GATv2 layer, gatfast and (when installed) PyG and DGL side by side.

Run ``pytest bench/ --benchmark-only``; see ``bench/README.md``. Each PyG or DGL runner is checked
against gatfast (same weights, same outputs and gradients) before its first timing (``conftest.py``).
"""

import pytest
from conftest import libraries
from workloads import WORKLOADS

# the Θ_R form only matters in the backward pass: one forward per degree
FORWARD = [n for n, (kind, _) in WORKLOADS.items() if kind == "layer" and not n.endswith("pairwise")]


@pytest.mark.parametrize("lib", libraries())
@pytest.mark.parametrize("name", FORWARD)
def test_forward(benchmark, get_workload, make_runner, name, lib):
    w = get_workload(name)
    runner = make_runner(lib, w)
    benchmark.group = f"forward {name}"
    benchmark.extra_info.update(nodes=w.num_nodes, edges=w.graph.nnz, edge_dim=w.edge_dim, bipartite=w.bipartite)
    out = benchmark(runner.forward)
    assert tuple(out.shape) == (w.num_nodes, w.out_dim)
