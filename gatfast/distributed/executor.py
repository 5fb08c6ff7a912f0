"""A training step on a Dask cluster: the workers compute the shards, this process adds them and steps.

Data placement and traffic (``docs/SCALING.md`` has the measured figures):

* the dataset is sent **once per run**, and copied to every worker before
  the first step (:meth:`Watch.scatter` with ``everywhere``): each copy is
  a replica, so a worker that dies loses nothing the others lack, and this
  process keeps its own copy to send again if every copy is lost;
* the parameters go out **once per step**, with the model's specification
  and the options, as one scattered payload (:class:`StepPayload`) that
  every shard task of the step refers to; Dask copies it from worker to
  worker as the tasks need it;
* shard ``i`` goes to worker ``i mod W`` (a loose restriction: another
  worker runs it if that one dies);
* each task sends back its shard's loss sum, item count and gradient dict
  (the size of the parameters) and the seconds it computed;
* this process adds the shard results **in shard order**
  (:func:`~gatfast.training.steps.add_shards`) and takes the optimizer
  step, so the result does not depend on which worker computed what.
"""

from __future__ import annotations

import pickle
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from ..training.errors import WorkersLost
from ..training.steps import BatchPlan
from .faults import CONNECTION_ERRORS, KilledWorker, Watch, split_done
from .tasks import StepPayload, compute_shard

__all__ = ["ShardExecutor", "StepTiming"]

_NO_ITEMS = np.empty(0, dtype=np.int64)  # the tasks get their shard's items, not the whole batch's


@dataclass
class StepTiming:
    """Where one step's time went (seconds) and what it sent (bytes; measured with ``profile=True``).

    ``wait - max(compute)`` is the scheduling and communication latency of
    the round trip.

    Attributes
    ----------
    shards : int
        The number of shards of the step.
    send : float
        Pickling and scattering the parameters, and asking the scheduler
        for the workers (to place the shards).
    wait : float
        From the first submission until every shard is done (summed over retries).
    gather : float
        Fetching the results.
    wall : float
        The whole call.
    compute : list of float
        The seconds inside each shard task.
    payload_bytes : int
        Pickled size of the step's payload (parameters, model specification and options).
    result_bytes : int
        Pickled size of the shard results, summed.
    retries : int
        How many times shards were resubmitted after their inputs were lost with workers.
    """

    shards: int
    send: float = 0.0
    wait: float = 0.0
    gather: float = 0.0
    wall: float = 0.0
    compute: list = field(default_factory=list)
    payload_bytes: int = 0
    result_bytes: int = 0
    retries: int = 0


