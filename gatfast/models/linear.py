"""A dense linear layer with closed-form gradients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import _validate as V
from ..kernels import column_sum
from ..layers import ParamDict, glorot

__all__ = ["Linear", "LinearCache"]


@dataclass
class LinearCache:
    """Input and parameters seen by :meth:`Linear.forward`.

    Attributes
    ----------
    x : ndarray or scipy.sparse matrix
        The validated input.
    params : dict of str to ndarray
        The parameters used (the arrays, not copies).
    """

    x: object
    params: dict


class Linear:
    """Dense layer ``y = x @ weight.T + bias``.

    Parameters
    ----------
    in_features, out_features : int
        Input and output sizes (>= 1).
    bias : bool, default True
        Learn an additive bias.
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the parameters.
    seed : int or numpy.random.Generator, optional
        Seed of the initialisation: glorot weight, zero bias (PyG's
        ``Linear(weight_initializer="glorot")``).

    Attributes
    ----------
    params : ParamDict
        ``weight`` (out_features, in_features) and ``bias`` (out_features,).
    """

    def __init__(self, in_features, out_features, bias=True, dtype=np.float32, seed=None):
        self.in_features = V.check_int(in_features, "in_features", 1)
        self.out_features = V.check_int(out_features, "out_features", 1)
        self.bias = bool(bias)
        self.dtype = V.check_dtype(dtype)
        self._rng = np.random.default_rng(seed)
        shapes = {"weight": (self.out_features, self.in_features)}
        if self.bias:
            shapes["bias"] = (self.out_features,)
        self.params = ParamDict(shapes, self.dtype)
        self.reset_parameters()

    def reset_parameters(self):
        """Glorot weight, zero bias."""
        self.params["weight"] = glorot(self._rng, (self.out_features, self.in_features), self.dtype)
        if self.bias:
            self.params["bias"] = np.zeros(self.out_features, self.dtype)

    def __repr__(self):
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias})"

    def get_config(self):
        """Return the constructor arguments, except ``seed``.

        Returns
        -------
        dict
            Plain Python values: ``Linear(**config)`` builds a layer of the same shape.
        """
        return {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "dtype": self.dtype.name,
        }

    def forward(self, x):
        """Compute ``y = x @ weight.T + bias``.

        Parameters
        ----------
        x : ndarray or scipy.sparse matrix, shape (n, in_features)
            The input; a sparse input is multiplied as sparse.

        Returns
        -------
        y : ndarray, shape (n, out_features)
            The output.
        cache : LinearCache
            What :meth:`backward` needs.
        """
        n = x.shape[0] if sp.issparse(x) else (np.shape(x)[0] if np.ndim(x) >= 1 else 0)
        x = V.check_features(x, "x", n, self.in_features, self.dtype)
        self.params.check_finite()
        params = dict(self.params)
        y = np.ascontiguousarray(x @ params["weight"].T, dtype=self.dtype)
        if self.bias:
            y += params["bias"]
        return y, LinearCache(x, params)

    __call__ = forward

    def backward(self, cache, grad):
        """Compute the gradients of a loss ``L`` given ``grad = dL/dy``.

        Parameters
        ----------
        cache : LinearCache
            From :meth:`forward`.
        grad : ndarray, shape (n, out_features)
            The gradient of the loss with respect to ``y``.

        Returns
        -------
        grads : dict
            ``weight``, ``bias`` (if any) and ``x`` (None for sparse input).
        """
        if not isinstance(cache, LinearCache):
            raise TypeError(f"cache must be the LinearCache returned by forward, got {type(cache).__name__}")
        x = cache.x
        grad = V.check_dense(grad, "grad", (x.shape[0], self.out_features), self.dtype)
        grads = {}
        if sp.issparse(x):
            grads["weight"] = np.ascontiguousarray((x.T @ grad).T, dtype=self.dtype)
        else:
            grads["weight"] = grad.T @ x
        if self.bias:
            grads["bias"] = column_sum(grad)
        grads["x"] = None if sp.issparse(x) else grad @ cache.params["weight"]
        return grads
