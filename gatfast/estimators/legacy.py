"""The deprecated calls of GATv2Classifier, ``fit(graph, x, y, mask=..., val_mask=...)`` and
``predict(graph, x)`` & co., kept with a FutureWarning until gatfast 0.3."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .. import _validate as V
from ..data import NodeDataset
from ..graph import CSRGraph
from ..training import train
from .base import check_is_fitted

__all__ = ["LegacyNodeCalls", "is_graph"]

_MESSAGE = (
    "GATv2Classifier.{call} is deprecated and will be removed in gatfast 0.3: pass the graph as parameters, "
    "GATv2Classifier(graph=graph, node_features=x), and node ids as X, e.g. {new}"
)


def is_graph(value):
    """Whether ``value`` is a graph, the first argument of the deprecated calls.

    Parameters
    ----------
    value : object

    Returns
    -------
    bool
        True for a CSRGraph or a scipy.sparse matrix.
    """
    return isinstance(value, CSRGraph) or sp.issparse(value)


def _warn(call, new):
    warnings.warn(_MESSAGE.format(call=call, new=new), FutureWarning, stacklevel=4)


def _mask(mask, name, n):
    if mask is None:
        return np.ones(n, dtype=bool)
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (n,):
        raise ValueError(f"{name} must be a boolean array of shape ({n},), got {mask.dtype} {mask.shape}")
    if not mask.any():
        raise ValueError(f"{name} must select at least one node")
    return mask


def _unpack(legacy, names):
    if len(legacy) > len(names):
        raise TypeError(f"too many positional arguments: the deprecated call takes {', '.join(names)}")
    return legacy + (None,) * (len(names) - len(legacy))


class LegacyNodeCalls:
    """The deprecated whole-graph calls, mixed into GATv2Classifier (their behaviour is unchanged)."""

    def _legacy_fit(self, graph, x, *legacy, mask=None, val_mask=None):
        (y,) = _unpack(legacy, ["y"])
        _warn("fit(graph, x, y, mask=..., val_mask=...)", "fit(np.flatnonzero(mask), y[mask])")
        config = self._config()
        graph = V.as_graph(graph)
        n = graph.num_nodes
        if y is None:
            raise TypeError("fit(graph, x, y) needs y")
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must have shape ({n},) (one label per node), got {y.shape}")
        mask = _mask(mask, "mask", n)
        val_mask = mask if val_mask is None else _mask(val_mask, "val_mask", n)
        known = mask | val_mask
        classes = np.unique(y[known])
        if classes.size < 2:
            raise ValueError("y must contain at least two classes among the masked nodes")
        codes = np.zeros(n, dtype=np.int64)
        codes[known] = np.searchsorted(classes, y[known])
        if not sp.issparse(x):
            x = np.asarray(x)
        if x.ndim != 2:
            raise ValueError(f"x must be 2-D (num_nodes, num_features), got shape {x.shape}")
        x = V.check_features(x, "x", n, x.shape[1], config.numpy_dtype)
        ds = NodeDataset(name="estimator", graph=graph, x=x, y=codes, train_mask=mask, val_mask=val_mask,
                         test_mask=np.zeros(n, bool), num_classes=int(classes.size))
        result = train(ds, config)
        self._fitted(result, classes, config)
        self.n_features_in_ = x.shape[1]
        return self

    def _legacy_output(self, graph, *legacy):
        """The logits of every node, shape (num_nodes, n_classes), as the deprecated calls returned."""
        (x,) = _unpack(legacy, ["x"])
        _warn("predict(graph, x) (and predict_proba, decision_function, score)",
              "predict(np.arange(graph.num_nodes))")
        check_is_fitted(self)
        graph = V.as_graph(graph)
        x = V.check_features(x, "x", graph.num_nodes, self.model_.in_features, self.model_.dtype)
        return self._outputs(graph, x)

    def _legacy_score(self, graph, x, *legacy, mask=None):
        (y,) = _unpack(legacy, ["y"])
        logits = self._legacy_output(graph, x)  # raises first when not fitted
        pred = self.classes_[np.argmax(logits, axis=1)]
        y = np.asarray(y)
        if y.shape != pred.shape:
            raise ValueError(f"y must have shape {pred.shape} (one label per node), got {y.shape}")
        mask = _mask(mask, "mask", y.shape[0])
        return float(np.mean(pred[mask] == y[mask]))
