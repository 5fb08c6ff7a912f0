"""matplotlib, imported only when a plot is asked for (the ``plot`` extra)."""

from __future__ import annotations

__all__ = ["pyplot"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or ImportError with the install hint."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:  # optional extra
        raise ImportError("plotting needs matplotlib: pip install 'gatfast[plot]'") from exc
    return plt
