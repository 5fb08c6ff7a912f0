"""Benchmark workloads shared by the pytest-benchmark suites, ``compare.py`` and ``roofline.py``.

Every workload is built deterministically from a seed, in float32, with the
self loops already in the graph (so no library pays for adding them inside
the timed region: gatfast and PyG get ``add_self_loops=False`` and the same
edges, DGL never adds loops). Two sizes exist: ``"full"`` (the sizes of the
performance issue) and ``"tiny"`` (seconds in total, for CI smoke runs).

The gatfast side of each workload is wrapped in :class:`GatfastRunner`,
whose ``forward``, ``forward_backward`` and ``train_step`` methods are what
the benchmarks time, and whose ``outputs`` are what the peers (PyG, DGL) are
checked against before they are timed.
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
    "small-batch-edge": ("layer", "small-batch with 4 edge features per edge"),
    "large": ("layer", "200,000 nodes, in-degree 10, 64 -> 1 x 64"),
    "large-edge": ("layer", "large with 8 edge features per edge (and their gradient)"),
    "large-bipartite": ("layer", "large as a bipartite layer (64, 64) -> 64 on (x, x_dst)"),
    **{
        f"degree-{d}-{form}": ("layer", f"2000 nodes, every in-degree {d}, 32 -> 32, theta_r={form}")
        for form in ("linear", "pairwise")
        for d in DEGREES
    },
    "scene": ("layer", "one road scene: 10 vehicles, complete graph with loops, 16 -> 1 x 32 (per-call cost)"),
    "cora-train": ("train", "Cora 2-layer GATv2 training step (dropout 0.6, Adam)"),
    "scene-batch-train": ("train", "64 road scenes of 3-12 vehicles, 3-layer GATv2Network (4 x 16), MSE, Adam"),
}
#: workloads with edge features (DGL's GATv2Conv has none: no DGL run)
EDGE_WORKLOADS = ("small-batch-edge", "large-edge")
#: per-call overhead workloads: timed in tight loops of many calls, reported in microseconds
MICRO_WORKLOADS = ("scene",)


def dgl_can_run(name):
    """Whether DGL's ``GATv2Conv`` can express workload ``name`` (it has no edge features)."""
    return name not in EDGE_WORKLOADS


@dataclass
class Workload:
    """Inputs of one benchmark case (graph with self loops, features, layer shape)."""

    name: str
    graph: gatfast.CSRGraph
    x: object  # ndarray or scipy.sparse csr_array (the sources' features for a bipartite layer)
    in_features: object  # int, or (F_src, F_dst) for a bipartite layer
    out_features: int
    heads: int = 1
    concat: bool = True
    theta_r: str = "linear"
    kind: str = "layer"
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    edge_attr: np.ndarray | None = None  # (nnz, D) in the graph's CSR order
    x_dst: np.ndarray | None = None  # the targets' features of a bipartite layer (a separate array)
    extra: dict = field(default_factory=dict)

    @property
    def num_nodes(self):
        return self.graph.num_nodes

    @property
    def bipartite(self):
        return self.x_dst is not None

    @property
    def edge_dim(self):
        return None if self.edge_attr is None else int(self.edge_attr.shape[1])

    @property
    def micro(self):
        return self.name in MICRO_WORKLOADS

    @property
    def out_dim(self):
        """Width of the output: the layer's, or the network's outputs for a training workload."""
        if self.kind == "train":
            return self.extra["outputs"]
        return self.heads * self.out_features if self.concat else self.out_features

    def layer_x(self):
        """What the layer's ``forward`` takes as ``x``: the features, or the pair ``(x, x_dst)``."""
        return (self.x, self.x_dst) if self.bipartite else self.x

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


def complete_graph(n):
    """Every ordered pair of distinct nodes, plus a loop per node: ``n * n`` edges."""
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    return _loop_graph(src, dst, n)


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


def edge_features(graph, dims, seed):
    """Standard normal edge attributes, one row per edge of ``graph`` (CSR order)."""
    return np.random.default_rng(seed).standard_normal((graph.nnz, dims)).astype(DTYPE)


def load_cora():
    """Cora from the shipped ``cora.npz``: graph (no loops), sparse features, labels, train mask."""
    d = np.load(DATA_DIR / "cora.npz")
    x = sp.csr_array((d["x_data"], d["x_indices"], d["x_indptr"]), shape=tuple(d["x_shape"]))
    n = x.shape[0]
    g = gatfast.CSRGraph.from_edge_index(d["edge_index"], n)
    return g, x.astype(DTYPE), d["y"].astype(np.int64), d["train_mask"].astype(bool)


