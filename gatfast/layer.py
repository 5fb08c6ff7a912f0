"""Deprecated: moved to ``gatfast.layers`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.layers import ROOT_WEIGHTS, THETA_R_FORMS, GATv2Layer, LayerCache, glorot

__all__ = ["GATv2Layer", "LayerCache", "ROOT_WEIGHTS", "THETA_R_FORMS", "glorot"]

warnings.warn(
    "gatfast.layer is deprecated and will be removed in gatfast 0.3; import from gatfast.layers instead",
    FutureWarning,
    stacklevel=2,
)
