"""Argument checks shared by the public API. Each raises an error that names
the argument and says what was expected."""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp

from . import _runtime
from .kernels.finite import all_finite_flat, max_exponent_bits

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class NonFiniteError(ValueError):
    """An array argument holds NaN or inf.

    A ValueError like every other bad-input error; its own class lets the
    training loop tell an overflowing hidden activation or update (training
    diverged) from any other bad input without reading message text.
    """


def all_finite(arr):
    """True if a float array holds no NaN or inf.

    Contiguous float32/float64 arrays: small ones through one Numba loop
    (under a microsecond, where ``isfinite(...).all()`` took 1.9 us), large
    ones through a vectorised pass over their bits (the largest exponent),
    from ``_runtime.PARALLEL_ELEMENTS`` on in chunks on the thread pool.
    Other large arrays in one pass: the plain sum is finite exactly when
    every element is, except when finite values overflow the sum, and only
    then is the array checked element by element (NaN and inf never leave a
    sum: inf + -inf is NaN). Neither makes a boolean array the size of the input.
    """
    arr = np.asarray(arr)
    if arr.dtype in FLOAT_DTYPES and arr.flags.c_contiguous:
        flat = arr.reshape(-1)
        if arr.size < _SMALL:
            return all_finite_flat(flat)
        bits, mask = (flat.view(np.uint32), _EXP32) if arr.dtype.itemsize == 4 else (flat.view(np.uint64), _EXP64)
        if arr.size < _runtime.PARALLEL_ELEMENTS:
            return max_exponent_bits(bits, mask) != mask
        # a layer's input, output and upstream gradient: on one thread these passes were a quarter of
        # a 16-thread step of a 200,000-node layer (Amdahl), so they run in chunks on the pool too
        step = FINITE_CHUNK
        tops = _runtime.run_chunks(lambda start, stop: max_exponent_bits(bits[start:stop], mask),
                                   [(start, min(bits.size, start + step)) for start in range(0, bits.size, step)],
                                   arr.nbytes // _runtime.STREAM_BYTES_PER_UNIT)
        return all(top != mask for top in tops)
    if arr.size < _SMALL:
        return bool(np.isfinite(arr).all())
    with np.errstate(over="ignore", invalid="ignore"):
        if math.isfinite(np.add.reduce(arr, axis=None)):
            return True
    return bool(np.isfinite(arr).all())


_SMALL = 4096
#: Elements per chunk of the check of an array of ``_runtime.PARALLEL_ELEMENTS`` or more (1 MiB of float32).
FINITE_CHUNK = 1 << 18
_EXP32 = np.uint32(0x7F800000)  # the exponent bits of float32 and float64
_EXP64 = np.uint64(0x7FF0000000000000)


def check_dtype(dtype, name="dtype"):
    """Return ``dtype`` as float32 or float64, or raise TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be numpy.float32 or numpy.float64, got {dtype!r}") from exc
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be numpy.float32 or numpy.float64, got {dt}")
    return dt


def check_int(value, name, minimum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_float(value, name, low=None, high=None, low_open=False, high_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value}")
    return value


def check_choice(value, name, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)!r}, got {value!r}")
    return value


def _check_float_kind(dtype, name):
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"{name} must have a floating-point dtype, got {dtype}")


def check_dense(value, name, shape, dtype, finite=True):
    """Return ``value`` as a C-contiguous array of ``dtype`` and ``shape``.

    ``shape`` entries of ``None`` match any size. A float array of another
    precision is converted (a copy); non-float data raises TypeError and
    NaN/inf raises ValueError, checked after the conversion (a float64
    value too large for float32 is refused, not turned into inf). The input
    is never modified. ``finite=False`` skips the finiteness pass when
    nothing is converted (see :func:`check_features`).
    """
    if sp.issparse(value):
        raise TypeError(f"{name} must be a dense array, got a scipy.sparse {type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got dtype object")
    _check_float_kind(arr.dtype, name)
    if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
        want = str(tuple("*" if s is None else s for s in shape)).replace("'", "")
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    return _finite_cast(arr, name, dtype, finite)


def _finite_cast(arr, name, dtype, finite=True):
    """``arr`` as C-contiguous ``dtype``, checked for NaN/inf *after* the cast.

    A float64 value beyond float32's range (|x| > 3.4e38) would become inf
    in the cast; checking only the input would let it through.
    """
    if arr.dtype == dtype and arr.flags.c_contiguous:  # nothing to convert (the common case)
        if finite and not all_finite(arr):
            raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
        return arr
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(arr, dtype=dtype, order="C")  # keeps a 0-d array 0-d (ascontiguousarray does not)
    _check_cast_values(out, arr, name, dtype)
    return out


def _check_cast_values(out, arr, name, dtype):
    if all_finite(out):
        return
    if out.dtype != arr.dtype and all_finite(arr):
        big = np.finfo(dtype).max
        raise NonFiniteError(
            f"{name} has values outside the range of {np.dtype(dtype).name} (|x| > {big:.4g}), which "
            f"would become inf; scale the data or use float64"
        )
    raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")


def check_features(x, name, num_nodes, num_features, dtype, finite=True):
    """Validate node features, dense or scipy.sparse; sparse stays sparse (CSR).

    ``finite=False``: the caller made ``x`` from values already checked (a
    network passing one layer's output to the next), so an array needing
    no conversion skips the finiteness pass.
    """
    if (type(x) is np.ndarray and x.dtype == dtype and x.shape == (num_nodes, num_features)
            and x.flags.c_contiguous):  # the common case, in O(1) plus one finiteness pass
        if finite and not all_finite(x):
            raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
        return x
    if sp.issparse(x):
        _check_float_kind(x.dtype, name)
        if x.ndim != 2 or x.shape != (num_nodes, num_features):
            raise ValueError(
                f"{name} must have shape ({num_nodes}, {num_features}) "
                f"(num_nodes, in_features), got {x.shape}"
            )
        with np.errstate(over="ignore", invalid="ignore"):
            csr = sp.csr_array(x, dtype=dtype)
        if not all_finite(csr.data):
            _check_cast_values(csr.data, sp.csr_array(x).data, name, dtype)
        return csr
    arr = np.asarray(x)
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array or scipy.sparse matrix, got dtype object")
    _check_float_kind(arr.dtype, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (num_nodes, in_features), got shape {arr.shape}")
    if arr.shape[0] != num_nodes:
        raise ValueError(
            f"{name} must have one row per node: expected {num_nodes} rows, got {arr.shape[0]}"
        )
    if arr.shape[1] != num_features:
        raise ValueError(
            f"{name} must have in_features = {num_features} columns, got {arr.shape[1]}"
        )
    return _finite_cast(arr, name, dtype)


def as_graph(graph, name="graph"):
    """Accept a CSRGraph or a scipy.sparse adjacency (rows = targets; rectangular = bipartite)."""
    if type(graph).__name__ == "CSRGraph" and type(graph).__module__ == "gatfast.graph.csr":  # fast path
        return graph
    from .graph import CSRGraph

    if isinstance(graph, CSRGraph):
        return graph
    if sp.issparse(graph):
        return CSRGraph.from_scipy(graph, rows="targets")  # documented: rows = targets, no warning
    raise TypeError(
        f"{name} must be a gatfast.CSRGraph or a scipy.sparse matrix (rows = targets), "
        f"got {type(graph).__name__}"
    )


# ---------------------------------------------------------------------- arrays of the models floor
def float_array(value, name, finite=True):
    """``value`` as a dense floating-point ndarray (no copy), or raise."""
    if sp.issparse(value):
        raise TypeError(f"{name} must be a dense array, got a scipy.sparse {type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must have a floating-point dtype, got {arr.dtype}")
    if finite and not all_finite(arr):
        raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
    return arr


def same_shape(arr, name, shape, ref_name):
    if arr.shape != shape:
        raise ValueError(f"{name} must have the shape of {ref_name} {shape}, got {arr.shape}")


def row_mask(mask, n, name="mask"):
    """A boolean mask over ``n`` rows from a bool array or unique integer indices."""
    if mask is None:
        return None
    if sp.issparse(mask):
        raise TypeError(f"{name} must be a dense boolean or integer array, got scipy.sparse")
    m = np.asarray(mask)
    if m.dtype == bool:
        if m.shape != (n,):
            raise ValueError(f"{name} must be a boolean array of shape ({n},), got shape {m.shape}")
        return m
    if not np.issubdtype(m.dtype, np.integer):
        raise TypeError(f"{name} must be a boolean mask or an integer index array, got dtype {m.dtype}")
    if m.ndim != 1:
        raise ValueError(f"{name} as indices must be 1-D, got shape {m.shape}")
    if m.size and (m.min() < 0 or m.max() >= n):
        raise ValueError(f"{name} indices must lie in [0, {n}), got values in [{m.min()}, {m.max()}]")
    out = np.zeros(n, dtype=bool)
    out[m] = True
    if out.sum() != m.size:
        raise ValueError(f"{name} indices must be unique")
    return out


def check_rng(rng, name="rng"):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name} must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def check_probability(p, name="p"):
    return check_float(p, name, 0.0, 1.0, high_open=True)


def check_graph_ptr(graph_ptr, num_nodes, name="graph_ptr"):
    """Validate a graph pointer: int64 (num_graphs + 1,), from 0 to ``num_nodes``, non-decreasing.

    Returns
    -------
    ndarray of int64
    """
    if sp.issparse(graph_ptr):
        raise TypeError(f"{name} must be a 1-D integer array, got scipy.sparse")
    ptr = np.asarray(graph_ptr)
    if ptr.dtype == bool or not np.issubdtype(ptr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array, got dtype {ptr.dtype}")
    if ptr.ndim != 1 or ptr.size < 2:
        raise ValueError(f"{name} must be 1-D with num_graphs + 1 >= 2 entries, got shape {ptr.shape}")
    if ptr[0] != 0:
        raise ValueError(f"{name} must start at 0, got {ptr[0]}")
    if ptr[-1] != num_nodes:
        raise ValueError(f"{name} must end at num_nodes = {num_nodes}, got {ptr[-1]}")
    if np.any(np.diff(ptr) < 0):
        raise ValueError(f"{name} must be non-decreasing")
    return np.ascontiguousarray(ptr, dtype=np.int64)


# ---------------------------------------------------------------------- network sizes
#: Largest network gatfast builds (the caps of ``TrainConfig`` for the layer
#: count, heads and channels), checked before anything is allocated.
MAX_LAYERS = 64
MAX_HEADS = 1024
MAX_CHANNELS = 65536
MAX_IN_FEATURES = 2**24
#: Most weights (the ``W_l``/``W_r`` projections, which dominate) a network may hold:
#: 2**28 is 1 GiB in float32, 2 GiB in float64, before gradients and optimizer state.
MAX_WEIGHTS = 2**28


def check_network_size(in_features, hidden_features, out_features, num_layers, heads, out_heads, readout=None):
    """Refuse network sizes that would allocate absurd amounts of memory, before building anything.

    Each size must be an int within its documented cap (:data:`MAX_LAYERS`,
    :data:`MAX_HEADS`, :data:`MAX_CHANNELS`, :data:`MAX_IN_FEATURES`), and
    the projection weights, ``2 · Σ_layers width_out · width_in``, must not
    exceed :data:`MAX_WEIGHTS`.

    Returns
    -------
    int
        That weight count.
    """
    num_layers = check_int(num_layers, "num_layers", 1)
    if isinstance(in_features, (tuple, list)):  # a bipartite first layer: (F_src, F_dst)
        if len(in_features) != 2:
            raise ValueError(f"in_features must be an int or a pair (F_src, F_dst), got {in_features!r}")
        check_int(in_features[1], "in_features[1]", 1)
        if in_features[1] > MAX_IN_FEATURES:
            raise ValueError(f"in_features must be <= {MAX_IN_FEATURES} (gatfast's limit on network sizes), "
                             f"got {in_features[1]}")
        in_features = max(in_features[0], in_features[1])
    for name, value, cap in (
        ("num_layers", num_layers, MAX_LAYERS),
        ("in_features", in_features, MAX_IN_FEATURES),
        ("hidden_features", hidden_features, MAX_CHANNELS),
        ("out_features", out_features, MAX_CHANNELS),
        ("heads", heads, MAX_HEADS),
        ("out_heads", out_heads, MAX_HEADS),
    ):
        value = check_int(value, name, 1)
        if value > cap:
            raise ValueError(f"{name} must be <= {cap} (gatfast's limit on network sizes), got {value}")
    width = heads * hidden_features
    widths = [in_features] + [width] * num_layers
    outs = [width] * num_layers
    if readout is None:
        outs[-1] = out_heads * out_features
    weights = sum(2 * o * i for o, i in zip(outs, widths)) + (width * out_features if readout else 0)
    if weights > MAX_WEIGHTS:
        raise ValueError(
            f"the network would hold about {weights:,} weights, above gatfast's limit of {MAX_WEIGHTS:,}: "
            "reduce hidden_features, heads, num_layers or the number of input features"
        )
    return weights
