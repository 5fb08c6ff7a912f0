"""GATv2Classifier: node classification on one graph, with scikit-learn's splitters."""

from __future__ import annotations

import warnings

import numpy as np

from ..data import NodeDataset
from ..training import train
from .base import GAT_DEFAULTS as D
from .base import (
    VALIDATION_FRACTION,
    GATv2Estimator,
    check_consistent_length,
    check_is_fitted,
    stratified_split,
)
from .inputs import check_node_ids, node_inputs
from .legacy import LegacyNodeCalls, is_graph

__all__ = ["GATv2Classifier"]


class GATv2Classifier(LegacyNodeCalls, GATv2Estimator):
    """Node classification with a GATv2 network, as a scikit-learn classifier.

    **Input convention.** The setting is transductive: one graph, some of
    whose nodes are labelled. The graph, its node features and its edge
    features are *parameters* of the estimator (the data it is bound to);
    ``X`` holds **node ids**, shape ``(n, 1)`` or ``(n,)``, and ``y`` their
    labels. ``fit(X, y)`` trains on those nodes' labels with the whole graph
    (every node's features take part in the message passing);
    ``predict(X)`` / ``predict_proba(X)`` / ``decision_function(X)`` answer
    for the nodes ``X``, and ``score(X, y)`` is their accuracy. So
    scikit-learn's splitters split the labelled *nodes*: ``cross_val_score``,
    ``GridSearchCV``, ``StratifiedKFold`` and ``train_test_split`` work
    unchanged, and ``clone``, ``get_params``/``set_params`` and pickling
    carry the graph along (a cloned estimator shares the immutable
    :class:`~gatfast.CSRGraph`; the feature arrays are copied).

    Why parameters and not fit-time arguments: scikit-learn slices every
    fit parameter whose length equals the number of samples, so features
    passed to ``fit`` would be cut to the training rows whenever all nodes
    are labelled; and ``predict`` receives no fit parameters in
    cross-validation.

    Parameters
    ----------
    graph : CSRGraph or scipy.sparse matrix, optional
        The graph, CSR by target (a scipy matrix is read with rows =
        targets). Required by ``fit``.
    node_features : ndarray or scipy.sparse matrix, shape (num_nodes, F), optional
        Features of every node (sparse stays sparse). Required by ``fit``.
    edge_attr : ndarray, shape (graph.nnz, D), optional
        Edge features in the graph's CSR order (``graph`` must then be a
        CSRGraph, e.g. from ``CSRGraph.from_edge_index(..., edge_attr=...)``).
    layers, hidden, heads, out_heads, activation, dropout, attention_dropout, residual : see TrainConfig
        The network (:class:`~gatfast.TrainConfig` fields of those names;
        defaults: the GAT recipe, 2 layers of 8 heads x 8 channels, ELU,
        dropout 0.6).
    attention_activation, root_weight, fill_value : see TrainConfig
        GAT+ options and the self-loop edge attributes (``TrainConfig``).
    optimizer, lr, weight_decay, momentum, nesterov, epochs, patience, clip_norm, theta_r : see TrainConfig
        Training (``TrainConfig``; Adam, lr 0.005, weight decay 5e-4, 300
        epochs, patience 100).
    validation_fraction : float or None, default 0.1
        Share of the labelled nodes of ``fit`` held out (stratified by class,
        drawn with ``seed``) for model selection and early stopping: the
        parameters of the best validation epoch are kept, as in the GAT
        recipe. 10 % like ``MLPClassifier`` and ``gatfast train --folds``.
        None or 0: train on all of them and select on the training nodes.
    seed : int, default 0
        Initialisation, dropout and the validation split.
    dtype : {"float32", "float64"}, default "float32"
        Floating-point type of the network and its computations.
    threads : int, optional
        Numba threads while fitting and predicting (None: all cores).
    verbose : bool, default False
        Print progress (``TrainConfig.quiet = not verbose``).
    num_layers : int, optional
        Deprecated alias of ``layers`` (FutureWarning; removed in gatfast 0.3).

    Attributes
    ----------
    model_ : GATv2Network
        The trained network (best validation epoch).
    classes_ : ndarray
        The sorted class labels seen in ``fit``.
    n_features_in_ : int
        1, the column of node ids (the node feature count is
        ``model_.in_features``).
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
    ``decision_function`` follows scikit-learn: the logit difference
    (shape ``(n,)``, positive for ``classes_[1]``) with two classes, the
    logits ``(n, n_classes)`` otherwise. Node ids may repeat in ``X``
    (bootstrap samples) if their labels agree.

    The deprecated call ``fit(graph, x, y, mask=..., val_mask=...)`` and
    ``predict(graph, x)`` etc. still work, with a FutureWarning, until
    gatfast 0.3 (a graph followed by more positional arguments tells them
    apart).

    **scikit-learn's checks.** ``check_estimator`` passes except for the
    checks that build their own data, a random float feature matrix, which
    this ``X`` (node ids) refuses before anything is tested:
    check_classifier_data_not_an_array, check_classifiers_classes,
    check_classifiers_train, check_decision_proba_consistency,
    check_dict_unchanged, check_dont_overwrite_parameters,
    check_dtype_object, check_estimators_dtypes,
    check_estimators_fit_returns_self, check_estimators_nan_inf,
    check_estimators_overwrite_params, check_estimators_pickle,
    check_f_contiguous_array_estimator, check_fit2d_1feature,
    check_fit2d_predict1d, check_fit_check_is_fitted, check_fit_idempotent,
    check_fit_score_takes_y, check_methods_sample_order_invariance,
    check_methods_subset_invariance, check_n_features_in,
    check_n_features_in_after_fitting, check_pipeline_consistency,
    check_readonly_memmap_input, check_supervised_y_2d
    (:data:`gatfast.estimators.checks.NODE_EXPECTED_FAILED_CHECKS`).
    ``tests/test_sklearn.py`` asserts that exactly these fail, and tests
    their properties on node ids instead (idempotent fit, subset and order
    invariance, pickling, unchanged parameters and ``__dict__``, dtypes,
    read-only and non-contiguous ids, pipelines, 2-D ``y``).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import cross_val_score
    >>> from gatfast import GATv2Classifier
    >>> from gatfast.data import load_karate
    >>> ds = load_karate()
    >>> clf = GATv2Classifier(graph=ds.graph, node_features=ds.x, epochs=30, seed=0)
    >>> nodes = np.arange(ds.num_nodes).reshape(-1, 1)            # X: node ids
    >>> scores = cross_val_score(clf, nodes, ds.y, cv=3)          # splits the nodes
    >>> clf.fit(nodes[::2], ds.y[::2]).predict(nodes[1::2]).shape
    (17,)
    """

    def __init__(
        self,
        *,
        graph=None,
        node_features=None,
        edge_attr=None,
        layers=D.layers,
        hidden=D.hidden,
        heads=D.heads,
        out_heads=D.out_heads,
        activation=D.activation,
        dropout=D.dropout,
        attention_dropout=D.attention_dropout,
        residual=D.residual,
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
        clip_norm=D.clip_norm,
        theta_r=D.theta_r,
        validation_fraction=VALIDATION_FRACTION,
        seed=D.seed,
        dtype=D.dtype,
        threads=D.threads,
        verbose=False,
        num_layers=None,
    ):
        self.graph = graph
        self.node_features = node_features
        self.edge_attr = edge_attr
        self.layers = layers
        self.hidden = hidden
        self.heads = heads
        self.out_heads = out_heads
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.residual = residual
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
        self.clip_norm = clip_norm
        self.theta_r = theta_r
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.dtype = dtype
        self.threads = threads
        self.verbose = verbose
        self.num_layers = num_layers

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True  # X holds node ids
        return tags

    # ------------------------------------------------------------------ inputs
    def _config(self):
        config = super()._config()
        if self.num_layers is not None:
            warnings.warn("GATv2Classifier(num_layers=...) is deprecated and will be removed in gatfast 0.3: "
                          "use layers=... (the TrainConfig option)", FutureWarning, stacklevel=4)
            config = config.replace(layers=self.num_layers)
        return config

    def _graph_inputs(self, dtype):
        return node_inputs(self.graph, self.node_features, self.edge_attr, dtype)

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *legacy, mask=None, val_mask=None):
        """Train on the labelled nodes ``X`` with the whole graph.

        Parameters
        ----------
        X : array_like of int, shape (n, 1) or (n,)
            Node ids.
        y : array_like, shape (n,)
            Their labels (any sortable values: ints, strings).
        *legacy, mask, val_mask : optional
            Only for the deprecated ``fit(graph, x, y, mask=None,
            val_mask=None)``.

        Returns
        -------
        self : GATv2Classifier
            The fitted estimator.

        Raises
        ------
        ValueError, TypeError
            Bad parameters (named), missing ``graph``/``node_features``, ids
            outside the graph, fewer than two classes, a node listed twice
            with different labels.
        TrainingDiverged
            The loss or the parameters became NaN/inf; the previous fit (if
            any) is kept.
        """
        if is_graph(X) and legacy:
            return self._legacy_fit(X, y, *legacy, mask=mask, val_mask=val_mask)
        if legacy or mask is not None or val_mask is not None:
            raise TypeError("fit(X, y) takes node ids X and their labels y; extra arguments, mask= and val_mask= "
                            "belong to the deprecated fit(graph, x, y, mask=..., val_mask=...)")
        config = self._config()
        classes, codes = self._labels(y)  # before X: the target's own errors first
        graph, x, edge_attr = self._graph_inputs(config.numpy_dtype)
        ids = check_node_ids(X, graph.num_nodes)
        check_consistent_length(ids, codes)
        n = graph.num_nodes
        node_codes = np.full(n, -1, np.int64)
        node_codes[ids] = codes
        if not np.array_equal(node_codes[ids], codes):
            bad = ids[node_codes[ids] != codes][0]
            raise ValueError(f"X lists node {bad} more than once with different labels")
        nodes = np.unique(ids)
        train_pos, val_pos = stratified_split(node_codes[nodes], self.validation_fraction, config.seed)
        train_mask, val_mask = np.zeros(n, bool), np.zeros(n, bool)
        train_mask[nodes[train_pos]] = True
        val_mask[nodes[val_pos]] = True
        ds = NodeDataset(name="GATv2Classifier", graph=graph, x=x, y=np.maximum(node_codes, 0), train_mask=train_mask,
                         val_mask=val_mask, test_mask=np.zeros(n, bool), num_classes=int(classes.size),
                         edge_attr=edge_attr)
        result = train(ds, config)
        self._fitted(result, classes, config)
        self.n_features_in_ = 1
        return self

    # ------------------------------------------------------------------ predict
    def _node_logits(self, X):
        check_is_fitted(self)
        graph, x, edge_attr = self._graph_inputs(self.model_.dtype)
        ids = check_node_ids(X, graph.num_nodes)
        return self._outputs(graph, x, edge_attr=edge_attr)[ids]

    def decision_function(self, X, *legacy):
        """Compute the scores of the nodes ``X``: the logit difference with two classes, else the logits.

        Parameters
        ----------
        X : array_like of int, shape (n, 1) or (n,)
            Node ids.
        *legacy : optional
            Only for the deprecated ``decision_function(graph, x)``.

        Returns
        -------
        ndarray, shape (n,) with two classes, else (n, n_classes)
            Positive values favour ``classes_[1]`` with two classes.
        """
        if is_graph(X) and legacy:
            return self._legacy_output(X, *legacy)
        return self._scores(self._node_logits(X))

    def predict_proba(self, X, *legacy):
        """Class probabilities of the nodes ``X`` (softmax of the logits).

        Parameters
        ----------
        X : array_like of int, shape (n, 1) or (n,)
            Node ids.
        *legacy : optional
            Only for the deprecated ``predict_proba(graph, x)``.

        Returns
        -------
        ndarray of float64, shape (n, n_classes)
            Columns in the order of ``classes_``.
        """
        if is_graph(X) and legacy:
            return self._softmax(self._legacy_output(X, *legacy))
        return self._softmax(self._node_logits(X))

    def predict(self, X, *legacy):
        """Predicted labels of the nodes ``X``.

        Parameters
        ----------
        X : array_like of int, shape (n, 1) or (n,)
            Node ids.
        *legacy : optional
            Only for the deprecated ``predict(graph, x)``.

        Returns
        -------
        ndarray, shape (n,)
            Values of ``classes_``.
        """
        logits = self._legacy_output(X, *legacy) if is_graph(X) and legacy else self._node_logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

    def score(self, X, y=None, *legacy, sample_weight=None, mask=None):
        """Accuracy on the nodes ``X`` with true labels ``y``.

        Parameters
        ----------
        X : array_like of int, shape (n, 1) or (n,)
            Node ids.
        y : array_like, shape (n,)
            Their true labels.
        *legacy : optional
            Only for the deprecated ``score(graph, x, y, mask=None)``.
        sample_weight : array_like, shape (n,), optional
            Weights of the nodes in the mean.
        mask : optional
            Only for the deprecated call, as ``*legacy``.

        Returns
        -------
        float
            The (weighted) fraction of nodes whose predicted label is ``y``.
        """
        if is_graph(X) and legacy:
            return self._legacy_score(X, y, *legacy, mask=mask)
        return super().score(X, y, sample_weight=sample_weight)
