"""Optimizers that update named parameter arrays in place, with the
semantics of ``torch.optim`` (checked against it to 1e-12 in float64).

``params`` is any mapping name -> ndarray, typically
:meth:`gatfast.model.GATv2Network.parameters`, whose arrays are the ones
the model computes with; ``step(grads)`` takes the dict returned by the
model's ``backward`` (same keys; extra keys such as ``"x"`` are ignored).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from . import _validate as V
from ._validate import NonFiniteError, all_finite

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "clip_grad_norm"]


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
            raise TypeError(f"params[{name!r}] must be a floating-point numpy array, got {type(arr).__name__}"
                            + (f" of dtype {arr.dtype}" if isinstance(arr, np.ndarray) else ""))
        if not arr.flags.writeable:
            raise ValueError(f"params[{name!r}] must be writeable (it is updated in place)")
        out[name] = arr
    return out


def _check_grad(grad, name, param):
    """The gradient as an array of the parameter's dtype and shape, or raise."""
    arr = np.asarray(grad)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"grads[{name!r}] must be a floating-point array, got dtype {arr.dtype}")
    if arr.shape != param.shape:
        raise ValueError(f"grads[{name!r}] must have shape {param.shape} like the parameter, got {arr.shape}")
    if not all_finite(arr):
        raise NonFiniteError(f"grads[{name!r}] must be finite, but contains NaN or inf")
    return arr.astype(param.dtype, copy=False)


