"""Deprecated: moved to ``gatfast.models`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.models import (
    ACTIVATIONS,
    POOL_MODES,
    Linear,
    LinearCache,
    PoolCache,
    accuracy,
    activation_backward,
    activation_forward,
    apply_dropout,
    dropout_backward,
    dropout_mask,
    global_pool,
    global_pool_backward,
    mse_loss,
    softmax_cross_entropy,
)

__all__ = [
    "ACTIVATIONS",
    "Linear",
    "LinearCache",
    "POOL_MODES",
    "PoolCache",
    "accuracy",
    "activation_backward",
    "activation_forward",
    "apply_dropout",
    "dropout_backward",
    "dropout_mask",
    "global_pool",
    "global_pool_backward",
    "mse_loss",
    "softmax_cross_entropy",
]

warnings.warn(
    "gatfast.nn is deprecated and will be removed in gatfast 0.3; import from gatfast.models instead",
    FutureWarning,
    stacklevel=2,
)
