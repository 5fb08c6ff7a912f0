"""Deprecated: moved to ``gatfast.diagnostics.pitfall`` (this alias goes away in gatfast 0.3)."""

import warnings

from gatfast.diagnostics.pitfall import (
    PITFALL_ARCHS,
    PITFALL_VARIANTS,
    PitfallResult,
    pitfall_baselines,
    run_pitfall,
)

__all__ = ["PITFALL_ARCHS", "PITFALL_VARIANTS", "PitfallResult", "pitfall_baselines", "run_pitfall"]

warnings.warn(
    "gatfast.experiments is deprecated and will be removed in gatfast 0.3; import from gatfast.diagnostics.pitfall instead",
    FutureWarning,
    stacklevel=2,
)
