"""Functions the package root registers for a floor that may not import theirs.

``training`` sits below ``gatfast.distributed`` and never imports it (nor
dask); it reaches a cluster through :func:`cluster_provider`, which
``gatfast/__init__.py`` sets to a function importing ``gatfast.distributed``
on first use only. The registry lives here, apart from ``training``, so
that registering imports nothing: ``import gatfast`` stays cheap.
"""

from __future__ import annotations

__all__ = ["cluster_provider", "set_cluster_provider"]

_registered = {"cluster": None}


def set_cluster_provider(provider):
    """Set the function that opens a cluster session; returns the previous one."""
    if provider is not None and not callable(provider):
        raise TypeError(f"provider must be callable or None, got {type(provider).__name__}")
    previous, _registered["cluster"] = _registered["cluster"], provider
    return previous


def cluster_provider():
    """The registered function that opens a cluster session, or None."""
    return _registered["cluster"]
