"""Adam and AdamW, as ``torch.optim.Adam`` and ``torch.optim.AdamW``."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .. import _validate as V
from ..kernels.optim import adam_update
from .base import Optimizer, lerp_
from .flat import FlatMoments

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (``weight_decay`` is an L2 term added to the gradient).

    Parameters
    ----------
    params : mapping of str to ndarray
        The arrays to update in place, by name (e.g. ``model.parameters()``).
    lr : float, default 0.005
        Learning rate, > 0.
    betas : (float, float), default (0.9, 0.999)
        Decay rates of the first and second moment estimates, each in [0, 1).
    eps : float, default 1e-8
        Added to the denominator for numerical stability. 0 is allowed: where
        the second moment is 0 the update is then NaN or inf, as in torch.
    weight_decay : float, default 0
        L2 penalty added to the gradient (coupled, as in ``torch.optim.Adam``).
    """

    _hyper = ("lr", "beta1", "beta2", "eps", "weight_decay")
    _state_keys = ("step", "exp_avg", "exp_avg_sq")
    _decoupled = False

    def __init__(self, params, lr=0.005, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        self._set_hyper(lr, betas[0], betas[1], eps, weight_decay)

    def _step_all(self, grads):
        """One kernel call for all parameters (``flat.py``); False where that path does not apply."""
        flat = self.__dict__.get("_flat")
        if flat is not None and flat is not False and not flat.matches(self.params):
            flat = None  # the mapping was changed: lay the buffers out again (the moments are copied in)
        if flat is None:
            fits = FlatMoments.applies(self.params, _KERNEL_DTYPES)
            flat = self._flat = FlatMoments(self.params) if fits else False
        if flat is False or not isinstance(grads, Mapping) or not flat.gather(self.params, grads):
            return False
        state = self.state
        if flat.owns(state):
            steps = {state[name]["step"] for name in flat.names}
            step = steps.pop() if len(steps) == 1 else None
        else:
            step = flat.adopt(state)
        if step is None:
            return False
        step += 1
        for name in flat.names:
            state[name]["step"] = step
        flat.update(self._scalars(step, flat.dtype))
        return True

    def __getstate__(self):
        # the flat buffers hold views of the parameters and moments: a copy or an unpickled
        # optimizer lays out its own on its first step instead of writing through stale views
        state = self.__dict__.copy()
        state.pop("_flat", None)
        return state

    @property
    def betas(self):
        """``(beta1, beta2)``, the moment decay rates (read-only)."""
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
        m, v = st["exp_avg"], st["exp_avg_sq"]
        if m.shape != p.shape or v.shape != p.shape:  # the kernel trusts them: never read past the end
            raise ValueError(
                f"the Adam state of {name!r} has shapes {m.shape} and {v.shape}, but the parameter "
                f"has shape {p.shape} (a state_dict of another model?)"
            )
        if _fused(p, grad, m, v):
            adam_update(
                p.reshape(-1), grad.reshape(-1), m.reshape(-1), v.reshape(-1), *self._scalars(step, p.dtype)
            )
            return
        bias_correction1 = 1.0 - self.beta1**step
        bias_correction2 = 1.0 - self.beta2**step
        step_size = self.lr / bias_correction1
        decoupled = self.weight_decay != 0.0 and self._decoupled
        coupled = self.weight_decay != 0.0 and not self._decoupled
        if decoupled:
            p *= 1.0 - self.lr * self.weight_decay
        elif coupled:
            grad = grad + self.weight_decay * p
        lerp_(m, grad, 1.0 - self.beta1)
        v *= self.beta2
        v += (1.0 - self.beta2) * (grad * grad)
        denom = np.sqrt(v) / math.sqrt(bias_correction2) + p.dtype.type(self.eps)
        p -= step_size * m / denom

    def _scalars(self, step, dtype):
        """The kernel's scalars at ``step``, rounded to ``dtype`` as NumPy rounds them (kept for the next parameter)."""
        key = (step, dtype, self.lr, self.beta1, self.beta2, self.eps, self.weight_decay)
        if self.__dict__.get("_scalars_key") != key:
            t = dtype.type
            w1 = 1.0 - self.beta1
            decay = self.weight_decay if self._decoupled else 0.0
            coupled = 0.0 if self._decoupled else self.weight_decay
            self._scalars_cache = scalars = (
                t(1.0 - self.lr * decay),
                t(coupled),
                t(w1),
                t(1.0 - w1),
                t(self.beta2),
                t(1.0 - self.beta2),
                t(math.sqrt(1.0 - self.beta2**step)),
                t(self.eps),
                t(self.lr / (1.0 - self.beta1**step)),
                w1 >= 0.5,
            )
            self._scalars_key = key
            return scalars
        return self._scalars_cache


def _fused(*arrays):
    """Whether the one-pass kernel applies: C-contiguous arrays of one float32 or float64 dtype."""
    dtype = arrays[0].dtype
    return dtype in _KERNEL_DTYPES and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays)


_KERNEL_DTYPES = V.FLOAT_DTYPES  # the dtypes the Numba kernel is compiled for


class AdamW(Adam):
    """AdamW, as ``torch.optim.AdamW``: decoupled weight decay ``p *= 1 - lr wd``
    before the Adam step.

    Parameters
    ----------
    params : mapping of str to ndarray
        The arrays to update in place, by name (e.g. ``model.parameters()``).
    lr : float, default 0.001
        Learning rate, > 0.
    betas : (float, float), default (0.9, 0.999)
        Decay rates of the first and second moment estimates, each in [0, 1).
    eps : float, default 1e-8
        Added to the denominator for numerical stability. 0 is allowed: where
        the second moment is 0 the update is then NaN or inf, as in torch.
    weight_decay : float, default 0.01
        Decoupled weight decay: ``p *= 1 - lr * weight_decay`` before each step.
    """

    _decoupled = True

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
