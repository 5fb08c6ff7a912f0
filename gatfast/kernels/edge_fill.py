"""Attributes of added self loops (PyG's ``fill_value``), and their gradient.

The graph with self loops keeps every other edge of a row in order and ends
row ``i`` with its loop at ``loop_slots[i]``, so the edges a loop's
attribute is computed from are the contiguous slots
``indptr[i] .. loop_slots[i] - 1``. Modes, per attribute dimension, as
``torch_geometric.utils.add_self_loops``:

* ``FILL_MEAN``: the mean of the row's attributes (0 for a row without edges);
* ``FILL_ADD``: their sum (0 without edges);
* ``FILL_MAX`` / ``FILL_MIN``: the extreme value (0 without edges); the
  gradient is shared equally by the edges that attain it, as the backward
  of torch's ``scatter_reduce`` (which PyG uses) does. That backward also
  counts the zero the output starts from as one more tie when the extreme
  is exactly 0 (even with ``include_self=False``), so then each tied edge
  gets ``g / (ties + 1)``; this is matched, to give PyG's gradients;
* ``FILL_MUL``: their product (1 without edges); the gradient of edge ``k``
  is the product of the others, formed without division (zeros are legal);
* ``FILL_CONST``: the given vector; nothing flows back.

Linear in the number of edges; serial (it is small next to the attention
kernels) and deterministic.
"""

import numpy as np
from numba import njit

FILL_MEAN, FILL_ADD, FILL_MAX, FILL_MIN, FILL_MUL, FILL_CONST = range(6)
FILL_MODES = {"mean": FILL_MEAN, "add": FILL_ADD, "max": FILL_MAX, "min": FILL_MIN, "mul": FILL_MUL}


@njit(cache=True)
def fill_loop_attr(indptr, loop_slots, mode, const, u):
    """Write the loop attributes ``u[loop_slots[i]]`` from the other slots of row ``i`` (in place)."""
    dims = u.shape[1]
    zero = u.dtype.type(0.0)
    one = u.dtype.type(1.0)
    for i in range(loop_slots.size):
        start = indptr[i]
        end = loop_slots[i]
        slot = loop_slots[i]
        for d in range(dims):
            if mode == FILL_CONST:
                u[slot, d] = const[d]
                continue
            if mode == FILL_MUL:
                value = one
                for e in range(start, end):
                    value *= u[e, d]
            elif start == end:
                value = zero
            elif mode == FILL_MAX or mode == FILL_MIN:
                value = u[start, d]
                for e in range(start + 1, end):
                    if (mode == FILL_MAX and u[e, d] > value) or (mode == FILL_MIN and u[e, d] < value):
                        value = u[e, d]
            else:
                value = zero
                for e in range(start, end):
                    value += u[e, d]
                if mode == FILL_MEAN:
                    value = value / (end - start)
            u[slot, d] = value


@njit(cache=True)
def fill_loop_attr_backward(indptr, loop_slots, mode, u, grad):
    """Add each loop's attribute gradient ``grad[loop_slots[i]]`` to the slots it was computed from (in place)."""
    dims = u.shape[1]
    one = u.dtype.type(1.0)
    if mode == FILL_CONST:
        return
    for i in range(loop_slots.size):
        start = indptr[i]
        end = loop_slots[i]
        if start == end:
            continue
        for d in range(dims):
            g = grad[end, d]
            if mode == FILL_ADD:
                for e in range(start, end):
                    grad[e, d] += g
            elif mode == FILL_MEAN:
                share = g / (end - start)
                for e in range(start, end):
                    grad[e, d] += share
            elif mode == FILL_MAX or mode == FILL_MIN:
                value = u[end, d]
                ties = 1 if value == 0 else 0  # torch's phantom tie with its zero start (see above)
                for e in range(start, end):
                    if u[e, d] == value:
                        ties += 1
                share = g / ties
                for e in range(start, end):
                    if u[e, d] == value:
                        grad[e, d] += share
            else:  # FILL_MUL: d(Π u)/du_k = Π_{l != k} u_l, from prefix and suffix products
                others = np.empty(end - start, dtype=u.dtype)
                prefix = one
                for e in range(start, end):
                    others[e - start] = prefix
                    prefix *= u[e, d]
                suffix = one
                for e in range(end - 1, start - 1, -1):
                    others[e - start] *= suffix
                    suffix *= u[e, d]
                for e in range(start, end):
                    grad[e, d] += g * others[e - start]
