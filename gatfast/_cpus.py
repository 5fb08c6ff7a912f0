"""The CPUs this process may use; apart from ``_runtime`` so that asking imports no Numba."""

from __future__ import annotations

import os

__all__ = ["usable_cpus"]


def usable_cpus():
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
