"""Deprecated: moved to ``gatfast.training`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.training import load_checkpoint, save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]

warnings.warn(
    "gatfast.checkpoint is deprecated and will be removed in gatfast 0.3; import from gatfast.training instead",
    FutureWarning,
    stacklevel=2,
)
