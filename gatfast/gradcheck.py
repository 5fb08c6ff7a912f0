"""Deprecated: moved to ``gatfast.diagnostics`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.diagnostics import gradcheck_layer, random_graph

__all__ = ["gradcheck_layer", "random_graph"]

warnings.warn(
    "gatfast.gradcheck is deprecated and will be removed in gatfast 0.3; import from gatfast.diagnostics instead",
    FutureWarning,
    stacklevel=2,
)
