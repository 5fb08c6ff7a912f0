"""A parameter dict that checks every assignment against its declared shape."""

from __future__ import annotations

import numpy as np

from .._validate import NonFiniteError, all_finite, check_dense


class ParamDict(dict):
    """``dict`` of named parameter arrays with fixed shapes and dtype.

    Assigning ``params[name] = array`` checks the name, the shape, that the
    dtype is floating point and that the values are finite, then stores a
    C-contiguous copy in the dict's dtype. Optimizers update the stored
    arrays in place.
    """

    def __init__(self, shapes, dtype):
        super().__init__()
        self._shapes = dict(shapes)
        self._dtype = np.dtype(dtype)

    def __reduce__(self):
        # rebuild the declared shapes first, then assign (and so check) every array
        return (type(self), (self._shapes, self._dtype), None, None, iter(self.items()))

    @property
    def shapes(self):
        """Declared shape of every parameter."""
        return dict(self._shapes)

    def __setitem__(self, name, value):
        if name not in self._shapes:
            raise KeyError(f"unknown parameter {name!r}; this layer has {sorted(self._shapes)!r}")
        arr = check_dense(value, f"params[{name!r}]", self._shapes[name], self._dtype)
        if arr is value:
            arr = arr.copy()
        super().__setitem__(name, arr)

    def update(self, *args, **kwargs):
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name, value=None):
        if name not in self:
            self[name] = value
        return self[name]

    def __delitem__(self, name):
        raise TypeError("parameters cannot be removed from a layer")

    def check_finite(self):
        """Raise ValueError if any parameter holds NaN or inf (e.g. after a bad step)."""
        for name, arr in self.items():
            if arr.shape != self._shapes[name]:
                raise ValueError(f"params[{name!r}] must have shape {self._shapes[name]}, got {arr.shape}")
            if arr.dtype != self._dtype:
                raise TypeError(f"params[{name!r}] must have dtype {self._dtype}, got {arr.dtype}")
            if not all_finite(arr):
                raise NonFiniteError(f"params[{name!r}] must be finite, but contains NaN or inf")

    def copy_arrays(self):
        """A plain dict of copies of the arrays."""
        return {k: v.copy() for k, v in self.items()}
