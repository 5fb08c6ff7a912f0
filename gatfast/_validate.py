"""Argument checks shared by the public API. Each raises an error that names
the argument and says what was expected."""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class NonFiniteError(ValueError):
    """An array argument holds NaN or inf.

    A ValueError like every other bad-input error; its own class lets the
    training loop tell an overflowing hidden activation or update (training
    diverged) from any other bad input without reading message text.
    """


def all_finite(arr):
    """True if a float array holds no NaN or inf.

    ``min`` and ``max`` propagate NaN, so this reads the data twice without
    building a boolean array the size of the input (milliseconds saved per
    call on million-row inputs).
    """
    arr = np.asarray(arr)
    if arr.size == 0:
        return True
    return bool(np.isfinite(arr.min()) and np.isfinite(arr.max()))


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


def check_dense(value, name, shape, dtype):
    """Return ``value`` as a C-contiguous array of ``dtype`` and ``shape``.

    ``shape`` entries of ``None`` match any size. A float array of another
    precision is converted (a copy); non-float data raises TypeError and
    NaN/inf raises ValueError. The input is never modified.
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
    if not all_finite(arr):
        raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
    return np.ascontiguousarray(arr, dtype=dtype)


def check_features(x, name, num_nodes, num_features, dtype):
    """Validate node features, dense or scipy.sparse; sparse stays sparse (CSR)."""
    if sp.issparse(x):
        _check_float_kind(x.dtype, name)
        if x.ndim != 2 or x.shape != (num_nodes, num_features):
            raise ValueError(
                f"{name} must have shape ({num_nodes}, {num_features}) "
                f"(num_nodes, in_features), got {x.shape}"
            )
        csr = sp.csr_array(x, dtype=dtype)
        if not all_finite(csr.data):
            raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
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
    if not all_finite(arr):
        raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
    return np.ascontiguousarray(arr, dtype=dtype)


def as_graph(graph, name="graph"):
    """Accept a CSRGraph or a scipy.sparse adjacency (rows = targets; rectangular = bipartite)."""
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
