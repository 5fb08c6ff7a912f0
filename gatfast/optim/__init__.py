"""Optimizers that update named parameter arrays in place (``torch.optim`` semantics), and clipping."""

from .. import _validate as V
from .adam import Adam, AdamW
from .base import Optimizer
from .clip import clip_grad_norm
from .sgd import SGD

__all__ = ["OPTIMIZERS", "SGD", "Adam", "AdamW", "Optimizer", "clip_grad_norm", "make_optimizer"]

OPTIMIZERS = ("adam", "adamw", "sgd")


def make_optimizer(name, params, lr, weight_decay=0.0, momentum=0.0, nesterov=False):
    """Build an optimizer by name.

    Parameters
    ----------
    name : {"adam", "adamw", "sgd"}
    params : mapping of str to ndarray
        The arrays to update in place (e.g. ``model.parameters()``).
    lr : float
        Learning rate.
    weight_decay : float, default 0
        L2 penalty (decoupled for AdamW).
    momentum : float, default 0
        SGD only.
    nesterov : bool, default False
        SGD only.

    Returns
    -------
    Optimizer
        A new :class:`Adam`, :class:`AdamW` or :class:`SGD` over ``params``.
    """
    V.check_choice(name, "optimizer", set(OPTIMIZERS))
    if name == "adam":
        return Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return AdamW(params, lr=lr, weight_decay=weight_decay)
    return SGD(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
