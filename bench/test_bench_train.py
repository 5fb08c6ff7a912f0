"""A full training step: forward (training mode), loss gradient, backward, Adam.

For the single-layer workloads the upstream gradient is fixed (the loss is
``sum(out * grad)``); ``cora-train`` is the 2-layer GAT recipe on Cora
(dropout 0.6 on features and attention, ELU, Adam lr 0.005, weight decay 5e-4,
cross-entropy on the training nodes); ``scene-batch-train`` the 3-layer network on 64 road
scenes (4 heads x 16, no dropout, MSE, Adam lr 0.01, weight decay 1e-4).
"""

import pytest
from conftest import libraries
from workloads import WORKLOADS

STEPS = [n for n, (kind, _) in WORKLOADS.items() if kind == "train" or not n.endswith("pairwise")]


@pytest.mark.parametrize("lib", libraries())
@pytest.mark.parametrize("name", STEPS)
def test_train_step(benchmark, get_workload, make_runner, name, lib):
    w = get_workload(name)
    runner = make_runner(lib, w)
    benchmark.group = f"train step {name}"
    benchmark.extra_info.update(nodes=w.num_nodes, edges=w.graph.nnz, edge_dim=w.edge_dim, bipartite=w.bipartite)
    benchmark(runner.train_step)
