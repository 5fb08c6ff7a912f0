"""Attention-dropout multipliers keyed by global edge ids (see :mod:`gatfast._random`)."""

from __future__ import annotations

import numpy as np

from .. import _runtime
from .._random import LOOPS
from ..kernels.random import keep_threshold, keyed_keep_rows

__all__ = ["attention_keep"]

_DIRECT = np.zeros(0, dtype=np.int64)  # keyed_keep_rows: draw row r goes to row r


def attention_keep(keys, inputs, p, out, loops_removed):
    """Write the attention-dropout multipliers ``(draw >= p) / (1 - p)`` into ``out`` (E_att, heads).

    The draw of an edge of the given graph is keyed by its id
    (``keys.edge_ids``, default its position), that of a self loop the
    layer adds by its target's id (``keys.dst_ids``) in a key space of its
    own: the multipliers of ``(keys.uniform(ids, heads) >= p)``, placed in
    the attention graph's order, computed without the float64 draws.
    ``loops_removed``: the layer attends without self loops (root weights);
    otherwise an attention graph other than ``inputs.graph`` has them added.
    (The layer's settings decide, never the edge counts: a graph with a
    loop on every node has as many edges as with its loops replaced.)
    """
    graph, attention = inputs.graph, inputs.attention
    edge_ids = np.arange(graph.nnz, dtype=np.int64) if keys.edge_ids is None else np.asarray(keys.edge_ids)
    dst_ids = np.arange(graph.num_dst, dtype=np.int64) if keys.dst_ids is None else np.asarray(keys.dst_ids)
    if edge_ids.shape != (graph.nnz,) or dst_ids.shape != (graph.num_dst,):
        raise ValueError(f"the keys' edge_ids and dst_ids must have shapes ({graph.nnz},) and ({graph.num_dst},), "
                         f"got {edge_ids.shape} and {dst_ids.shape}")
    threshold, scale = keep_threshold(p), out.dtype.type(1.0 / (1.0 - p))

    def fill(k, ids, slots):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        # ~8 operations a draw: rows on threads when that is worth it
        args = (np.uint64(k.key), ids, slots, threshold, scale, out)
        _runtime.run_rows(keyed_keep_rows, ids.size, args, ids.size * out.shape[1] * 8)

    if attention is graph:
        fill(keys, edge_ids, _DIRECT)
    elif loops_removed:
        fill(keys, edge_ids[graph.indices != graph.targets()], _DIRECT)
    else:
        layout = graph.loop_layout()
        fill(keys, edge_ids[layout.kept], attention.loop_layout().kept)
        fill(keys.child(LOOPS), dst_ids[: layout.loop_slots.size], layout.loop_slots)
    return out
