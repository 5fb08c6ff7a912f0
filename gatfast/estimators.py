"""A scikit-learn-style GATv2 node classifier."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from . import _runtime
from . import _validate as V
from .data import NodeDataset
from .models import GATv2Network
from .optim import make_optimizer
from .training import fit

__all__ = ["GATv2Classifier"]


class GATv2Classifier:
    """Semi-supervised node classification with a GATv2 network.

    Parameters are the standard GAT recipe by default (2 layers, 8 heads of
    8 hidden channels, ELU, dropout 0.6, Adam with lr 0.005 and weight
    decay 5e-4). Learned state ends with an underscore.

    Attributes
    ----------
    model_ : GATv2Network
        The trained network (best validation epoch).
    classes_ : ndarray
        The sorted class labels seen in ``fit``.
    n_features_in_ : int
    history_ : list of dict
        Per-epoch loss and metrics.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gatfast import GATv2Classifier
    >>> from gatfast.data import load_karate
    >>> ds = load_karate()
    >>> clf = GATv2Classifier(epochs=30, dropout=0.0, attention_dropout=0.0)
    >>> clf = clf.fit(ds.graph, ds.x, ds.y)
    >>> clf.predict(ds.graph, ds.x).shape
    (34,)
    """

    def __init__(
        self,
        hidden=8,
        heads=8,
        num_layers=2,
        out_heads=1,
        activation="elu",
        dropout=0.6,
        attention_dropout=0.6,
        residual=False,
        optimizer="adam",
        lr=0.005,
        weight_decay=5e-4,
        epochs=300,
        patience=100,
        theta_r="linear",
        dtype=np.float32,
        seed=0,
        threads=None,
        verbose=False,
    ):
        self.hidden = hidden
        self.heads = heads
        self.num_layers = num_layers
        self.out_heads = out_heads
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.residual = residual
        self.optimizer = optimizer
        self.lr = lr
        self.weight_decay = weight_decay
        self.epochs = epochs
        self.patience = patience
        self.theta_r = theta_r
        self.dtype = dtype
        self.seed = seed
        self.threads = threads
        self.verbose = verbose

    def get_params(self, deep=True):
        """Constructor parameters (scikit-learn protocol)."""
        names = self.__init__.__code__.co_varnames[1 : self.__init__.__code__.co_argcount]
        return {k: getattr(self, k) for k in names}

    def set_params(self, **params):
        valid = self.get_params()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"invalid parameter {key!r} for GATv2Classifier; valid: {sorted(valid)}")
            setattr(self, key, value)
        return self

    def fit(self, graph, x, y, mask=None, val_mask=None):
        """Train on the labelled nodes.

        Parameters
        ----------
        graph : CSRGraph or scipy.sparse matrix (CSR by target)
        x : ndarray or scipy.sparse matrix, shape (num_nodes, num_features)
        y : array_like, shape (num_nodes,)
            Labels; entries outside ``mask`` are ignored (may be anything).
        mask : bool array, optional
            Nodes whose labels are used for training (default: all).
        val_mask : bool array, optional
            Nodes for model selection and early stopping (default: ``mask``).
        """
        graph = V.as_graph(graph)
        n = graph.num_nodes
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must have shape ({n},) (one label per node), got {y.shape}")
        mask = self._mask(mask, "mask", n)
        val_mask = mask if val_mask is None else self._mask(val_mask, "val_mask", n)
        # learned state is assigned only once training succeeded: a failed
        # refit must not leave a new classes_ next to the old model_
        known = mask | val_mask
        classes = np.unique(y[known])
        if classes.size < 2:
            raise ValueError("y must contain at least two classes among the masked nodes")
        codes = np.zeros(n, dtype=np.int64)
        codes[known] = np.searchsorted(classes, y[known])
        dtype = V.check_dtype(self.dtype)
        if not sp.issparse(x):
            x = np.asarray(x)
        if x.ndim != 2:
            raise ValueError(f"x must be 2-D (num_nodes, num_features), got shape {x.shape}")
        x = V.check_features(x, "x", n, x.shape[1], dtype)
        ds = NodeDataset(
            name="estimator", graph=graph, x=x, y=codes, train_mask=mask, val_mask=val_mask,
            test_mask=np.zeros(n, bool), num_classes=int(classes.size), task="node_classification",
        )
        V.check_network_size(x.shape[1], self.hidden, ds.num_classes, self.num_layers, self.heads, self.out_heads)
        model = GATv2Network(
            x.shape[1], self.hidden, ds.num_classes, num_layers=self.num_layers, heads=self.heads,
            out_heads=self.out_heads, activation=self.activation, dropout=self.dropout,
            attention_dropout=self.attention_dropout, residual=self.residual, dtype=dtype, seed=self.seed,
        )
        opt = make_optimizer(self.optimizer, model.parameters(), self.lr, self.weight_decay)
        with _runtime.threads(self.threads):
            result = fit(model, ds, opt, epochs=self.epochs, patience=self.patience, theta_r=self.theta_r,
                         seed=self.seed, quiet=not self.verbose)
        self.model_ = result.model
        self.classes_ = classes
        self.n_features_in_ = x.shape[1]
        self.history_ = result.history
        return self

    @staticmethod
    def _mask(mask, name, n):
        if mask is None:
            return np.ones(n, dtype=bool)
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (n,):
            raise ValueError(f"{name} must be a boolean array of shape ({n},), got {mask.dtype} {mask.shape}")
        if not mask.any():
            raise ValueError(f"{name} must select at least one node")
        return mask

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            raise ValueError("this GATv2Classifier is not fitted yet: call fit(graph, x, y) first")

    def decision_function(self, graph, x):
        """Logits, shape (num_nodes, n_classes)."""
        self._check_fitted()
        graph = V.as_graph(graph)
        x = V.check_features(x, "x", graph.num_nodes, self.n_features_in_, V.check_dtype(self.dtype))
        with _runtime.threads(self.threads):
            return self.model_.output(graph, x)

    def predict_proba(self, graph, x):
        """Class probabilities per node (softmax of the logits)."""
        logits = self.decision_function(graph, x)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, graph, x):
        """Predicted class label per node."""
        logits = self.decision_function(graph, x)  # raises first when not fitted
        return self.classes_[np.argmax(logits, axis=1)]

    def score(self, graph, x, y, mask=None):
        """Accuracy on the nodes in ``mask`` (default: all)."""
        pred = self.predict(graph, x)
        y = np.asarray(y)
        if y.shape != pred.shape:
            raise ValueError(f"y must have shape {pred.shape} (one label per node), got {y.shape}")
        mask = self._mask(mask, "mask", y.shape[0])
        return float(np.mean(pred[mask] == y[mask]))
