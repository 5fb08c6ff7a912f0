"""GATv2GraphClassifier: one label per graph, for lists of small graphs."""

from __future__ import annotations

import numpy as np

from ..data import GraphDataset
from ..training import train
from ..training.evaluation import EVAL_BATCH_SIZE
from .base import TU_DEFAULTS as D
from .base import (
    VALIDATION_FRACTION,
    GATv2Estimator,
    check_consistent_length,
    check_is_fitted,
    stratified_split,
)
from .inputs import graph_items

__all__ = ["GATv2GraphClassifier"]

class GATv2GraphClassifier(GATv2Estimator):
    """Graph classification with a GATv2 network and a readout, as a scikit-learn classifier.

    ``X`` is a list of graphs, each an item ``(graph, x)`` or ``(graph, x,
    edge_attr)`` (a :class:`~gatfast.data.GraphDataset` is such a sequence),
    ``y`` one label per graph. scikit-learn's splitters index lists, so
    ``cross_val_score``, ``GridSearchCV`` and ``train_test_split`` split the
    graphs; ``clone``, ``get_params``/``set_params`` and pickling work as for
    any estimator. The defaults are the TU recipe
    (``TrainConfig.preset("tu")``: 3 layers of 4 heads x 16 channels, ELU,
    sum pooling, Adam with lr 0.01 and weight decay 1e-4, 300 epochs).

    Parameters
    ----------
    layers, hidden, heads, activation, dropout, attention_dropout, residual, readout : see TrainConfig
        The network (:class:`~gatfast.TrainConfig` fields of those names);
        ``readout`` is ``"sum"``, ``"mean"`` or ``"max"``.
    attention_activation, root_weight, fill_value : see TrainConfig
        GAT+ options and the self-loop edge attributes (``TrainConfig``).
    optimizer, lr, weight_decay, momentum, nesterov : see TrainConfig
        The optimizer (``TrainConfig``).
    epochs, patience, batch_size, clip_norm, theta_r : see TrainConfig
        Training (``TrainConfig``; ``batch_size`` graphs per step).
    validation_fraction : float or None, default 0.1
        Share of the graphs of ``fit`` held out (stratified, drawn with
        ``seed``) for model selection and early stopping, as ``gatfast
        train --folds`` does. None or 0: select on the training graphs.
    seed : int, default 0
        Initialisation, dropout, batch order and the validation split.
    dtype : {"float32", "float64"}, default "float32"
        Floating-point type of the network and its computations.
    threads : int, optional
        Numba threads while fitting and predicting (None: all cores).
    verbose : bool, default False
        Print progress (``TrainConfig.quiet = not verbose``).

    Attributes
    ----------
    model_ : GATv2Network
        The trained network (best validation epoch).
    classes_ : ndarray
        The sorted class labels seen in ``fit``.
    history_ : list of dict
        Per-epoch loss and metrics.
    n_iter_ : int
        Epochs run.
    best_epoch_ : int
        The epoch whose parameters were kept.
    config_ : TrainConfig
        The options of the run.

    Notes
    -----
    ``X`` is not a 2-D array, so the estimator declares
    ``input_tags.two_d_array = False``, and ``check_estimator`` (which
    feeds random matrices) skips it; ``tests/test_sklearn.py`` runs the
    API checks that do not need such data on it directly.

    Examples
    --------
    >>> from sklearn.model_selection import cross_val_score
    >>> from gatfast import GATv2GraphClassifier
    >>> from gatfast.data import load_dataset
    >>> mutag = load_dataset("mutag")
    >>> clf = GATv2GraphClassifier(epochs=5)
    >>> scores = cross_val_score(clf, mutag, mutag.y, cv=3)     # doctest: +SKIP
    """

    _preset = "tu"

    def __init__(
        self,
        *,
        layers=D.layers,
        hidden=D.hidden,
        heads=D.heads,
        activation=D.activation,
        dropout=D.dropout,
        attention_dropout=D.attention_dropout,
        residual=D.residual,
        readout=D.readout,
        attention_activation=D.attention_activation,
        root_weight=D.root_weight,
        fill_value=D.fill_value,
        optimizer=D.optimizer,
        lr=D.lr,
        weight_decay=D.weight_decay,
        momentum=D.momentum,
        nesterov=D.nesterov,
        epochs=D.epochs,
        patience=D.patience,
        batch_size=D.batch_size,
        clip_norm=D.clip_norm,
        theta_r=D.theta_r,
        validation_fraction=VALIDATION_FRACTION,
        seed=D.seed,
        dtype=D.dtype,
        threads=D.threads,
        verbose=False,
    ):
        self.layers = layers
        self.hidden = hidden
        self.heads = heads
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.residual = residual
        self.readout = readout
        self.attention_activation = attention_activation
        self.root_weight = root_weight
        self.fill_value = fill_value
        self.optimizer = optimizer
        self.lr = lr
        self.weight_decay = weight_decay
        self.momentum = momentum
        self.nesterov = nesterov
        self.epochs = epochs
        self.patience = patience
        self.batch_size = batch_size
        self.clip_norm = clip_norm
        self.theta_r = theta_r
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.dtype = dtype
        self.threads = threads
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False  # X is a list of graphs
        return tags

    def _config(self):
        if self.readout is None:
            raise ValueError("readout must be 'sum', 'mean' or 'max' (a graph classifier pools), got None")
        return super()._config()

    def fit(self, X, y):
        """Train on the graphs ``X`` and their labels ``y``.

        Parameters
        ----------
        X : sequence of (graph, x) or (graph, x, edge_attr), or GraphDataset
            The graphs: CSR by target, node features, edge features in CSR order.
        y : array_like, shape (len(X),)
            One label per graph (any sortable values).

        Returns
        -------
        self : GATv2GraphClassifier
            The fitted estimator.

        Raises
        ------
        TypeError, ValueError
            Bad parameters or items (named), fewer than two classes.
        TrainingDiverged
            The loss or the parameters became NaN/inf; a previous fit is kept.
        """
        config = self._config()
        classes, codes = self._labels(y)
        graphs, xs, attrs = graph_items(X, config.numpy_dtype)
        check_consistent_length(graphs, codes)
        ds = GraphDataset(name="GATv2GraphClassifier", graphs=graphs, xs=xs, y=codes, num_classes=int(classes.size),
                          task="graph_classification", edge_attrs=attrs)
        train_idx, val_idx = stratified_split(codes, self.validation_fraction, config.seed)
        result = train(ds, config, splits={"train": train_idx, "val": val_idx})
        self._fitted(result, classes, config)
        return self

    def _logits(self, X):
        check_is_fitted(self)
        net = self.model_
        graphs, xs, attrs = graph_items(X, net.dtype, net.in_features, net.edge_dim)
        ds = GraphDataset(name="X", graphs=graphs, xs=xs, y=np.zeros(len(graphs), np.int64),
                          num_classes=len(self.classes_), edge_attrs=attrs)
        out = []
        for start in range(0, len(graphs), EVAL_BATCH_SIZE):
            batch = ds.batch(np.arange(start, min(start + EVAL_BATCH_SIZE, len(graphs))))
            out.append(self._outputs(batch.graph, batch.x, batch.graph_ptr, edge_attr=batch.edge_attr))
        return np.concatenate(out, axis=0)

    def decision_function(self, X):
        """Compute the scores per graph: the logit difference with two classes, else the logits.

        Parameters
        ----------
        X : sequence of (graph, x) or (graph, x, edge_attr), or GraphDataset
            The graphs: CSR by target, node features, edge features in CSR order.

        Returns
        -------
        ndarray, shape (n,) with two classes, else (n, n_classes)
            Positive values favour ``classes_[1]`` with two classes.
        """
        return self._scores(self._logits(X))

    def predict_proba(self, X):
        """Class probabilities per graph (softmax of the logits), columns as ``classes_``.

        Parameters
        ----------
        X : sequence of (graph, x) or (graph, x, edge_attr), or GraphDataset
            The graphs: CSR by target, node features, edge features in CSR order.

        Returns
        -------
        ndarray of float64, shape (n, n_classes)
            Columns in the order of ``classes_``.
        """
        return self._softmax(self._logits(X))

    def predict(self, X):
        """Predicted label per graph.

        Parameters
        ----------
        X : sequence of (graph, x) or (graph, x, edge_attr), or GraphDataset
            The graphs: CSR by target, node features, edge features in CSR order.

        Returns
        -------
        ndarray, shape (n,)
            Values of ``classes_``.
        """
        logits = self._logits(X)  # raises first when not fitted
        return self.classes_[np.argmax(logits, axis=1)]
