"""Scratch arrays a layer keeps between calls, and the structures it derives from its inputs."""

from __future__ import annotations

import copy
import sys
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..kernels import readonly
from ..kernels.sparse import gather_if_same

__all__ = ["Workspace"]


class _KeptTranspose(NamedTuple):
    """What :meth:`Workspace.transposed` keeps of one sparse input."""

    shape: tuple  # of the input
    indptr: np.ndarray  # copies of the input's, to compare the next input with (read-only)
    indices: np.ndarray
    positions: np.ndarray  # the index in the input's ``data`` of each of the transpose's values (read-only)
    template: sp.csr_array  # the transpose; each call returns a shallow copy with its own values


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class Workspace:
    """Big arrays kept between calls, so a training loop does not pay for
    fresh memory (page faults and zeroing) at every step.

    An array is handed out again only when nothing outside the workspace
    refers to it any more (its CPython reference count: no caller still holds
    it, a view of it or a cache containing it), so results already returned
    are never overwritten. Two arrays per key, because a training loop still
    holds the previous step's cache and output while the next forward runs.
    Also kept: the target order of the last graph's edges
    (:meth:`source_targets`) and, per sparse input, the structure of its
    transpose (:meth:`transposed`), about three times the input's index
    arrays. :meth:`clear` (``GATv2Layer.clear_workspace``) drops it all.
    Not meant for concurrent calls on one layer from several Python threads.
    """

    SLOTS = 2
    SMALL = 1 << 16  # bytes: below this a fresh array is cheaper than the bookkeeping

    def __init__(self):
        self._arrays = {}
        self._source_targets = None
        self._transposes = {}

    def empty(self, key, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype``, reused when free."""
        if not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)
        if dtype.itemsize * _size(shape) < self.SMALL:
            return np.empty(shape, dtype)
        shape = tuple(int(s) for s in shape)
        slots = self._arrays.setdefault(key, [])
        for arr in slots:
            # references: the list, the loop variable and getrefcount's argument
            if sys.getrefcount(arr) == 3 and arr.shape == shape and arr.dtype == dtype:
                return arr
        arr = np.empty(shape, dtype)
        if len(slots) >= self.SLOTS:
            slots.pop(0)  # the oldest; whoever still holds it keeps it alive
        slots.append(arr)
        return arr

    def source_targets(self, graph):
        """Targets of the edges in the graph's source-major order, built once per graph."""
        cached = self._source_targets
        if cached is None or cached[0] is not graph:
            _, src_edges = graph.source_order()
            targets = graph.targets()[src_edges]
            targets.flags.writeable = False
            self._source_targets = cached = (graph, targets)
        return cached[1]

    def transposed(self, x, key):
        """``x.T`` in CSR for the CSR matrix ``x``, its structure kept under ``key`` and reused while the
        structure is the same; the values are gathered from ``x`` at every call.

        The weight gradients of a layer on sparse features need the transpose
        at every step, and the features' structure rarely changes: Cora's bag
        of words, or the same words after feature dropout (new values, the
        same positions). On Cora (49,216 nonzeros, 2-vCPU AMD EPYC)
        ``x.T.tocsr()`` took 0.25-0.34 ms of a 7 ms step, up to 1 ms with the
        system allocator. The kept structure first took 0.19 ms a call (two
        ``numpy.array_equal`` of the index arrays, a fancy index for the
        values and scipy's constructor, Intel Xeon, one thread); one kernel
        that compares and gathers (``kernels.sparse.gather_if_same``) and a
        shallow copy of a kept matrix take about a fifth of that.
        Kept: copies of ``indptr`` and ``indices`` to compare the next
        ``x`` with, the transpose (its structure), and the position in
        ``x.data`` of each of its values; ``x.T.tocsr()`` moves values by
        position alone, so gathering ``x.data`` there gives its bits. An
        ``x`` changed in place or new is compared by its arrays, never by
        identity. Each call returns a new matrix with new values, sharing
        the kept structure arrays: a caller must not change its structure
        in place (``sum_duplicates``, ``eliminate_zeros``); the layers only
        read it.
        """
        if x.format != "csr":  # the layers pass CSR (check_features); anything else is read as one
            x = x.tocsr()
        kept = self._transposes.get(key)
        data = np.empty(x.indices.size, x.data.dtype)
        if kept is None or not _gather_if_same(kept, x, data):
            positions = sp.csr_array(
                (np.arange(x.indices.size), x.indices, x.indptr), shape=x.shape
            ).T.tocsr()
            # t_indptr and t_indices stay writable: the product kernels take them, and read-only arrays
            # would be another specialisation to compile; only those kernels, which read them, get them
            template = sp.csr_array(
                (_zeros(x.indices.size, x.data.dtype), positions.indices, positions.indptr),
                shape=x.shape[::-1],
                copy=False,
            )
            kept = _KeptTranspose(
                x.shape, _frozen(x.indptr), _frozen(x.indices), _frozen(positions.data), template
            )
            self._transposes[key] = kept
            # the structure just kept, so this fails only if x changed while it was being built
            if not _gather_if_same(kept, x, data):
                raise RuntimeError("the sparse features changed while their transpose was being built")
        # a shallow copy shares the kept structure and holds these values: what the constructor makes,
        # without its checks of the structure (20 us a call)
        t = copy.copy(kept.template)
        t.data = data
        return t

    def clear(self):
        """Drop every kept array."""
        self._arrays.clear()
        self._source_targets = None
        self._transposes.clear()


def _frozen(arr):
    arr = arr.copy()
    arr.flags.writeable = False
    return arr


def _zeros(n, dtype):
    """``n`` zeros of ``dtype`` in the memory of one (a read-only broadcast): a kept template's values,
    never read (each copy gets its own)."""
    return np.broadcast_to(np.zeros(1, dtype), (n,))


def _gather_if_same(kept, x, out):
    """Whether the CSR matrix ``x`` has the shape, ``indptr`` and ``indices`` (dtypes too) of ``kept``;
    where it does, ``out`` gets its values in the kept transpose's order."""
    if x.shape != kept.shape or x.indptr.dtype != kept.indptr.dtype or x.indices.dtype != kept.indices.dtype:
        return False
    # read-only views: one compiled kernel, whatever the flags of x's arrays
    ptr, idx, data = readonly(x.indptr), readonly(x.indices), readonly(x.data)
    return gather_if_same(kept.indptr, ptr, kept.indices, idx, kept.positions, data, out)