def _lerp_(a, b, w):
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

    def zero_state(self):
        """Forget the optimizer state (momentum buffers, moments, step counts)."""
        self.state = {name: {} for name in self.params}

    def state_dict(self):
        """A flat dict of numbers and array copies: the hyperparameters, then
        ``<key>.<name>`` (e.g. ``exp_avg.layers.0.W_l``, ``step.layers.0.W_l``)
        for every parameter that has state."""
        out = {h: getattr(self, h) for h in self._hyper}
        for name, st in self.state.items():
            for key, val in st.items():
                out[f"{key}.{name}"] = val.copy() if isinstance(val, np.ndarray) else val
        return out

    def load_state_dict(self, state_dict):
        """Restore hyperparameters and state from :meth:`state_dict` (validated first)."""
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
                state[name][kind] = V.check_dense(val, f"state_dict[{key!r}]", param.shape, param.dtype).copy()
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


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    Parameters
    ----------
    params : mapping name -> ndarray
    lr : float, default 0.01
    momentum : float, default 0
    dampening : float, default 0
    nesterov : bool, default False
        Requires ``momentum > 0`` and ``dampening == 0``.
    weight_decay : float, default 0
        L2 penalty added to the gradient.

    Notes
    -----
    ``g = grad + wd p``; ``b = g`` on the first step, then
    ``b = momentum b + (1 - dampening) g``; ``g = g + momentum b`` (Nesterov)
    or ``g = b``; ``p -= lr g``.
    """

    _hyper = ("lr", "momentum", "dampening", "nesterov", "weight_decay")
    _state_keys = ("momentum_buffer",)

    def __init__(self, params, lr=0.01, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(params)
        self._set_hyper(lr, momentum, dampening, nesterov, weight_decay)

    def _set_hyper(self, lr, momentum, dampening, nesterov, weight_decay):
        momentum = V.check_float(momentum, "momentum", 0.0)
        dampening = V.check_float(dampening, "dampening")
        if not isinstance(nesterov, (bool, np.bool_)):
            raise TypeError(f"nesterov must be a bool, got {type(nesterov).__name__}")
        if nesterov and (momentum <= 0.0 or dampening != 0.0):
            raise ValueError("nesterov=True requires momentum > 0 and dampening == 0")
        self.weight_decay = V.check_float(weight_decay, "weight_decay", 0.0)
        self.lr = lr
        self.momentum, self.dampening, self.nesterov = momentum, dampening, bool(nesterov)

    def _update(self, name, p, grad, st):
        d_p = grad + self.weight_decay * p if self.weight_decay != 0.0 else grad
        if self.momentum != 0.0:
            buf = st.get("momentum_buffer")
            if buf is None:
                buf = st["momentum_buffer"] = np.array(d_p, dtype=p.dtype, copy=True)
            else:
                buf *= self.momentum
                buf += (1.0 - self.dampening) * d_p
            d_p = d_p + self.momentum * buf if self.nesterov else buf
        p -= self.lr * d_p


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (``weight_decay`` is an L2 term added to the gradient).

    Parameters
    ----------
    params : mapping name -> ndarray
    lr : float, default 0.005
    betas : (float, float), default (0.9, 0.999)
        Each in [0, 1).
    eps : float, default 1e-8
    weight_decay : float, default 0
    """

    _hyper = ("lr", "beta1", "beta2", "eps", "weight_decay")
    _state_keys = ("step", "exp_avg", "exp_avg_sq")
    _decoupled = False

    def __init__(self, params, lr=0.005, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        self._set_hyper(lr, betas[0], betas[1], eps, weight_decay)

    @property
    def betas(self):
        return (self.beta1, self.beta2)

    def _set_hyper(self, lr, beta1, beta2, eps, weight_decay):
        self.beta1 = V.check_float(beta1, "betas[0]", 0.0, 1.0, high_open=True)
        self.beta2 = V.check_float(beta2, "betas[1]", 0.0, 1.0, high_open=True)
        self.eps = V.check_float(eps, "eps", 0.0)
        self.weight_decay = V.check_float(weight_decay, "weight_decay", 0.0)
        self.lr = lr

    def _update(self, name, p, grad, st):
        if not st:
            st["step"] = 0
            st["exp_avg"] = np.zeros_like(p)
            st["exp_avg_sq"] = np.zeros_like(p)
        st["step"] += 1
        step = st["step"]
        if self.weight_decay != 0.0:
            if self._decoupled:
                p *= 1.0 - self.lr * self.weight_decay
            else:
                grad = grad + self.weight_decay * p
        m, v = st["exp_avg"], st["exp_avg_sq"]
        _lerp_(m, grad, 1.0 - self.beta1)
        v *= self.beta2
        v += (1.0 - self.beta2) * (grad * grad)
        bias_correction1 = 1.0 - self.beta1**step
        bias_correction2 = 1.0 - self.beta2**step
        step_size = self.lr / bias_correction1
        denom = np.sqrt(v) / math.sqrt(bias_correction2) + p.dtype.type(self.eps)
        p -= step_size * m / denom


class AdamW(Adam):
    """AdamW, as ``torch.optim.AdamW``: decoupled weight decay ``p *= 1 - lr wd``
    before the Adam step.

    Parameters
    ----------
    params : mapping name -> ndarray
    lr : float, default 0.001
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 0.01
    """

    _decoupled = True

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def clip_grad_norm(grads, max_norm, norm_type=2.0):
    """Scale gradients in place so their total norm is at most ``max_norm``.

    Same rule as ``torch.nn.utils.clip_grad_norm_``: the total norm is the
    norm of the per-array norms; every gradient is multiplied by
    ``min(1, max_norm / (total_norm + 1e-6))``.

    Parameters
    ----------
    grads : mapping name -> ndarray
        Entries that are None and the key ``"x"`` (the input gradient) are ignored.
    max_norm : float > 0
    norm_type : float > 0 or inf, default 2

    Returns
    -------
    total_norm : float
        The norm before clipping.
    """
    if not isinstance(grads, Mapping):
        raise TypeError(f"grads must be a mapping of name -> array, got {type(grads).__name__}")
    max_norm = V.check_float(max_norm, "max_norm", 0.0, low_open=True)
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real) or not norm_type > 0:
        raise ValueError(f"norm_type must be a positive number or inf, got {norm_type!r}")
    norm_type = float(norm_type)
    arrays = []
    for name, g in grads.items():
        if name == "x" or g is None:
            continue
        if not isinstance(g, np.ndarray) or not np.issubdtype(g.dtype, np.floating):
            raise TypeError(f"grads[{name!r}] must be a floating-point numpy array, got {type(g).__name__}")
        if not g.flags.writeable:
            raise ValueError(f"grads[{name!r}] must be writeable (it is scaled in place)")
        arrays.append(g)
    if not arrays:
        return 0.0
    if math.isinf(norm_type):
        norms = np.array([np.max(np.abs(g)) if g.size else 0.0 for g in arrays], dtype=np.float64)
        total = float(norms.max())
    else:
        norms = np.array([np.linalg.norm(g.ravel(), norm_type) for g in arrays], dtype=np.float64)
        total = float(np.linalg.norm(norms, norm_type))
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in arrays:
        g *= g.dtype.type(coef)
    return total
