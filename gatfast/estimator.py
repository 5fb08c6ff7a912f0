"""Deprecated: moved to ``gatfast.estimators`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.estimators import GATv2Classifier

__all__ = ["GATv2Classifier"]

warnings.warn(
    "gatfast.estimator is deprecated and will be removed in gatfast 0.3; import from gatfast.estimators instead",
    FutureWarning,
    stacklevel=2,
)
