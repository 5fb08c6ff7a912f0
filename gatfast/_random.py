"""Randomness keyed by what it applies to, for dropout and sampling (shared by every floor).

A :class:`RandomKeys` is a key (from a seed and a context such as epoch and
batch) that turns global ids into uniform draws: the attention-dropout mask
of an edge depends on the key and the edge's id, a feature-dropout mask row
on the key and the node's id, and nothing on call order, thread count or how
a batch was split into shards (see ``kernels/random.py``). :class:`GraphIds`
says which global ids the rows and edges of a forward pass have.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from . import _runtime
from .kernels.random import derive_key, keyed_uniform_pairs, keyed_uniform_rows

__all__ = [
    "ATTENTION",
    "FEATURES",
    "HEAD",
    "LOOPS",
    "SAMPLE",
    "SHUFFLE",
    "GraphIds",
    "RandomKeys",
]

# what a draw is for: separate key spaces, so ids of different kinds never collide
FEATURES, ATTENTION, LOOPS, HEAD, SAMPLE, SHUFFLE = range(1, 7)


def _ints(values, name):
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be ints, got {type(v).__name__}")
        out.append(int(v))
    return np.array(out, dtype=np.int64)


class RandomKeys:
    """A key that turns global ids into uniform draws in ``[0, 1)``.

    Parameters
    ----------
    seed : int
        Main key material; with ``context`` it determines every draw.
    *context : int
        Further key material (e.g. epoch and batch number).
    edge_ids, dst_ids : ndarray of int64, optional
        The global ids of a graph's edges (CSR order) and target nodes, for
        a layer's attention dropout (default: positions ``[0, n)``).

    Examples
    --------
    >>> keys = RandomKeys(0, 3, 1)          # seed 0, epoch 3, batch 1
    >>> a = keys.child(7).uniform(np.array([10, 11]), 2)
    >>> b = keys.child(7).uniform(np.array([11]), 2)
    >>> bool((a[1] == b[0]).all())           # node 11 gets the same draws in any batch
    True
    """

    __slots__ = ("key", "edge_ids", "dst_ids")

    def __init__(self, seed, *context, edge_ids=None, dst_ids=None):
        self.key = int(derive_key(np.uint64(0), _ints((seed, *context), "seed and context")))  # one specialisation
        self.edge_ids = edge_ids
        self.dst_ids = dst_ids

    @classmethod
    def _from_key(cls, key, edge_ids=None, dst_ids=None):
        keys = cls.__new__(cls)
        keys.key, keys.edge_ids, keys.dst_ids = int(key), edge_ids, dst_ids
        return keys

    def child(self, *context):
        """Derive the key of a sub-stream (e.g. ``FEATURES`` of layer 2).

        Parameters
        ----------
        *context : int
            Key material that names the sub-stream.

        Returns
        -------
        RandomKeys
            The derived key, bound to the same ``edge_ids`` and ``dst_ids``.
        """
        return RandomKeys._from_key(derive_key(np.uint64(self.key), _ints(context, "context")),
                                    self.edge_ids, self.dst_ids)

    def for_graph(self, edge_ids, dst_ids):
        """Bind the same key to a graph's global edge and target ids (for attention dropout).

        Parameters
        ----------
        edge_ids : ndarray of int64, shape (nnz,)
            Global id of every edge, in CSR order.
        dst_ids : ndarray of int64, shape (num_dst,)
            Global id of every target node.

        Returns
        -------
        RandomKeys
            A key equal to this one, with those ids bound.
        """
        return RandomKeys._from_key(self.key, edge_ids, dst_ids)

    def uniform(self, ids, width=1):
        """Draw ``width`` uniform numbers for each id.

        Parameters
        ----------
        ids : array_like of int, shape (n,)
            Global ids; the same id always gets the same draws under this key.
        width : int, default 1
            Draws per id.

        Returns
        -------
        ndarray of float64, shape (n, width)
            Uniform draws in ``[0, 1)``.
        """
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = np.empty((ids.size, int(width)), dtype=np.float64)
        # a few ns a draw (an edge's attention draws on every head of a sampled batch: ~1 ms): rows on threads
        _runtime.run_rows(keyed_uniform_rows, ids.size, (np.uint64(self.key), ids, out), out.size * 8)
        return out

    def uniform_entries(self, rows, cols):
        """Draw one uniform number per (row id, column) pair, e.g. per stored entry of a sparse matrix.

        Parameters
        ----------
        rows, cols : array_like of int, shape (n,)
            Global row ids and column indices of the entries.

        Returns
        -------
        ndarray of float64, shape (n,)
            Uniform draws in ``[0, 1)``.
        """
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        cols = np.ascontiguousarray(cols, dtype=np.int64)
        out = np.empty(rows.size, dtype=np.float64)
        keyed_uniform_pairs(np.uint64(self.key), rows, cols, out)
        return out

    def __repr__(self):
        return f"RandomKeys(key={self.key:#018x})"


@dataclass(frozen=True)
class GraphIds:
    """Global ids of what a forward pass touches, per layer.

    Attributes
    ----------
    nodes : list of ndarray
        ``nodes[l]``: the ids of layer ``l``'s input rows (its sources).
    edges : list of ndarray
        ``edges[l]``: the ids of layer ``l``'s graph's edges, in CSR order.
    graphs : ndarray or None
        The ids of the graphs of a batch (for the readout's dropout).
    """

    nodes: list
    edges: list
    graphs: np.ndarray = None

    @classmethod
    def positions(cls, graphs, num_graphs=None):
        """Build ids ``[0, n)`` for every layer's rows and edges (one whole graph, no sampling).

        Parameters
        ----------
        graphs : sequence of CSRGraph
            The graph of each layer.
        num_graphs : int, optional
            Number of graphs in the batch, for the readout's ids.

        Returns
        -------
        GraphIds
            Positions as ids.
        """
        return cls([np.arange(g.num_src, dtype=np.int64) for g in graphs],
                   [np.arange(g.nnz, dtype=np.int64) for g in graphs],
                   None if num_graphs is None else np.arange(num_graphs, dtype=np.int64))
