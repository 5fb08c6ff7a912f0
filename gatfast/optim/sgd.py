"""Stochastic gradient descent, as ``torch.optim.SGD``."""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from .base import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    Parameters
    ----------
    params : mapping of str to ndarray
        The arrays to update in place, by name (e.g. ``model.parameters()``).
    lr : float, default 0.01
        Learning rate, > 0.
    momentum : float, default 0
        Momentum factor, >= 0 (0: plain SGD).
    dampening : float, default 0
        Dampening of the gradient added to the momentum buffer.
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
