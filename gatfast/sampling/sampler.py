"""Shuffled mini-batches of sampled blocks, one epoch at a time."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

from .. import _runtime
from .. import _validate as V
from .._random import SHUFFLE, RandomKeys
from ..graph import CSRGraph
from .blocks import check_fanouts, check_seeds, keyed_permutation, sample_blocks

__all__ = ["NeighborSampler"]

# batches sampled at once by the epoch iterator, at most: they run beside the caller's own threads,
# and each holds its blocks until the caller takes it
MAX_AHEAD = 4


class NeighborSampler:
    """Iterate over shuffled mini-batches of seed nodes, each with its sampled blocks.

    Parameters
    ----------
    graph : CSRGraph
        The full graph (square), CSR by target.
    fanouts : sequence of int
        In-edges kept per node, per layer, input layer first (``[10, 10]``);
        -1 keeps every neighbour.
    seeds : ndarray of int or bool
        The nodes to iterate over (ids or a mask), e.g. the training nodes.
    batch_size : int
        Seed nodes per mini-batch (the last one may be smaller).
    seed : int, default 0
        With the epoch and the batch number, the key of every random choice.
    shuffle : bool, default True
        Shuffle the seeds every epoch (keyed by the seed and the epoch).
    prefetch : bool, default True
        When iterating over :meth:`epoch`, sample the next batches on
        background threads while the caller works on the current one (the
        kernels release the GIL): as many batches at once as the iterating
        thread has Numba threads, at most 4, each batch on one thread. The batches are
        the same either way.

    Notes
    -----
    Everything is keyed, not drawn in call order: the order of epoch ``e``
    depends on ``(seed, e)``, the blocks of its batch ``b`` on
    ``(seed, e, b)`` and each node's picks on its id, so any process that
    asks for batch ``b`` of epoch ``e`` gets the same blocks.

    Examples
    --------
    >>> import numpy as np, gatfast
    >>> g = gatfast.CSRGraph.from_edge_index(np.array([[1, 2, 3, 0], [0, 0, 1, 2]]), 4)
    >>> sampler = NeighborSampler(g, [2, 2], seeds=np.arange(4), batch_size=2, prefetch=False)
    >>> [b.seeds.size for b in sampler.epoch(0)]
    [2, 2]
    """

    def __init__(self, graph, fanouts, seeds, batch_size, seed=0, shuffle=True, prefetch=True):
        if not isinstance(graph, CSRGraph):
            raise TypeError(f"graph must be a gatfast.CSRGraph, got {type(graph).__name__}")
        if graph.is_bipartite():
            raise ValueError(f"graph must be square to sample from, got shape {graph.shape}")
        self.graph = graph
        self.fanouts = check_fanouts(fanouts)
        self.seeds = check_seeds(seeds, graph.num_nodes)
        if self.seeds.size == 0:
            raise ValueError("seeds must hold at least one node")
        self.batch_size = V.check_int(batch_size, "batch_size", 1)
        self.seed = V.check_int(seed, "seed", 0)
        self.shuffle = bool(shuffle)
        self.prefetch = bool(prefetch)

    def __len__(self):
        """Batches per epoch."""
        return -(-self.seeds.size // self.batch_size)

    def epoch_order(self, epoch):
        """Return the seeds in the order of an epoch.

        Parameters
        ----------
        epoch : int
            The epoch; with the sampler's seed it keys the shuffle.

        Returns
        -------
        ndarray of int64
            The seeds, shuffled unless ``shuffle`` is False.
        """
        if not self.shuffle:
            return self.seeds
        return keyed_permutation(self.seeds, RandomKeys(self.seed, SHUFFLE, epoch))

    def batch(self, epoch, index, order=None):
        """Sample batch ``index`` of an epoch (the same in any process).

        Parameters
        ----------
        epoch : int
            The epoch.
        index : int
            The batch number, ``0 <= index < len(self)``.
        order : ndarray of int64, optional
            :meth:`epoch_order` of ``epoch``, if already computed.

        Returns
        -------
        SampledBatch
            The batch's seeds and blocks.
        """
        if order is None:
            order = self.epoch_order(epoch)
        return self._sample(epoch, index, order, True)

    def epoch(self, epoch):
        """Iterate over the batches of an epoch, in order.

        Parameters
        ----------
        epoch : int
            The epoch, >= 0.

        Yields
        ------
        SampledBatch
            Each batch of the epoch, as :meth:`batch` returns it.
        """
        epoch = V.check_int(epoch, "epoch", 0)
        order = self.epoch_order(epoch)
        batches = len(self)
        if not self.prefetch or batches == 1:
            for b in range(batches):
                yield self.batch(epoch, b, order)
            return
        # whole batches on threads of their own: picking one batch on several threads hands work
        # over between them at every hop, and on a virtual machine each hand-off (a wake-up) costs
        # as much as picking a thousand edges
        ahead = min(batches, _runtime.helpers() + 1, MAX_AHEAD)
        with ThreadPoolExecutor(ahead, thread_name_prefix="gatfast-sampler") as pool:
            pending = deque(pool.submit(self._sample, epoch, b, order, False) for b in range(ahead))
            for b in range(batches):
                current = pending.popleft().result()
                if b + ahead < batches:
                    pending.append(pool.submit(self._sample, epoch, b + ahead, order, False))
                yield current

    def _sample(self, epoch, index, order, parallel):
        """Batch ``index`` of an epoch in ``order``; ``parallel`` as for :func:`sample_blocks`."""
        seeds = order[index * self.batch_size : (index + 1) * self.batch_size]
        if seeds.size == 0:
            raise IndexError(f"epoch {epoch} has {len(self)} batches, asked for batch {index}")
        return sample_blocks(self.graph, seeds, self.fanouts, RandomKeys(self.seed, epoch, index), parallel)
