"""Deprecated: moved to ``gatfast.models`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.models import READOUTS, GATv2Network, NetworkCache

__all__ = ["GATv2Network", "NetworkCache", "READOUTS"]

warnings.warn(
    "gatfast.model is deprecated and will be removed in gatfast 0.3; import from gatfast.models instead",
    FutureWarning,
    stacklevel=2,
)
