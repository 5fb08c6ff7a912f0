"""Deprecated: moved to ``gatfast.layers`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.layers import ParamDict

__all__ = ["ParamDict"]

warnings.warn(
    "gatfast.params is deprecated and will be removed in gatfast 0.3; import from gatfast.layers instead",
    FutureWarning,
    stacklevel=2,
)
