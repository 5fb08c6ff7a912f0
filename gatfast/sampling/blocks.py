"""Sampled computation graphs: one bipartite block per layer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _runtime
from .. import _validate as V
from .._random import SAMPLE, GraphIds
from ..graph import CSRGraph
from ..kernels.sampling import gather_rows, pick_counts, pick_rows, relabel_into, relabel_table, sample_hop

# what picking one target's in-edges costs, in units of _runtime.SERIAL_WORK (~1 ns each, measured:
# 100-170 ns a target at fanout 10 on a 2M-node graph), so that a batch's first hop stays serial
PICK_WORK_PER_TARGET = 100

# relabelling an edge costs about this fraction of picking it (AMD EPYC, 2M-node graph: 8-10 ns
# against 15-22 ns; the pick's row reads miss the cache, the relabel's hash table does not)
RELABEL_PER_PICK = 0.45

__all__ = ["Block", "SampledBatch", "check_fanouts", "check_seeds", "keyed_permutation", "sample_blocks"]


@dataclass(frozen=True)
class Block:
    """One layer's sampled bipartite graph.

    Attributes
    ----------
    graph : CSRGraph
        ``num_dst x num_src``, CSR by target, local ids; the targets are the
        first ``num_dst`` sources (so a layer's self loop pairs a node with
        itself).
    src_ids : ndarray of int64, shape (num_src,)
        Global ids of the sources (targets first).
    edge_ids : ndarray of int64, shape (graph.nnz,)
        Global ids of the edges: their positions in the full graph's CSR
        order (``edge_attr[edge_ids]`` are their attributes).
    """

    graph: CSRGraph
    src_ids: np.ndarray
    edge_ids: np.ndarray

    @property
    def dst_ids(self):
        """Global ids of the targets."""
        return self.src_ids[: self.graph.num_dst]


@dataclass(frozen=True)
class SampledBatch:
    """The blocks of one mini-batch, input layer first, and what they need from the dataset.

    Attributes
    ----------
    seeds : ndarray of int64
        The batch's nodes: the last block's targets, in order.
    blocks : list of Block
        ``blocks[l]`` feeds layer ``l``; ``blocks[l].dst_ids`` equal
        ``blocks[l + 1].src_ids``.
    """

    seeds: np.ndarray
    blocks: list

    @property
    def graphs(self):
        """The blocks' graphs, for ``GATv2Network.forward``."""
        return [b.graph for b in self.blocks]

    @property
    def input_ids(self):
        """Global ids of the rows the first layer reads (``x[input_ids]``)."""
        return self.blocks[0].src_ids

    def input_features(self, x):
        """Take the rows the first layer reads from the full graph's features.

        Parameters
        ----------
        x : ndarray or scipy.sparse matrix, shape (num_nodes, F)
            The full graph's node features.

        Returns
        -------
        ndarray or scipy.sparse matrix
            ``x[input_ids]``: a new array (gathered by row chunks in parallel
            for a dense ``x``; random rows of a big ``x`` are latency-bound).
        """
        ids = self.input_ids
        if not (isinstance(x, np.ndarray) and x.ndim == 2 and x.flags.c_contiguous):
            return x[ids]
        out = np.empty((ids.size, x.shape[1]), x.dtype)
        _runtime.run_rows(gather_rows, ids.size, (x, ids, out), ids.size * max(x.shape[1], 64))
        return out

    def ids(self):
        """Return the global ids of the batch's rows and edges, for keyed dropout.

        Returns
        -------
        GraphIds
            Each block's ``src_ids`` and ``edge_ids``.
        """
        return GraphIds([b.src_ids for b in self.blocks], [b.edge_ids for b in self.blocks])

    def edge_attrs(self, edge_attr):
        """Take each block's edge attributes from the full graph's.

        Parameters
        ----------
        edge_attr : ndarray, shape (nnz, D)
            The full graph's edge attributes, in its CSR order.

        Returns
        -------
        list of ndarray
            One contiguous array per block, in the block's CSR order.
        """
        return [np.ascontiguousarray(edge_attr[b.edge_ids]) for b in self.blocks]

    @property
    def num_sampled_edges(self):
        """Edges over all blocks."""
        return sum(b.graph.nnz for b in self.blocks)


