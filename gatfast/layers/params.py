"""A parameter dict that checks every assignment against its declared shape."""

from __future__ import annotations

import numpy as np

from .._validate import NonFiniteError, all_finite, check_dense


class ParamDict(dict):
    """``dict`` of named parameter arrays with fixed shapes and dtype.

    Assigning ``params[name] = array`` checks the name, the shape, that the
    dtype is floating point and that the values are finite (after the cast
    to the dict's dtype). The first assignment of a name stores a
    C-contiguous copy; later ones **copy the values into the stored array**,
    which keeps its identity.

    Why in place: optimizers (and ``GATv2Network.parameters()``) hold the
    arrays themselves and update them in place. Storing a new array would
    leave an optimizer built earlier updating the old one, so the assigned
    parameter would silently never train (as with ``torch``, where
    replacing an ``nn.Parameter`` after building the optimizer does that).
    Copying in place is what ``torch``'s ``p.copy_(new)`` under
    ``no_grad`` does: every holder sees the new values, and the optimizer's
    state for the parameter (momentum, Adam moments) is kept; call
    ``optimizer.zero_state()`` to reset it. The array passed in is never
    modified or kept.

    Parameters
    ----------
    shapes : mapping of str to tuple of int
        The parameter names and their shapes; no other name can be assigned.
    dtype : numpy.float32 or numpy.float64
        The dtype every parameter is stored in.
    """

    def __init__(self, shapes, dtype):
        super().__init__()
        self._shapes = dict(shapes)
        self._dtype = np.dtype(dtype)

    @property
    def shapes(self):
        """Declared shape of every parameter."""
        return dict(self._shapes)

    def __setitem__(self, name, value):
        if name not in self._shapes:
            raise KeyError(f"unknown parameter {name!r}; this layer has {sorted(self._shapes)!r}")
        arr = check_dense(value, f"params[{name!r}]", self._shapes[name], self._dtype)
        current = self.get(name)
        if current is not None:
            np.copyto(current, arr)  # in place: optimizers hold this array (see the class docstring)
            return
        if arr is value:
            arr = arr.copy()
        super().__setitem__(name, arr)

    def update(self, *args, **kwargs):
        """Assign several parameters, each checked and copied in place as ``params[name] = value``.

        Parameters
        ----------
        *args, **kwargs
            A mapping or pairs, and keywords, as ``dict.update``.
        """
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name, value=None):
        """Assign ``value`` (checked) unless ``name`` is set; return the stored array.

        Parameters
        ----------
        name : str
            A declared parameter name.
        value : array_like, optional
            The value to store if ``name`` is not set yet (None is refused then).

        Returns
        -------
        ndarray
            The stored array of ``name``.
        """
        if name not in self:
            self[name] = value
        return self[name]

    def __reduce__(self):
        # dict subclasses unpickle by setting items before restoring attributes,
        # which __setitem__ cannot check yet: rebuild from shapes, dtype and arrays
        return (_rebuild, (self._shapes, self._dtype.str, dict(self)))

    def __delitem__(self, name):
        raise TypeError("parameters cannot be removed from a layer")

    def check_shapes(self):
        """Raise if a stored array no longer has its declared shape or dtype (cheap: no data is read)."""
        shapes, dtype = self._shapes, self._dtype
        for name, arr in self.items():  # runs on every call of a layer: one test per array when all is well
            if arr.shape != shapes[name] or (arr.dtype is not dtype and arr.dtype != dtype):
                if arr.shape != shapes[name]:
                    raise ValueError(f"params[{name!r}] must have shape {shapes[name]}, got {arr.shape}")
                raise TypeError(f"params[{name!r}] must have dtype {dtype}, got {arr.dtype}")

    def check_finite(self):
        """Raise ValueError if any parameter holds NaN or inf (e.g. after a bad step)."""
        self.check_shapes()
        for name, arr in self.items():
            if not all_finite(arr):
                raise NonFiniteError(f"params[{name!r}] must be finite, but contains NaN or inf")

    def copy_arrays(self):
        """Copy every array.

        Returns
        -------
        dict of str to ndarray
            A plain dict of copies.
        """
        return {k: v.copy() for k, v in self.items()}


def _rebuild(shapes, dtype, arrays):
    """Unpickle a :class:`ParamDict` (every array is checked again on the way in)."""
    params = ParamDict(shapes, dtype)
    for name, arr in arrays.items():
        params[name] = arr
    return params
