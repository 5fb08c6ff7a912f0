"""What runs on a worker: a step's shard, a fold, a configuration of a sweep.

Every function here is a pure function of its arguments (the results do
not depend on which worker runs it, or how often: a task whose worker died
is simply run again elsewhere). A worker keeps one model per thread
between steps and only loads the step's parameters into it; the model is
rebuilt when its configuration changes.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass

import numba
from distributed import WorkerPlugin

from ..models.network import GATv2Network
from ..training import TrainConfig, train
from ..training.run import train_fold
from ..training.steps import shard_gradients

__all__ = [
    "IgnoreInterrupts",
    "StepPayload",
    "compute_shard",
    "hold",
    "run_config",
    "run_fold",
    "worker_info",
]

_local = threading.local()  # a worker thread's model: (configuration key, GATv2Network)


@dataclass(frozen=True)
class StepPayload:
    """What every shard of a step needs besides the dataset: sent once per step.

    Attributes
    ----------
    params : dict
        The parameters before the step (``model.parameters()``).
    spec : dict
        ``model.get_config()``: the model a worker builds once and reuses.
    config : TrainConfig
    """

    params: dict
    spec: dict
    config: TrainConfig


def _model(spec):
    key = json.dumps(spec, sort_keys=True)
    cached = getattr(_local, "model", None)
    if cached is None or cached[0] != key:
        cached = _local.model = (key, GATv2Network(**spec))
    return cached[1]


def compute_shard(dataset, payload, plan, items):
    """One shard of one step: :func:`~gatfast.training.steps.shard_gradients` on this worker.

    Parameters
    ----------
    dataset : NodeDataset or GraphDataset
        Placed on the workers once per run.
    payload : StepPayload
        The step's parameters, model specification and options.
    plan : BatchPlan
        The step (its epoch and batch number: the keys of its random draws).
    items : ndarray of int64
        The shard's node or graph ids.

    Returns
    -------
    result : ShardResult
        Without its ``batch`` (the caller does not need the graph back).
    seconds : float
        Time spent computing, inside the task (loading the parameters included).
    """
    start = time.perf_counter()
    model = _model(payload.spec)
    model.load_parameters(payload.params)
    result = shard_gradients(model, dataset, plan, items, payload.config)
    result.batch = None
    return result, time.perf_counter() - start


def run_fold(dataset, config, k, split):
    """Fold ``k`` of k-fold cross-validation, as one process runs it (:func:`~gatfast.training.run.train_fold`).

    Returns
    -------
    dict
        ``metrics``, ``history``, ``splits``, ``params`` (the restored best
        parameters) and ``seconds``.
    """
    start = time.perf_counter()
    result = train_fold(dataset, config, k, split)
    return {
        "metrics": result.metrics,
        "history": result.history,
        "splits": result.splits,
        "params": {n: p.copy() for n, p in result.model.parameters().items()},
        "seconds": time.perf_counter() - start,
    }


def run_config(dataset, config):
    """One configuration of a sweep: a one-process :func:`gatfast.train` (folds included); its metrics."""
    result = train(
        dataset,
        config.replace(
            workers=None, scheduler=None, quiet=True, save=None, metrics_json=None, diagnose=False
        ),
    )
    return result.metrics


def hold(value):
    """Nothing: a task that makes its worker fetch ``value`` (and keep it while the value is referenced)."""
    return None


def worker_info():
    """``{"pid", "numba_threads", "numba_max_threads"}`` of the worker running this task."""
    return {
        "pid": os.getpid(),
        "numba_threads": numba.get_num_threads(),
        "numba_max_threads": numba.config.NUMBA_NUM_THREADS,
    }


class IgnoreInterrupts(WorkerPlugin):
    """Workers of a local cluster ignore SIGINT: Ctrl-C is for the process that runs the training.

    A terminal sends Ctrl-C to its whole foreground process group, the
    local cluster's workers included; without this they would die (and
    be restarted) while the training process stops at the end of the epoch.
    """

    name = "gatfast-ignore-sigint"

    def setup(self, worker):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
