"""torch as an optional dependency: import it on demand with a clear message, move arrays across."""

from __future__ import annotations

import numpy as np

__all__ = ["require_torch", "tensor_or_array", "to_numpy"]


def require_torch(what, geometric=False):
    """Import and return ``torch`` (and check ``torch_geometric``), or raise an ImportError with the fix.

    Parameters
    ----------
    what : str
        What needs it, for the message.
    geometric : bool, default False
        Also require torch_geometric.

    Returns
    -------
    module
        ``torch``.

    Raises
    ------
    ImportError
        One line naming ``what`` and ``pip install gatfast[crosscheck]``.
    """
    try:
        import torch

        if geometric:
            import torch_geometric  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{what} needs PyTorch and PyTorch Geometric ({exc.name} is missing): "
                          "pip install gatfast[crosscheck]") from None
    return torch


def to_numpy(value):
    """A torch tensor (any device, grad or not) or array-like as a NumPy array.

    Parameters
    ----------
    value : torch.Tensor or array_like

    Returns
    -------
    ndarray
        A copy for a tensor; ``np.asarray(value)`` otherwise.
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy().copy()
    return np.asarray(value)


def tensor_or_array(array):
    """A copy of ``array`` as a torch tensor, or as a NumPy array when torch is not installed.

    Parameters
    ----------
    array : ndarray

    Returns
    -------
    torch.Tensor or ndarray
    """
    try:
        import torch
    except ImportError:
        return np.array(array)
    return torch.from_numpy(np.array(array))