def check_fanouts(fanouts, name="fanouts"):
    """Check fanouts: a non-empty sequence of ints, each >= 1 or -1 (every neighbour).

    Parameters
    ----------
    fanouts : sequence of int
        One fanout per layer.
    name : str, default "fanouts"
        The name used in error messages.

    Returns
    -------
    tuple of int
        The fanouts.

    Raises
    ------
    TypeError, ValueError
        Naming ``name``, when a fanout is not an int or out of range.
    """
    if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__") or len(fanouts) == 0:
        raise TypeError(f"{name} must be a non-empty sequence of ints (one per layer), got {fanouts!r}")
    out = []
    for k, f in enumerate(fanouts):
        f = V.check_int(f, f"{name}[{k}]", -1)
        if f == 0:
            raise ValueError(f"{name}[{k}] must be >= 1 (or -1 for every neighbour), got 0")
        out.append(f)
    return tuple(out)


def sample_blocks(graph, seeds, fanouts, keys, parallel=True):
    """Sample one block per layer around ``seeds``, from the output layer back to the input.

    Parameters
    ----------
    graph : CSRGraph
        The full graph (square), CSR by target.
    seeds : ndarray of int
        Distinct node ids: the targets of the last layer.
    fanouts : sequence of int
        In-edges kept per target, per layer (input layer first, as
        ``[10, 10]``); -1 keeps all. Targets with fewer in-edges keep all.
    keys : RandomKeys
        The batch's key (e.g. ``RandomKeys(seed, epoch, batch)``); layer
        ``l`` samples with ``keys.child(SAMPLE, l)``.
    parallel : bool, default True
        Pick with the helper threads (``False``: all on the calling thread,
        for callers that sample several batches at once). The blocks are
        the same either way.

    Returns
    -------
    SampledBatch
        The seeds and one block per layer, input layer first.
    """
    fanouts = check_fanouts(fanouts)
    targets = np.ascontiguousarray(seeds, dtype=np.int64)
    helpers = _runtime.helpers() if parallel else 0
    blocks = []
    for layer in range(len(fanouts) - 1, -1, -1):
        key = np.uint64(keys.child(SAMPLE, layer).key)
        warm = layer > 0
        if helpers and _hop_pieces(targets.size) >= 2:
            ptr = pick_counts(graph.indptr, targets, fanouts[layer])
            src_ids, edges, local_indices = _pick_and_relabel(graph, targets, fanouts[layer], key, ptr, warm, helpers)
        else:
            ptr, src_ids, edges, local_indices = sample_hop(
                graph.indptr, graph.indices, targets, fanouts[layer], key, warm
            )
        block = CSRGraph._from_valid(ptr, local_indices, targets.size, src_ids.size)
        blocks.append(Block(block, src_ids, edges))
        targets = src_ids
    blocks.reverse()
    return SampledBatch(np.ascontiguousarray(seeds, dtype=np.int64), blocks)


