"""The optimizer base class: parameter bookkeeping, gradient checks, state dicts.

Optimizers update named parameter arrays in place, with the
semantics of ``torch.optim`` (checked against it to 1e-12 in float64).

``params`` is any mapping name -> ndarray, typically
:meth:`gatfast.models.GATv2Network.parameters`, whose arrays are the ones
the model computes with; ``step(grads)`` takes the dict returned by the
model's ``backward`` (same keys; extra keys such as ``"x"`` are ignored).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import _validate as V

__all__ = ["Optimizer", "lerp_"]


def _check_params(params):
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of name -> array, got {type(params).__name__}")
    if not params:
        raise ValueError("params must contain at least one array, got an empty mapping")
    out = {}
    for name, arr in params.items():
        if not isinstance(name, str):
            raise TypeError(f"params keys must be str, got {type(name).__name__}")
        if not isinstance(arr, np.ndarray) or not np.issubdtype(arr.dtype, np.floating):
            raise TypeError(
                f"params[{name!r}] must be a floating-point numpy array, got {type(arr).__name__}"
                + (f" of dtype {arr.dtype}" if isinstance(arr, np.ndarray) else "")
            )
        if not arr.flags.writeable:
            raise ValueError(f"params[{name!r}] must be writeable (it is updated in place)")
        out[name] = arr
    return out


def _check_grad(grad, name, param):
    """The gradient as an array of the parameter's dtype and shape, or raise."""
    arr = np.asarray(grad)
    if arr.dtype.kind != "f":  # floating point only (not object, int, bool or complex)
        raise TypeError(f"grads[{name!r}] must be a floating-point array, got dtype {arr.dtype}")
    if arr.shape != param.shape:
        raise ValueError(f"grads[{name!r}] must have shape {param.shape} like the parameter, got {arr.shape}")
    if not V.all_finite(arr):
        raise V.NonFiniteError(f"grads[{name!r}] must be finite, but contains NaN or inf")
    return arr.astype(param.dtype, copy=False)


def lerp_(a, b, w):
    """``a += w (b - a)`` in place, with torch.lerp's rounding (two forms around w = 0.5)."""
    if w < 0.5:
        a += w * (b - a)
    else:
        a[...] = b - (b - a) * (1.0 - w)


class Optimizer:
    """Base class: parameter bookkeeping, gradient checks and checkpoints.

    Subclasses define ``_hyper`` (hyperparameter names saved in the state
    dict), ``_state_keys`` (what a parameter's non-empty state holds: arrays,
    and ``"step"`` as an int), ``_set_hyper`` and ``_update``.

    Parameters
    ----------
    params : mapping of str to ndarray
        The arrays to update in place, by name; writeable floating-point
        arrays (e.g. ``model.parameters()``).
    """

    _hyper = ()
    _state_keys = ()

    def __init__(self, params):
        self.params = _check_params(params)
        self.state = {name: {} for name in self.params}

    @property
    def lr(self):
        """Learning rate (settable, e.g. by a scheduler; must be > 0)."""
        return self._lr

    @lr.setter
    def lr(self, value):
        self._lr = V.check_float(value, "lr", 0.0, low_open=True)

    def step(self, grads):
        """Update every parameter in place from ``grads``.

        Parameters
        ----------
        grads : mapping
            One entry per parameter name; a value of None skips that
            parameter (as a missing ``.grad`` in torch). Other keys are
            ignored. All gradients are checked before anything is updated.
        """
        if self._step_all(grads):
            return
        if not isinstance(grads, Mapping):
            raise TypeError(f"grads must be a mapping of name -> array, got {type(grads).__name__}")
        checked = {}
        for name, param in self.params.items():
            if name not in grads:
                raise KeyError(f"grads is missing {name!r}; expected one gradient per parameter")
            if grads[name] is not None:
                checked[name] = _check_grad(grads[name], name, param)
        for name, grad in checked.items():
            self._update(name, self.params[name], grad, self.state[name])

    def _step_all(self, grads):
        """Update every parameter at once where a subclass can (one kernel call); False leaves the
        step, its checks and its errors to the per-array path of :meth:`step`."""
        return False

    def zero_state(self):
        """Forget the optimizer state (momentum buffers, moments, step counts)."""
        self.state = {name: {} for name in self.params}

    def state_dict(self):
        """Return the hyperparameters and the state, for a checkpoint.

        Returns
        -------
        dict
            A flat dict of numbers and array copies: the hyperparameters, then
            ``<key>.<name>`` (e.g. ``exp_avg.layers.0.W_l``, ``step.layers.0.W_l``)
            for every parameter that has state.
        """
        out = {h: getattr(self, h) for h in self._hyper}
        for name, st in self.state.items():
            for key, val in st.items():
                out[f"{key}.{name}"] = val.copy() if isinstance(val, np.ndarray) else val
        return out

    def load_state_dict(self, state_dict):
        """Restore hyperparameters and state from :meth:`state_dict` (validated first).

        Parameters
        ----------
        state_dict : mapping
            What :meth:`state_dict` returned, possibly through a ``.npz`` file
            (0-d arrays are accepted for numbers). Nothing changes unless
            every entry is valid for this optimizer and its parameters.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping, got {type(state_dict).__name__}")
        missing = [h for h in self._hyper if h not in state_dict]
        if missing:
            raise KeyError(f"state_dict is missing hyperparameter {missing[0]!r} for {type(self).__name__}")
        hyper = {h: _scalar(state_dict[h], h) for h in self._hyper}
        state = {name: {} for name in self.params}
        for key, val in state_dict.items():
            if key in self._hyper:
                continue
            kind, _, name = key.partition(".")
            if name not in self.params or kind not in self._state_keys:
                raise KeyError(f"state_dict has unexpected key {key!r} for {type(self).__name__}")
            if kind == "step":
                state[name]["step"] = V.check_int(_scalar(val, key), f"state_dict[{key!r}]", 0)
            else:
                param = self.params[name]
                state[name][kind] = V.check_dense(
                    val, f"state_dict[{key!r}]", param.shape, param.dtype
                ).copy()
        for name, st in state.items():
            if st and set(st) != set(self._state_keys):
                raise KeyError(
                    f"state_dict has incomplete state for {name!r}: got {sorted(st)}, "
                    f"expected {sorted(self._state_keys)}"
                )
        self._set_hyper(**hyper)
        self.state = state


def _scalar(value, name):
    """A Python number from a number or a 0-d array (as loaded from .npz)."""
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype == object:
        raise TypeError(f"state_dict[{name!r}] must be a number, got {type(value).__name__}")
    return arr.item()
