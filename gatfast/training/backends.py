"""Where a run's work is computed: this process, or a cluster that a floor above provides.

``training`` sits below ``gatfast.distributed`` and never imports it (nor
dask). :func:`gatfast.train` reaches a cluster (``client=``, or the options
``workers``/``scheduler``) through :func:`cluster_session`, which calls the
*provider* registered here (kept in ``gatfast/_hooks.py``).
``gatfast/__init__.py``, the package's composition root, registers one that
imports ``gatfast.distributed`` (and so dask) on first use only.

A provider is called as ``provider(client=..., workers=..., scheduler=...,
worker_timeout=..., progress=...)`` and returns a context manager that
yields a *session* with

``workers`` : int
    How many workers the cluster had when the session opened.
``step_executor(dataset)``
    A context manager yielding the ``executor`` of :func:`~gatfast.training.loop.fit`
    (the dataset is placed on the workers once, on entry).
``run_folds(dataset, config, splits, report, stop)``
    Runs one task per fold (each a one-process
    :func:`~gatfast.training.run.train_fold`) and returns ``(results,
    interrupted)``: their :class:`~gatfast.training.loop.TrainResult` in
    fold order, and the stop reason or None. ``report(k, result)`` is
    called as each finishes; ``stop()`` is polled (a true value cancels the
    folds not finished, once one has). Losing the cluster raises
    :class:`~gatfast.training.errors.WorkersLost` whose ``result`` is the
    list of the folds that finished.

Executors and sessions raise :class:`~gatfast.training.errors.WorkersLost`
when the cluster is gone; other errors of a task (a diverged shard) are
raised as they are.
"""

from __future__ import annotations

from contextlib import nullcontext

from .. import _hooks

__all__ = ["check_cluster_options", "cluster_session", "register_cluster_provider", "uses_cluster"]


def register_cluster_provider(provider):
    """Set the function that opens a cluster session (see the module docstring); returns the previous one."""
    return _hooks.set_cluster_provider(provider)


def uses_cluster(config, client=None):
    """Whether a run with ``config`` (and ``client``) computes on a cluster."""
    return client is not None or config.workers is not None or config.scheduler is not None


def check_cluster_options(config, client):
    """ValueError when ``client`` comes with the ``workers`` or ``scheduler`` option (one cluster per run)."""
    if client is not None and (config.workers is not None or config.scheduler is not None):
        option = "workers" if config.workers is not None else "scheduler"
        raise ValueError(
            f"client (a cluster you opened) and {option} (a cluster for gatfast to open) are "
            "alternatives: pass one"
        )


def cluster_session(config, client=None, progress=None):
    """A context manager yielding the run's cluster session, or None for a one-process run.

    Raises
    ------
    ValueError
        ``client`` together with the ``workers`` or ``scheduler`` option.
    ImportError
        A cluster is asked for and no provider is registered.
    """
    if not uses_cluster(config, client):
        return nullcontext(None)
    check_cluster_options(config, client)
    provider = _hooks.cluster_provider()
    if provider is None:
        raise ImportError(
            "no cluster provider is registered (import gatfast.distributed, which needs "
            "pip install gatfast[distributed])"
        )
    return provider(
        client=client,
        workers=config.workers,
        scheduler=config.scheduler,
        worker_timeout=config.worker_timeout,
        progress=progress,
    )