def _pick_and_relabel(graph, targets, fanout, key, ptr, warm, helpers):
    """One hop: ``(src_ids, edge_ids, local_indices)`` of the block whose targets are ``targets``.

    Picking is per target and parallel, relabelling sequential (first-use
    order), and relabelling overlaps picking: the calling thread picks a
    first part, small enough that it has relabelled it by the time the
    helper threads have picked the rest (:func:`_pick_cuts`), and then
    relabels theirs. ``warm`` is passed on to
    :func:`~gatfast.kernels.sampling.pick_rows`; ``helpers`` is how many
    other threads may pick.
    """
    n, total = targets.size, int(ptr[-1])
    table = relabel_table(n + total)
    cuts = _pick_cuts(ptr, helpers, _hop_pieces(n))
    edges = np.empty(total, dtype=np.int64)
    sources = np.empty(total, dtype=np.int64)
    src_ids = np.empty(n + total, dtype=np.int64)
    local_indices = np.empty(total, dtype=np.int64)
    args = (graph.indptr, graph.indices, targets, fanout, key, ptr, edges, sources, warm)
    pending = [_runtime.submit(pick_rows, a, b, *args) for a, b in zip(cuts[1:-1], cuts[2:])]
    try:
        pick_rows(cuts[0], cuts[1], *args)
        n_src = relabel_into(table, targets, src_ids, 0, local_indices[:0])
        for k in range(len(cuts) - 1):
            if k:
                pending[k - 1].result()
            lo, hi = ptr[cuts[k]], ptr[cuts[k + 1]]
            n_src = relabel_into(table, sources[lo:hi], src_ids, n_src, local_indices[lo:hi])
    finally:
        for future in pending:  # never return while a thread still writes into these arrays
            future.result()
    return src_ids[:n_src].copy(), edges, local_indices


def _hop_pieces(targets):
    """A hop's picking work in units of :data:`gatfast._runtime.SERIAL_WORK`: the most parts it
    is worth splitting into (below two it stays on the calling thread)."""
    return targets * PICK_WORK_PER_TARGET // max(_runtime.SERIAL_WORK, 1)


def _pick_cuts(ptr, helpers, pieces):
    """Where the parts of a hop's picking start and end, as target positions: the calling
    thread's part first, then one part per helper thread, by edge counts.

    The caller's share ``f`` of the edges is picked and relabelled while the
    helpers pick theirs: ``f (1 + RELABEL_PER_PICK) = (1 - f) / helpers``.
    One part per helper, not a stream of small ones: handing a task to a
    thread costs 15-20 us on a virtual machine (a wake-up), as much as
    picking 1,000 edges. ``pieces`` is the hop's work in serial units
    (:data:`gatfast._runtime.SERIAL_WORK`): at most one part per unit, so
    work below two units stays on the calling thread.
    """
    n, total = ptr.size - 1, int(ptr[-1])
    helpers = min(helpers, pieces - 1)
    if helpers <= 0 or total == 0:
        return [0, n]
    own = 1.0 / (1.0 + helpers * (1.0 + RELABEL_PER_PICK))
    bounds = [int(total * (own + (1.0 - own) * h / helpers)) for h in range(helpers)]
    return [0, *np.searchsorted(ptr, bounds).tolist(), n]


def check_seeds(seeds, num_nodes, name="seeds"):
    """Node ids (or a boolean mask) as distinct int64 ids, or raise naming ``name``."""
    arr = np.asarray(seeds)
    if arr.dtype == bool:
        if arr.shape != (num_nodes,):
            raise ValueError(f"{name} as a mask must have shape ({num_nodes},), got {arr.shape}")
        return np.flatnonzero(arr).astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 1:
        raise TypeError(f"{name} must be a 1-D array of node ids or a boolean mask, got {arr.dtype} {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
        raise ValueError(f"{name} must be node ids in [0, {num_nodes}), got values in [{arr.min()}, {arr.max()}]")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must be distinct node ids")
    return arr.astype(np.int64)


def keyed_permutation(ids, keys):
    """``ids`` in an order that depends only on ``keys`` and the ids (sorting keyed draws)."""
    draws = keys.uniform(ids, 1)[:, 0]
    order = np.argsort(draws)  # 3x faster than the lexsort below, which only ties need
    ranked = draws[order]
    if not (ranked[1:] != ranked[:-1]).all():  # equal draws (about 1e-4 for a million ids): by id
        order = np.lexsort((ids, draws))
    return ids[order]

