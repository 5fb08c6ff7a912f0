"""The fast path of a layer for graphs of a few nodes: one kernel call each way.

Taken when the whole layer is tiny (``dense.SMALL_PRODUCT``: a road scene of
10 vehicles is 10 x 16 x 32), by the forward pass also for a few wide rows
(:data:`FEW_ROWS`: a network's middle layer on one scene, whose projections
the kernel makes with the general path's dense tile), and when the layer is
plain: one dense feature matrix of the layer's dtype on a square graph, no
edge features, root weight, residual or active attention dropout. Everything else, and any input that needs
converting or fails a check, goes the general way (which also raises the
errors), so the fast path changes no behaviour: it gives the same bits
(``tests/test_small_path.py``) in a fraction of the time (per-call Python
was most of a scene's cost).

The two kernels take seconds to compile (they re-optimise the general
kernels they call) and save microseconds a call, so a process takes the
fast path once they are compiled or in Numba's cache, or after
:data:`COMPILE_AFTER_CALLS` small calls: a short run (the karate club's
training) never compiles them, a stream of scenes soon does.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from .. import _runtime
from ..graph import CSRGraph
from ..kernels import num_att_blocks, readonly
from ..kernels.gemm import TILE_BYTES
from ..kernels.small_layer import small_layer_backward, small_layer_forward
from .cache import LayerCache
from .dense import is_small
from .inputs import Inputs

__all__ = ["ENABLED", "backward", "forward"]

#: Switch for the tests, which compare both paths bit for bit.
ENABLED = True

#: Most rows whose forward takes the one-call kernel with the dense tile's projections (a few wide
#: rows: a network's middle layer on one scene, 10 x 64 -> 4 x 16, where the general path's Python
#: was most of the call). Up to it the general path runs its products and its attention kernel on
#: the calling thread where their work is below ``_runtime.PARALLEL_WORK`` (``run_rows``), so the one
#: call is the same work on the same thread. The one call took, as a fraction of the general
#: path's time (64 -> 4 x 16, in-degree 8, alternating rounds, 2-vCPU AMD EPYC): 0.51 at 10 rows,
#: 0.64 at 32 and 64, 0.75 at 128, 1.01 at 256 (where the general path's attention takes two threads).
FEW_ROWS = 128

_NO_TILES = {}  # dtype -> the empty tiles of a small product

#: Small calls a process makes on the general path before it compiles a one-call kernel that
#: Numba's cache does not have (any entry counts, whatever its dtype). With an empty cache the two
#: kernels take 2.0 s (forward) and 2.7 s (backward) to compile on a 2-core AMD EPYC and save about
#: 20 us a call: a process with this many small calls is a stream of scenes, which pays it back in
#: its later processes (the kernels then load from the cache in milliseconds) if not in this one.
COMPILE_AFTER_CALLS = 1000

_KERNELS = {"forward": small_layer_forward, "backward": small_layer_backward}
_decided = set()  # the ways ("forward", "backward") this process takes its one-call kernel for
_waiting = {}  # way -> small calls so far while its kernel was neither compiled nor cached
_called = set()  # (way, dtype char) whose kernel ran in this process: no compile notice needed


def _ready(way):
    """Whether this small call may take the one-call kernel of ``way``; counts the call if not.

    Unsynchronised on purpose: threads racing here can only lose a count or decide a call early,
    and both paths give the same bits.
    """
    if way in _decided:
        return True
    calls = _waiting.get(way, 0)
    if calls >= COMPILE_AFTER_CALLS or (calls == 0 and _runtime.compiled_or_cached(_KERNELS[way])):
        _decided.add(way)
        return True
    _waiting[way] = calls + 1
    return False


def _call(way, kernel, dtype, args):
    """``kernel(*args)``; its first call per dtype under the compile notice (it may compile for seconds)."""
    key = (way, dtype.char)
    if key in _called:
        return kernel(*args)
    with _runtime.compile_notice(("small_" + way, dtype.char)):
        result = kernel(*args)
    _called.add(key)
    return result


def _read_only(arr):
    arr.setflags(write=False)
    return arr


def _plain(layer):
    # shared weights are left out: their general forward projects through BLAS (other bits)
    return (
        layer.edge_dim is None
        and layer.root_weight is None
        and not layer.residual
        and not layer.share_weights
    )


def _one_call_forward(n, nnz, small_product, layer):
    """Whether a plain layer's forward on ``n`` rows and ``nnz`` attention edges takes the one-call
    kernel: a small product, or rows few enough for the general path to run them as one chunk, wide
    enough for its dense tile (whose projections the kernel then computes the same way), and
    attention work it runs on the calling thread too."""
    if small_product:
        return True
    width = layer.heads * layer.out_features
    return (
        n <= FEW_ROWS and width * layer.dtype.itemsize >= TILE_BYTES and nnz * width < _runtime.PARALLEL_WORK
    )


def _tiles(small_product, layer, W_l, b_l, W_r, b_r):
    """The kernel's ``tiles``: the transposed weights and biases as the general path gives them to the
    dense tile, or empty transposes for a small product."""
    dtype = layer.dtype
    if small_product:
        none = _NO_TILES.get(dtype)
        if none is None:
            matrix, vector = readonly(np.zeros((0, 0), dtype)), readonly(np.zeros(0, dtype))
            none = _NO_TILES[dtype] = (matrix, vector, matrix, vector)
        return none
    return (
        readonly(np.ascontiguousarray(W_l.T)),
        readonly(b_l),
        readonly(np.ascontiguousarray(W_r.T)),
        readonly(b_r),
    )


def forward(layer, graph, x, edge_attr, training, keep_cache=True):
    """``(out, cache)`` of ``layer.forward`` on the fast path, or None where it does not apply.

    ``keep_cache=False`` (``layer.output``): ``(out, None)``, without the copy of ``x`` and the
    read-only arrays a cache needs.
    """
    if not (
        ENABLED and type(graph) is CSRGraph and type(x) is np.ndarray and edge_attr is None and _plain(layer)
    ):
        return None
    if training and layer.dropout > 0.0:
        return None
    n = graph.num_dst
    if (
        graph.num_src != n
        or x.dtype != layer.dtype
        or x.shape != (n, layer.in_features)
        or not x.flags.c_contiguous
    ):
        return None
    small_product = is_small(n, x.shape[1], layer.heads * layer.out_features)
    nnz = graph.nnz + (n if layer.add_self_loops else 0)
    if not _one_call_forward(n, nnz, small_product, layer) or not _ready("forward"):
        return None
    layer.params.check_shapes()
    attention = graph.with_self_loops() if layer.add_self_loops else graph
    p = layer.params
    H, C, dtype = layer.heads, layer.out_features, layer.dtype
    k = layer.constants
    empty = k.no_bias
    W_l, b_l, W_r, b_r = p["W_l"], p.get("b_l", empty), p["W_r"], p.get("b_r", empty)
    # the cache's own copy (the caller may reuse its array before backward), else a read-only view
    # (the kernel's argument type either way: one compiled kernel)
    x = _read_only(x.copy()) if keep_cache else readonly(x)
    tiles = _tiles(small_product, layer, W_l, b_l, W_r, b_r)
    xl = np.empty((n, H, C), dtype)
    xr = np.empty((n, H, C), dtype)
    alpha = np.empty((attention.nnz, H), dtype)
    per_head = np.empty((n, H, C), dtype)
    out = per_head.reshape(n, H * C) if layer.concat else np.empty((n, C), dtype)
    finite = _call(
        "forward",
        small_layer_forward,
        dtype,
        (
            x,
            W_l,
            b_l,
            W_r,
            b_r,
            tiles,
            attention.indptr,
            attention.indices,
            p["att"],
            k.slope,
            k.kind,
            k.no_dropout,
            p.get("bias", empty),
            xl,
            xr,
            alpha,
            per_head,
            out,
        ),
    )
    if not finite:
        return None  # the general path names the cause (x, a parameter, or an overflow)
    if not keep_cache:
        return out, None
    inputs = Inputs(graph, attention, x, x, "same", k.no_edges, ())
    cache = LayerCache(
        attention,
        inputs,
        _read_only(xl),
        _read_only(xr),
        _read_only(alpha),
        k.no_dropout,
        MappingProxyType(dict(p)),
        layer._token,
    )
    return out, cache


def backward(layer, cache, grad_out, pairwise):
    """The gradients of ``layer.backward`` on the fast path, or None where it does not apply.

    ``cache`` is already checked; ``grad_out`` is taken only as a finite,
    C-contiguous array of the layer's dtype and shape (the kernel checks
    finiteness as it reads it), anything else goes the general way, which
    converts it or names the error. Applies to caches of the fast forward
    and to those of the general one with the same conditions. The dict is
    in ``layer.backward``'s order: the parameters', then ``"x"``.
    """
    inputs = cache.inputs
    x = inputs.x_src
    if not (ENABLED and inputs.relation == "same" and type(x) is np.ndarray and type(grad_out) is np.ndarray):
        return None
    n = x.shape[0]
    H, C, dtype = layer.heads, layer.out_features, layer.dtype
    g = cache.graph
    if (
        not _plain(layer)
        or grad_out.dtype != dtype
        or grad_out.shape != (n, layer.out_dim)
        or not grad_out.flags.c_contiguous
        or g.num_dst != n
        or not is_small(n, x.shape[1], H * C)
        or not _ready("backward")
    ):
        return None
    p = cache.params
    k = layer.constants
    W_l, W_r = p["W_l"], p["W_r"]
    width = H * C if layer.bias else 0
    grads = {
        "W_l": np.empty(W_l.shape, dtype),
        "b_l": np.empty(width, dtype),
        "W_r": np.empty(W_r.shape, dtype),
        "b_r": np.empty(width, dtype),
        "att": np.empty((H, C), dtype),
        "bias": np.empty(grad_out.shape[1] if layer.bias else 0, dtype),
        "x": np.empty(x.shape, dtype),
    }
    finite = _call(
        "backward",
        small_layer_backward,
        dtype,
        (
            readonly(x),  # a general forward's cache may hold the caller's writable array
            W_l,
            W_r,
            g.indptr,
            g.indices,
            cache.xl,
            cache.xr,
            p["att"],
            k.slope,
            k.kind,
            k.no_edges,
            k.no_edge_weights,
            cache.edge_scale,
            cache.alpha,
            readonly(grad_out),
            pairwise,
            num_att_blocks(n),
            grads["att"],
            grads["bias"],
            grads["W_l"],
            grads["b_l"],
            grads["W_r"],
            grads["b_r"],
            grads["x"],
        ),
    )
    if not finite:
        return None
    if not layer.bias:
        del grads["b_l"], grads["b_r"], grads["bias"]
    return grads
