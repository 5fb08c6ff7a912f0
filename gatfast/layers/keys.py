"""Attention-dropout draws keyed by global edge ids (see :mod:`gatfast._random`)."""

from __future__ import annotations

import numpy as np

from .._random import LOOPS

__all__ = ["attention_draws"]


def attention_draws(keys, inputs, heads):
    """Uniform draws (E_att, heads) for the attention graph's edges, keyed by global edge ids.

    Edges of the given graph use their ids (``keys.edge_ids``, default their
    positions); the self loops the layer adds use a separate key space and
    the id of their target (``keys.dst_ids``).
    """
    graph, attention = inputs.graph, inputs.attention
    edge_ids = np.arange(graph.nnz, dtype=np.int64) if keys.edge_ids is None else np.asarray(keys.edge_ids)
    dst_ids = np.arange(graph.num_dst, dtype=np.int64) if keys.dst_ids is None else np.asarray(keys.dst_ids)
    if edge_ids.shape != (graph.nnz,) or dst_ids.shape != (graph.num_dst,):
        raise ValueError(f"the keys' edge_ids and dst_ids must have shapes ({graph.nnz},) and ({graph.num_dst},), "
                         f"got {edge_ids.shape} and {dst_ids.shape}")
    if attention is graph:
        return keys.uniform(edge_ids, heads)
    if attention.nnz <= graph.nnz:  # self loops removed, none added (root weights)
        return keys.uniform(edge_ids[graph.indices != graph.targets()], heads)
    layout = graph.loop_layout()
    draw = np.empty((attention.nnz, heads), dtype=np.float64)
    draw[attention.loop_layout().kept] = keys.uniform(edge_ids[layout.kept], heads)
    draw[layout.loop_slots] = keys.child(LOOPS).uniform(dst_ids[: layout.loop_slots.size], heads)
    return draw
