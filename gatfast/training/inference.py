"""Node outputs of a model trained on sampled blocks: layer by layer, in chunks of nodes.

Evaluating a model trained with neighbour sampling on the whole graph at
once would hold every layer's activations for every edge of the graph;
here each layer runs over chunks of target nodes, each chunk with its full
in-neighbourhood as one block (or a sampled one, with ``eval_fanout``), so
memory is bounded by the chunk size and one layer's node outputs.
"""

from __future__ import annotations

import numpy as np

from .._random import RandomKeys
from ..models import activation_forward
from ..sampling import sample_blocks

__all__ = ["EVAL_CHUNK", "layerwise_output", "node_outputs"]

#: Target nodes per block of layer-wise inference.
EVAL_CHUNK = 8192
_EVAL = 99  # a key space of its own for eval_fanout's samples


def layerwise_output(model, ds, eval_fanout=None, seed=0, chunk=EVAL_CHUNK):
    """The model's evaluation-mode output for every node of ``ds``, one layer at a time.

    Parameters
    ----------
    model : GATv2Network
        A node-level network (no readout).
    ds : NodeDataset
    eval_fanout : sequence of int, optional
        Sample this many in-edges per node and layer; default all of them.
    seed : int
        Key of ``eval_fanout``'s samples (the same every evaluation).
    chunk : int
        Target nodes per block.

    Returns
    -------
    ndarray, shape (num_nodes, out_features)
    """
    n = ds.graph.num_nodes
    fanouts = list(eval_fanout) if eval_fanout is not None else [-1] * model.num_layers
    h = ds.x
    for l, layer in enumerate(model.layers):
        out, keys = None, RandomKeys(seed, _EVAL, l)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            block = sample_blocks(ds.graph, np.arange(start, stop), [fanouts[l]], keys).blocks[0]
            attr = None if ds.edge_attr is None else np.ascontiguousarray(ds.edge_attr[block.edge_ids])
            part, _ = layer.forward(block.graph, h[block.src_ids], attr)
            if out is None:
                out = np.empty((n, part.shape[1]), part.dtype)
            # the activation per chunk: one (n, width) array per layer, not two
            out[start:stop] = activation_forward(model.activation, part) if model.has_activation(l) else part
        h = out
    return h


def node_outputs(model, ds, config=None):
    """A node dataset's outputs: on the whole graph, or layer-wise for sampled training (``config.fanout``)."""
    if config is None or config.fanout is None:
        return model.output(ds.graph, ds.x, edge_attr=ds.edge_attr)
    return layerwise_output(model, ds, config.eval_fanout, config.seed)
