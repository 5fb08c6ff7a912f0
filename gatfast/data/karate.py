"""Zachary's karate club, embedded (no file needed)."""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..graph import CSRGraph
from .datasets import NodeDataset, normalized

__all__ = ["load_karate", "symmetric_edge_index"]


# Zachary's karate club (W. W. Zachary, J. Anthropol. Res. 33(4):452-473, 1977):
# the 78 friendships, 0-based, as in networkx.karate_club_graph() and PyG's KarateClub.
KARATE_EDGES = (
    (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (0, 8), (0, 10), (0, 11),
    (0, 12), (0, 13), (0, 17), (0, 19), (0, 21), (0, 31), (1, 2), (1, 3), (1, 7), (1, 13),
    (1, 17), (1, 19), (1, 21), (1, 30), (2, 3), (2, 7), (2, 8), (2, 9), (2, 13), (2, 27),
    (2, 28), (2, 32), (3, 7), (3, 12), (3, 13), (4, 6), (4, 10), (5, 6), (5, 10), (5, 16),
    (6, 16), (8, 30), (8, 32), (8, 33), (9, 33), (13, 33), (14, 32), (14, 33), (15, 32), (15, 33),
    (18, 32), (18, 33), (19, 33), (20, 32), (20, 33), (22, 32), (22, 33), (23, 25), (23, 27), (23, 29),
    (23, 32), (23, 33), (24, 25), (24, 27), (24, 31), (25, 31), (26, 29), (26, 33), (27, 33), (28, 31),
    (28, 33), (29, 32), (29, 33), (30, 32), (30, 33), (31, 32), (31, 33), (32, 33),
)  # fmt: skip
# Faction after the split (networkx's "club" attribute): 0 = "Mr. Hi", 1 = "Officer".
KARATE_CLUB = (
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0,
    0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
)  # fmt: skip


def symmetric_edge_index(pairs, num_nodes):
    """Both directions of undirected ``pairs``, coalesced (sorted by (src, dst))."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    ei = np.concatenate([pairs.T, pairs[:, ::-1].T], axis=1)
    keys = np.unique(ei[0] * num_nodes + ei[1])
    return np.stack([keys // num_nodes, keys % num_nodes])


def load_karate(dtype=np.float32, normalize_features=False):
    """Load Zachary's karate club: 34 members, 78 friendships, two factions.

    Features are the identity (one-hot node ids, as PyG's ``KarateClub``);
    labels are the two factions after the club split (``"club"`` in
    networkx: 0 = Mr. Hi, 1 = Officer; 17 members each). It is a
    smoke-test dataset: all three masks cover every node, so a demo trains
    and reports on all of them.

    Parameters
    ----------
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the features.
    normalize_features : bool, default False
        Accepted for a uniform interface; identity rows already sum to one.

    Returns
    -------
    NodeDataset
        ``graph`` has 156 directed edges (both directions of each friendship).
    """
    dtype = V.check_dtype(dtype)
    n = len(KARATE_CLUB)
    graph = CSRGraph.from_edge_index(symmetric_edge_index(KARATE_EDGES, n), n)
    everything = np.ones(n, dtype=bool)
    ds = NodeDataset(
        name="karate",
        graph=graph,
        x=np.eye(n, dtype=dtype),
        y=np.array(KARATE_CLUB, dtype=np.int64),
        train_mask=everything.copy(),
        val_mask=everything.copy(),
        test_mask=everything.copy(),
        num_classes=2,
        task="node_classification",
        preprocessing={"normalize_features": False},
    )
    return normalized(ds) if normalize_features else ds