# ---------------------------------------------------------------------- builders
def _cora(name, tiny, rng, seed):
    g, x, y, mask = load_cora()
    if tiny:  # the first 300 nodes and the edges among them
        keep = 300
        g = gatfast.CSRGraph.from_scipy(g.to_scipy()[:keep, :keep], rows="targets")
        x, y, mask = x[:keep], y[:keep], mask[:keep]
    g = g.with_self_loops()
    if name == "cora":
        return Workload(name, g, x, x.shape[1], 8, heads=8, concat=True)
    classes = int(y.max()) + 1
    return Workload(name, g, x, x.shape[1], 8, heads=8, kind="train", y=y, train_mask=mask,
                    extra={"num_classes": classes, "outputs": classes, "task": "classification",
                           "net": {"num_layers": 2, "heads": 8, "out_heads": 1, "dropout": 0.6,
                                   "attention_dropout": 0.6},
                           "optim": {"lr": 0.005, "weight_decay": 5e-4}})


def _small_batch(name, tiny, rng, seed):
    g = batched_graphs(16 if tiny else 1024, 8, 32, 4, rng)
    x = rng.standard_normal((g.num_nodes, 16)).astype(DTYPE)
    edge_attr = edge_features(g, 4, seed + 100) if name.endswith("-edge") else None
    return Workload(name, g, x, 16, 32, edge_attr=edge_attr)


def _large(name, tiny, rng, seed):
    n = 2000 if tiny else 200_000
    g = random_graph(n, 10, rng)
    x = rng.standard_normal((n, 64)).astype(DTYPE)
    if name == "large-bipartite":  # the same edges and features, the targets' as a separate copy
        return Workload(name, g, x, (64, 64), 64, x_dst=x.copy())
    edge_attr = edge_features(g, 8, seed + 100) if name == "large-edge" else None
    return Workload(name, g, x, 64, 64, edge_attr=edge_attr)


def _degree(name, tiny, rng, seed):
    _, degree, form = name.split("-")
    degree = int(degree)
    n = 300 if tiny else 2000
    g = regular_graph(n, min(degree, 64) if tiny else degree, rng)
    x = rng.standard_normal((n, 32)).astype(DTYPE)
    return Workload(name, g, x, 32, 32, theta_r=form, extra={"degree": degree})


def _scene(name, tiny, rng, seed):
    g = complete_graph(10)
    x = rng.standard_normal((10, 16)).astype(DTYPE)
    return Workload(name, g, x, 16, 32)


def _scene_batch(name, tiny, rng, seed):
    scenes = gatfast.data.make_traffic_scenes(num_graphs=8 if tiny else 64, min_nodes=3, max_nodes=12, seed=seed)
    g, x, _, y = scenes.batch(np.arange(len(scenes)))
    return Workload(name, g.with_self_loops(), x.astype(DTYPE), x.shape[1], 16, heads=4, kind="train",
                    y=y.astype(DTYPE),
                    extra={"outputs": y.shape[1], "task": "regression", "scenes": len(scenes),
                           "net": {"num_layers": 3, "heads": 4, "out_heads": 1, "dropout": 0.0,
                                   "attention_dropout": 0.0},
                           "optim": {"lr": 0.01, "weight_decay": 1e-4}})


def _builder(name):
    if name in ("cora", "cora-train"):
        return _cora
    if name.startswith("small-batch"):
        return _small_batch
    if name.startswith("large"):
        return _large
    if name.startswith("degree-"):
        return _degree
    return _scene_batch if name == "scene-batch-train" else _scene


