"""The byte/flop model of a layer step and the bound arithmetic (assumptions: ``bench/roofline.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gatfast.kernels import LEAKY_RELU, num_att_blocks, record_bytes
from gatfast.layers.passes import source_prefetch_distance, source_sums_cuts, uses_source_records


@dataclass(frozen=True)
class Gather:
    """``rows`` reads of rows of ``row_bytes`` at random positions of a table of ``table_bytes``."""

    table: str
    rows: float
    row_bytes: int
    table_bytes: float


@dataclass
class Model:
    """Minimum traffic and arithmetic of one kernel call (bytes by array name)."""

    reads: dict = field(default_factory=dict)
    writes: dict = field(default_factory=dict)
    gathers: list = field(default_factory=list)
    flops: float = 0.0
    blas: bool = False

    @property
    def stream_bytes(self):
        return sum(self.reads.values()) + sum(self.writes.values())

    def arrays(self):
        """Every array the kernel touches, name -> bytes."""
        out = dict(self.reads)
        for k, v in self.writes.items():
            out[k] = max(out.get(k, 0), v)
        for g in self.gathers:
            out[g.table] = max(out.get(g.table, 0), g.table_bytes)
        return out


@dataclass
class Kernel:
    name: str
    label: str
    model: Model
    run: object = None  # a no-argument callable, or None (model only)
    edge: bool = False  # an edge kernel (the 1.3x goal)


@dataclass
class Dims:
    """Sizes one layer step depends on."""

    n: int  # target nodes
    nnz: int  # edges (self loops included)
    heads: int
    channels: int
    in_features: int  # F (of the sources, for bipartite input)
    f: int = 4  # float itemsize
    i: int = 8  # graph index itemsize (int64)
    theta_r: str = "linear"
    pairs: int = 0  # sum over targets of deg * (deg - 1) / 2 (pairwise Θ_R form)
    x_sparse: bool = False
    x_nnz: int = 0  # stored entries of sparse x
    xi: int = 4  # sparse x index itemsize
    bias: bool = True
    edge_dim: int = 0  # D edge features per edge (0: none)
    bipartite: bool = False  # (x_src, x_dst) as two arrays: two projections and two input gradients
    n_src: int = 0  # source nodes (0: as many as targets)
    in_dst: int = 0  # F_dst (0: in_features)
    source_records: bool = False  # the target pass writes each edge's record, the source pass reads it (records.py)
    source_sums: bool = False  # the target pass also sums Q_j (a batch of small graphs: passes.source_sums_cuts)

    @property
    def hc(self):
        return self.heads * self.channels

    @property
    def record(self):
        """Bytes of an edge's source record (``kernels/records.py``)."""
        return record_bytes(self.heads, self.channels, self.f)

    @property
    def ns(self):
        """Source nodes."""
        return self.n_src or self.n

    @property
    def fd(self):
        """Target features."""
        return self.in_dst or self.in_features

    @property
    def att_blocks(self):
        return num_att_blocks(self.n)

    @classmethod
    def from_graph(
        cls, graph, x, heads, channels, theta_r="linear", dtype=np.float32, edge_dim=0, x_dst=None
    ):
        import scipy.sparse as sp

        deg = np.diff(graph.indptr).astype(np.int64)
        sparse = sp.issparse(x)
        if sparse and x_dst is not None:
            raise ValueError("sparse bipartite input is not modelled")
        edge_dim = int(edge_dim or 0)

        def sized(*shape):  # an array of this shape in size only: the choice reads sizes, never values
            return np.broadcast_to(np.zeros((), dtype), shape)

        # layers/passes.py's choice (LeakyReLU, no dropout), from the sizes of what the source pass gathers
        rows = sized(graph.num_dst, heads, channels)
        ahead = source_prefetch_distance(
            graph, rows, rows, sized(graph.nnz, heads), sized(0, heads), sized(graph.nnz, edge_dim)
        )
        records = uses_source_records(LEAKY_RELU, ahead, 2 * rows.nbytes)
        return cls(
            source_records=records,
            source_sums=source_sums_cuts(graph, bool(edge_dim), records).size > 0,
            n=int(graph.num_dst),
            nnz=int(graph.nnz),
            heads=int(heads),
            channels=int(channels),
            in_features=int(x.shape[1]),
            f=np.dtype(dtype).itemsize,
            i=graph.indices.itemsize,
            theta_r=theta_r,
            pairs=int((deg * (deg - 1) // 2).sum()),
            x_sparse=sparse,
            x_nnz=int(x.nnz) if sparse else 0,
            xi=x.indices.itemsize if sparse else 4,
            edge_dim=int(edge_dim or 0),
            bipartite=x_dst is not None,
            n_src=int(graph.num_src),
            in_dst=int(x_dst.shape[1]) if x_dst is not None else int(x.shape[1]),
        )

    @classmethod
    def from_workload(cls, w):
        """The dims of a single-layer workload of ``bench/workloads.py`` (concatenated heads)."""
        if w.kind != "layer" or not w.concat:
            raise ValueError(f"workload {w.name!r}: only single layers with concat=True are modelled")
        return cls.from_graph(
            w.graph, w.x, w.heads, w.out_features, w.theta_r, edge_dim=w.edge_dim, x_dst=w.x_dst
        )


def step_footprint(kernels):
    """Bytes of the union of all arrays the step touches."""
    arrays = {}
    for k in kernels:
        for name, b in k.model.arrays().items():
            arrays[name] = max(arrays.get(name, 0), b)
    return float(sum(arrays.values()))


def gathered_tables(model):
    """Bytes of the distinct tables one pass gathers from (they share the cache)."""
    return float(sum({g.table: g.table_bytes for g in model.gathers}.values()))


def pass_key(gathers):
    """What a pass's gather probe must imitate: the row size and table size of each gathered array."""
    return ";".join(f"{g.row_bytes}B@{int(g.table_bytes)}" for g in gathers)


def bound(model, rates, in_cache=False, ideal_cache=False):
    """Lower bound of one kernel's time from its model and the machine rates (see the module docstring).

    ``in_cache``: the whole step fits in the cache, only compute counts.
    Otherwise streams move at the measured bandwidths and the gathers take
    what the probe of this pass's gathers alone took per step (a random row
    of every gathered array), times the pass's steps; without such a
    measurement, every row costs the per-row time measured for a table as
    large as the pass's tables together. ``ideal_cache``: the stricter
    variant in which an ideal cache also holds the share ``cache / tables``
    of the tables, whose gathers are then free after one compulsory read.

    Returns seconds per component, the bound, the bounding resource and the traffic.
    """
    tables = gathered_tables(model)
    resident = 0.0
    if in_cache:
        resident = 1.0
        read_b = write_b = gather_rows = gather_s = 0.0
    else:
        read_b = sum(model.reads.values())
        write_b = sum(model.writes.values())
        key = pass_key(model.gathers)
        if model.gathers and key in rates.passes:
            gather_s = sum(g.rows for g in model.gathers) / len(model.gathers) * rates.passes[key]
        else:
            gather_s = sum(g.rows * rates.row_seconds(g.row_bytes, tables) for g in model.gathers)
        if ideal_cache:
            resident = min(1.0, rates.cache_bytes / tables) if tables > 0 else 1.0
            # compulsory read of the resident part of each table: once per row, at most what the pass touches
            read_b += sum(min(g.rows * g.row_bytes, g.table_bytes) * resident for g in model.gathers)
            gather_s *= 1.0 - resident
        gather_rows = sum(g.rows * (1.0 - resident) for g in model.gathers)
    stream_s = read_b / rates.read_bps + write_b / rates.write_bps
    compute_s = model.flops / (rates.flops_blas if model.blas else rates.flops_numba)
    memory_s = stream_s + gather_s
    bound_s = max(memory_s, compute_s)
    if bound_s == 0:
        by = "none (in cache, no arithmetic)"
    elif compute_s >= memory_s:
        by = "compute"
    else:
        by = "gather" if gather_s > stream_s else "stream"
    return {
        "stream_s": stream_s,
        "gather_s": gather_s,
        "compute_s": compute_s,
        "bound_s": bound_s,
        "by": by,
        "read_bytes": read_b,
        "write_bytes": write_b,
        "gather_rows": gather_rows,
        "gathered_tables": tables,
        "resident_fraction": resident,
        "flops": float(model.flops),
    }