class ShardExecutor:
    """The ``executor`` of :func:`gatfast.fit` on a Dask cluster.

    Parameters
    ----------
    client : distributed.Client
        The client of the cluster that computes the shards.
    dataset : NodeDataset or GraphDataset
        Scattered to every worker on construction.
    timeout : float, default 30
        Seconds to wait for a worker when the cluster has none, before
        raising :class:`~gatfast.training.errors.WorkersLost`.
    attempts : int, default 3
        How many times a step's shards are resubmitted after their inputs
        were lost with the workers that held them.
    profile : bool, default False
        Also measure the pickled sizes of the payload and the results
        (``stats``); costs one extra pickling of each per step.

    Attributes
    ----------
    default_shards : int
        The number of workers when the executor was made: ``fit`` cuts a
        batch into that many shards when ``config.shards`` is None.
    stats : list of StepTiming
        One entry per step.
    dataset_seconds : float
        Time to place the dataset on the workers.
    dataset_future : distributed.Future
        The dataset on the cluster (None once closed).

    Examples
    --------
    >>> from distributed import Client, LocalCluster            # doctest: +SKIP
    >>> with LocalCluster(n_workers=2, processes=True) as cluster, Client(cluster) as client:  # doctest: +SKIP
    ...     executor = ShardExecutor(client, dataset)
    ...     result = gatfast.fit(model, dataset, optimizer, config, executor=executor)
    """

    def __init__(self, client, dataset, timeout=30.0, attempts=3, profile=False):
        self.client = client
        self.dataset = dataset
        self.watch = Watch(client, timeout)
        self.attempts = int(attempts)
        self.profile = bool(profile)
        self.stats = []
        self.default_shards = len(self.watch.ensure_workers())
        self.dataset_future = None
        start = time.perf_counter()
        self._place_dataset()
        self.dataset_seconds = time.perf_counter() - start

    def _place_dataset(self):
        self.dataset_future = self.watch.scatter(self.dataset, everywhere=True)

    def close(self):
        """Release the dataset on the workers (the executor cannot be used afterwards)."""
        if self.dataset_future is not None:
            self.dataset_future.release()
            self.dataset_future = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __call__(self, model, plan, shards, config):
        """The :class:`~gatfast.training.steps.ShardResult` of every shard of step ``plan``, in shard order."""
        if self.dataset_future is None:
            raise RuntimeError("this ShardExecutor was closed")
        start = time.perf_counter()
        timing = StepTiming(len(shards))
        payload = StepPayload(model.parameters(), model.get_config(), config)
        if self.profile:
            timing.payload_bytes = len(pickle.dumps(payload, protocol=5))
        step = BatchPlan(plan.epoch, plan.index, _NO_ITEMS)
        sent = self.watch.scatter(payload)
        places = self.watch.placement(len(shards))
        timing.send = time.perf_counter() - start
        tag = f"gatfast-shard-e{plan.epoch}-b{plan.index}-{uuid.uuid4().hex[:8]}"
        todo = list(range(len(shards)))
        results = [None] * len(shards)
        for attempt in range(self.attempts + 1):
            if attempt:
                places = self.watch.placement(len(shards))
            futures = [
                self.client.submit(
                    compute_shard,
                    self.dataset_future,
                    sent,
                    step,
                    shards[i],
                    key=f"{tag}-{i}-{attempt}",
                    workers=places[i],
                    allow_other_workers=True,
                    pure=False,
                )
                for i in todo
            ]
            t = time.perf_counter()
            self.watch.wait(futures)
            timing.wait += time.perf_counter() - t
            finished, failed, lost = split_done(futures)
            for i, exc in failed:
                if isinstance(exc, KilledWorker):
                    raise WorkersLost(
                        f"shard {todo[i]} of epoch {plan.epoch}, batch {plan.index} was running on "
                        f"workers that died, again and again (out of memory?): {exc}"
                    )
                futures[i].result()  # raises the task's error (a diverged shard) with its traceback
            t = time.perf_counter()
            try:
                gathered = self.client.gather([futures[i] for i in finished])
            except CONNECTION_ERRORS:  # a worker holding a result died meanwhile: compute those again
                self.watch.workers()  # WorkersLost if it is the scheduler that is gone
                finished, lost, gathered = [], sorted(lost + finished), []
            timing.gather += time.perf_counter() - t
            for i, (result, seconds) in zip(finished, gathered):
                results[todo[i]] = result
                timing.compute.append(seconds)
            if not lost:
                break
            # every copy of an input was on workers that died: send it again, recompute those shards
            timing.retries += 1
            todo = [todo[i] for i in lost]
            if self.dataset_future.status != "finished":
                self._place_dataset()
            if sent.status != "finished":
                sent = self.watch.scatter(payload)
        else:
            raise WorkersLost(
                f"epoch {plan.epoch}, batch {plan.index}: the inputs of {len(todo)} shard(s) were "
                f"lost {self.attempts + 1} times with the workers holding them"
            )
        if self.profile:
            timing.result_bytes = sum(len(pickle.dumps(r, protocol=5)) for r in results)
        timing.wall = time.perf_counter() - start
        self.stats.append(timing)
        return results