def make_workload(name, size="full", seed=0):
    """Build workload ``name`` at ``size`` ("full" or "tiny")."""
    if name not in WORKLOADS:
        raise ValueError(f"name must be one of {list(WORKLOADS)}, got {name!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    return _builder(name)(name, size == "tiny", np.random.default_rng(seed), seed)


# ---------------------------------------------------------------------- gatfast side
def make_network(w, seed=0):
    """The ``GATv2Network`` of a training workload (ELU, node level, loops already in the graph)."""
    net = w.extra["net"]
    return gatfast.GATv2Network(
        w.in_features, w.out_features, w.extra["outputs"], num_layers=net["num_layers"], heads=net["heads"],
        out_heads=net["out_heads"], activation="elu", dropout=net["dropout"],
        attention_dropout=net["attention_dropout"], add_self_loops=False, dtype=DTYPE, seed=seed,
    )


def loss_and_grad(w, out):
    """The training workload's loss of the network output, and its gradient."""
    from gatfast.models import mse_loss, softmax_cross_entropy

    if w.extra["task"] == "regression":
        return mse_loss(out, w.y)
    return softmax_cross_entropy(out, w.y, w.train_mask)


def flat_grads(grads):
    """A layer's gradient dict with the input gradients under flat names (``x`` or ``x_src``/``x_dst``)."""
    out = {}
    for k, v in grads.items():
        if isinstance(v, tuple):
            out[f"{k}_src"], out[f"{k}_dst"] = v
        elif v is not None:
            out[k] = v
    return out


class GatfastRunner:
    """The gatfast side of a workload: one layer (or the network) ready to time."""

    def __init__(self, w: Workload, seed=0):
        from gatfast.optim import Adam

        self.w = w
        self.grad = w.grad_out()
        if w.kind == "train":
            self.model = make_network(w, seed)
            self.opt = Adam(self.model.parameters(), **w.extra["optim"])
            self.rng = np.random.default_rng(seed)
        else:
            self.layer = gatfast.GATv2Layer(
                w.in_features, w.out_features, heads=w.heads, concat=w.concat, add_self_loops=False,
                edge_dim=w.edge_dim, dtype=DTYPE, seed=seed,
            )
            self.opt = None
        if w.micro:  # per-call timing: the steady state, with the one-call kernels of small layers in use
            from gatfast.layers import small

            for _ in range(small.COMPILE_AFTER_CALLS + 1):  # they compile after this many uncached calls
                self.forward_backward()

    def forward(self):
        """The inference pass (no cache for a backward), as the peers' forward under ``torch.no_grad``."""
        if self.w.kind == "train":
            return self.model.output(self.w.graph, self.w.x)
        return self.layer.output(self.w.graph, self.w.layer_x(), self.w.edge_attr)

    def forward_backward(self):
        if self.w.kind == "train":
            return self.train_step()
        return self.backward_only(self.forward_cache())

    def forward_cache(self):
        """A forward pass whose cache ``backward_only`` differentiates."""
        return self.layer.forward(self.w.graph, self.w.layer_x(), self.w.edge_attr)[1]

    def backward_only(self, cache):
        return self.layer.backward(cache, self.grad, theta_r=self.w.theta_r)

    def train_step(self):
        """One optimisation step: forward (training mode), loss, backward, Adam.

        A network's step asks for no input gradient (``input_grad=False``), as
        ``gatfast train`` does (``training/steps.py``) and as PyG's step, whose
        ``x`` does not require a gradient, computes none.
        """
        if self.w.kind == "train":
            out, cache = self.model.forward(self.w.graph, self.w.x, training=True, rng=self.rng)
            loss, grad = loss_and_grad(self.w, out)
            self.opt.step(self.model.backward(cache, grad, input_grad=False))
            return loss
        if self.opt is None:
            from gatfast.optim import Adam

            self.opt = Adam(self.layer.params, lr=0.005, weight_decay=5e-4)
        _, cache = self.layer.forward(self.w.graph, self.w.layer_x(), self.w.edge_attr, training=True)
        grads = self.layer.backward(cache, self.grad, theta_r=self.w.theta_r)
        self.opt.step(grads)
        return grads

    def outputs(self):
        """What a peer must reproduce: the output and every gradient, under gatfast's names (no dropout, no step).

        A layer: ``out``, the parameter gradients, the input gradient(s) for
        dense features (``x``, or ``x_src`` and ``x_dst``) and ``edge_attr``.
        A training workload: the network's evaluation-mode output and the
        parameter gradients of its loss (``layers.<l>.<name>``).
        """
        if self.w.kind == "train":
            out, cache = self.model.forward(self.w.graph, self.w.x, training=False)
            _, grad = loss_and_grad(self.w, out)
            grads = self.model.backward(cache, grad)
            return {"out": out, **{k: grads[k] for k in self.model.parameters()}}
        out, cache = self.layer.forward(self.w.graph, self.w.layer_x(), self.w.edge_attr)
        grads = self.layer.backward(cache, self.grad, theta_r="linear")
        return {"out": out, **flat_grads(grads)}
