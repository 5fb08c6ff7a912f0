"""What the two scikit-learn classifiers share: options from TrainConfig, labels,
the validation split, probabilities. Importing this module imports scikit-learn."""

from __future__ import annotations

import numpy as np

from .. import _runtime
from ..training import TrainConfig

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_consistent_length, check_is_fitted, column_or_1d
except ImportError:
    raise ImportError("gatfast's estimators need scikit-learn: pip install gatfast[sklearn]", name="sklearn") from None

__all__ = [
    "GAT_DEFAULTS",
    "GATv2Estimator",
    "TU_DEFAULTS",
    "VALIDATION_FRACTION",
    "check_consistent_length",
    "check_is_fitted",
    "stratified_split",
]

#: The defaults of the node classifier (the GAT recipe) and of the graph
#: classifier (the TU recipe): the estimators' signatures read them from
#: here, so every default has one home, :class:`~gatfast.TrainConfig`.
GAT_DEFAULTS = TrainConfig.preset("gat")
TU_DEFAULTS = TrainConfig.preset("tu")

_FIELDS = frozenset(TrainConfig.options())

#: The default validation_fraction: 10 % of the labelled samples for model
#: selection and early stopping, as MLPClassifier and ``gatfast train
#: --folds`` hold out.
VALIDATION_FRACTION = 0.1


def stratified_split(codes, fraction, seed):
    """Positions ``(train, val)`` into ``codes``: about ``fraction`` of each class for validation.

    Each class keeps at least one training sample; ``round(fraction * n_c)``
    of its ``n_c`` samples go to validation, drawn with ``seed``. ``fraction``
    None or 0 gives no validation samples.

    Parameters
    ----------
    codes : ndarray of int, shape (n,)
    fraction : float or None
    seed : int

    Returns
    -------
    train, val : ndarray of int64
        Sorted positions.
    """
    codes = np.asarray(codes)
    if not fraction:
        return np.arange(codes.size), np.zeros(0, np.int64)
    rng = np.random.default_rng(seed)
    val = []
    for c in np.unique(codes):
        members = rng.permutation(np.flatnonzero(codes == c))
        val.append(members[: min(int(round(fraction * members.size)), members.size - 1)])
    val = np.sort(np.concatenate(val)).astype(np.int64)
    return np.setdiff1d(np.arange(codes.size), val).astype(np.int64), val


class GATv2Estimator(ClassifierMixin, BaseEstimator):
    """The machinery of :class:`GATv2Classifier` and :class:`GATv2GraphClassifier` (not for direct use).

    A subclass sets ``_preset`` (the :class:`~gatfast.TrainConfig` preset
    its defaults come from) and declares its parameters in ``__init__``;
    parameters named like a ``TrainConfig`` field are that field.
    """

    _preset = "gat"

    def _config(self):
        """The :class:`TrainConfig` of the parameters (TypeError/ValueError naming the parameter)."""
        values = {k: v for k, v in self.get_params(deep=False).items() if k in _FIELDS}
        if not isinstance(self.verbose, (bool, np.bool_)):
            raise TypeError(f"verbose must be True or False, got {type(self.verbose).__name__}")
        fraction = self.validation_fraction
        if fraction is not None:
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.integer, np.floating)):
                raise TypeError(f"validation_fraction must be None or a number, got {type(fraction).__name__}")
            if not 0.0 <= fraction < 1.0:
                raise ValueError(f"validation_fraction must be in [0, 1) (or None), got {fraction}")
        return TrainConfig.preset(self._preset, **values, quiet=not self.verbose)

    def _labels(self, y):
        """``(classes, codes)`` of ``y``: sklearn's checks and messages for targets."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(f"y must contain at least two classes, got {classes.size} class: {classes.tolist()!r}")
        return classes, codes.astype(np.int64)

    def _fitted(self, result, classes, config):
        """Store the learned state of a successful fit (nothing is assigned before it succeeded)."""
        self.model_ = result.model
        self.classes_ = classes
        self.history_ = result.history
        self.n_iter_ = int(result.metrics["epochs"])
        self.best_epoch_ = int(result.metrics["best_epoch"])
        self.config_ = config

    def _outputs(self, *args, **kwargs):
        """``model_.output(...)`` with the estimator's thread count."""
        with _runtime.threads(self.threads):
            return self.model_.output(*args, **kwargs)

    @staticmethod
    def _scores(logits):
        """sklearn's decision_function: the logit difference for two classes, the logits otherwise."""
        return logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits

    @staticmethod
    def _softmax(logits):
        z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)
