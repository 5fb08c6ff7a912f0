"""Benchmark workloads shared by the pytest-benchmark suites and ``compare.py``.

Every workload is built deterministically from a seed, in float32, with the
self loops already in the graph (so neither library pays for adding them
inside the timed region: PyG gets ``add_self_loops=False`` and the same
edges). Two sizes exist: ``"full"`` (the sizes of the performance issue)
and ``"tiny"`` (seconds in total, for CI smoke runs).

The gatfast side of each workload is wrapped in :class:`GatfastRunner`,
whose ``forward``, ``forward_backward`` and ``train_step`` methods are what
the benchmarks time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

import gatfast

DATA_DIR = gatfast.data.DATA_DIR
DTYPE = np.float32
SIZES = ("full", "tiny")
DEGREES = (4, 16, 64, 256)

# name -> (kind, description); the order is the order of the comparison table
WORKLOADS = {
    "cora": ("layer", "Cora, 1433 sparse features -> 8 heads x 8, concat"),
    "small-batch": ("layer", "1024 graphs of 8-32 nodes batched, 16 -> 1 x 32"),
    "large": ("layer", "200,000 nodes, in-degree 10, 64 -> 1 x 64"),
    **{
        f"degree-{d}-{form}": ("layer", f"2000 nodes, every in-degree {d}, 32 -> 32, theta_r={form}")
        for form in ("linear", "pairwise")
        for d in DEGREES
    },
    "cora-train": ("train", "Cora 2-layer GATv2 training step (dropout 0.6, Adam)"),
}


@dataclass
class Workload:
    """Inputs of one benchmark case (graph with self loops, features, layer shape)."""

    name: str
    graph: gatfast.CSRGraph
    x: object  # ndarray or scipy.sparse csr_array
    in_features: int
    out_features: int
    heads: int = 1
    concat: bool = True
    theta_r: str = "linear"
    kind: str = "layer"
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    @property
    def num_nodes(self):
        return self.graph.num_nodes

    @property
    def out_dim(self):
        return self.heads * self.out_features if self.concat else self.out_features

    def grad_out(self, seed=1):
        """A fixed upstream gradient for the single-layer backward."""
        rng = np.random.default_rng(seed)
        return rng.standard_normal((self.num_nodes, self.out_dim)).astype(DTYPE)

    def dense_x(self):
        return self.x.toarray() if sp.issparse(self.x) else self.x


# ---------------------------------------------------------------------- graphs
def _loop_graph(src, dst, n):
    """CSR-by-target graph of ``src -> dst`` plus one self loop per node."""
    return gatfast.CSRGraph.from_edge_index(np.stack([src, dst]), n).with_self_loops()


def random_graph(n, avg_degree, rng):
    """``n * avg_degree`` edges with uniform random sources and targets (no loops)."""
    m = int(n * avg_degree)
    dst = rng.integers(0, n, m)
    src = (dst + rng.integers(1, n, m)) % n  # never a loop
    return _loop_graph(src, dst, n)


def regular_graph(n, degree, rng):
    """Every node has exactly ``degree`` in-edges: ``degree - 1`` distinct others and its loop."""
    k = degree - 1
    rows = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        s = rng.choice(n - 1, size=k, replace=False)
        rows[i] = s + (s >= i)
    dst = np.repeat(np.arange(n, dtype=np.int64), k)
    return _loop_graph(rows.ravel(), dst, n)


def batched_graphs(num_graphs, low, high, avg_degree, rng):
    graphs = []
    for _ in range(num_graphs):
        n = int(rng.integers(low, high + 1))
        m = n * avg_degree
        dst = rng.integers(0, n, m)
        src = (dst + rng.integers(1, n, m)) % n
        graphs.append(gatfast.CSRGraph.from_edge_index(np.stack([src, dst]), n))
    g, _ = gatfast.batch_graphs(graphs)
    return g.with_self_loops()


def load_cora():
    """Cora from the shipped ``cora.npz``: graph (no loops), sparse features, labels, train mask."""
    d = np.load(DATA_DIR / "cora.npz")
    x = sp.csr_array((d["x_data"], d["x_indices"], d["x_indptr"]), shape=tuple(d["x_shape"]))
    n = x.shape[0]
    g = gatfast.CSRGraph.from_edge_index(d["edge_index"], n)
    return g, x.astype(DTYPE), d["y"].astype(np.int64), d["train_mask"].astype(bool)


# ---------------------------------------------------------------------- workloads
def make_workload(name, size="full", seed=0):
    """Build workload ``name`` at ``size`` ("full" or "tiny")."""
    if name not in WORKLOADS:
        raise ValueError(f"name must be one of {list(WORKLOADS)}, got {name!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    tiny = size == "tiny"
    rng = np.random.default_rng(seed)
    if name in ("cora", "cora-train"):
        g, x, y, mask = load_cora()
        if tiny:  # the first 300 nodes and the edges among them
            keep = 300
            a = g.to_scipy()[:keep, :keep]
            g = gatfast.CSRGraph.from_scipy(a, rows="targets")
            x, y, mask = x[:keep], y[:keep], mask[:keep]
        g = g.with_self_loops()
        if name == "cora":
            return Workload(name, g, x, x.shape[1], 8, heads=8, concat=True)
        return Workload(name, g, x, x.shape[1], 8, heads=8, kind="train", y=y, train_mask=mask,
                        extra={"num_classes": int(y.max()) + 1})
    if name == "small-batch":
        g = batched_graphs(16 if tiny else 1024, 8, 32, 4, rng)
        x = rng.standard_normal((g.num_nodes, 16)).astype(DTYPE)
        return Workload(name, g, x, 16, 32)
    if name == "large":
        n = 2000 if tiny else 200_000
        g = random_graph(n, 10, rng)
        x = rng.standard_normal((n, 64)).astype(DTYPE)
        return Workload(name, g, x, 64, 64)
    _, degree, form = name.split("-")
    degree = int(degree)
    n = 300 if tiny else 2000
    g = regular_graph(n, min(degree, 64) if tiny else degree, rng)
    x = rng.standard_normal((n, 32)).astype(DTYPE)
    return Workload(name, g, x, 32, 32, theta_r=form, extra={"degree": degree})


# ---------------------------------------------------------------------- gatfast side
class GatfastRunner:
    """The gatfast side of a workload: one layer (or the 2-layer network) ready to time."""

    def __init__(self, w: Workload, seed=0):
        self.w = w
        self.grad = w.grad_out()
        if w.kind == "train":
            from gatfast.models import GATv2Network
            from gatfast.optim import Adam

            self.model = GATv2Network(
                w.in_features, w.out_features, w.extra["num_classes"], num_layers=2, heads=w.heads,
                out_heads=1, activation="elu", dropout=0.6, attention_dropout=0.6, dtype=DTYPE,
                seed=seed,
            )
            self.opt = Adam(self.model.parameters(), lr=0.005, weight_decay=5e-4)
            self.rng = np.random.default_rng(seed)
        else:
            self.layer = gatfast.GATv2Layer(
                w.in_features, w.out_features, heads=w.heads, concat=w.concat, dtype=DTYPE, seed=seed
            )
            self.opt = None

    def forward(self):
        if self.w.kind == "train":
            return self.model.forward(self.w.graph, self.w.x, training=False)[0]
        return self.layer.forward(self.w.graph, self.w.x)[0]

    def forward_backward(self):
        if self.w.kind == "train":
            return self.train_step()
        _, cache = self.layer.forward(self.w.graph, self.w.x)
        return self.layer.backward(cache, self.grad, theta_r=self.w.theta_r)

    def forward_cache(self):
        """A forward pass whose cache ``backward_only`` differentiates."""
        return self.layer.forward(self.w.graph, self.w.x)[1]

    def backward_only(self, cache):
        return self.layer.backward(cache, self.grad, theta_r=self.w.theta_r)

    def train_step(self):
        """One optimisation step: forward (training mode), loss, backward, Adam."""
        if self.w.kind == "train":
            from gatfast.models import softmax_cross_entropy

            logits, cache = self.model.forward(self.w.graph, self.w.x, training=True, rng=self.rng)
            loss, grad = softmax_cross_entropy(logits, self.w.y, self.w.train_mask)
            grads = self.model.backward(cache, grad)
            self.opt.step(grads)
            return loss
        if self.opt is None:
            from gatfast.optim import Adam

            self.opt = Adam(self.layer.params, lr=0.005, weight_decay=5e-4)
        _, cache = self.layer.forward(self.w.graph, self.w.x, training=True)
        grads = self.layer.backward(cache, self.grad, theta_r=self.w.theta_r)
        self.opt.step(grads)
        return grads
