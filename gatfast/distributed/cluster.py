"""Opening a cluster for a run: a local one (``workers=N``), an existing one (``scheduler=``) or the caller's client.

Thread policy. A worker runs one task at a time (one Dask thread) and
gives it ``cores // workers`` Numba threads (at least one), so the workers
of a local cluster share the cores without oversubscribing them. The count
must be fixed before the worker's first kernel starts Numba's thread pool:
:func:`local_cluster` sets ``NUMBA_NUM_THREADS`` in each worker's
environment, which Numba reads at import. (A worker plugin calling
``numba.set_num_threads`` is not enough: the setting is per thread and the
plugin runs in the worker's main thread, not in the thread that runs the
tasks; measured, ``docs/SCALING.md``.) Workers started by hand with
``dask worker`` take ``NUMBA_NUM_THREADS`` from their environment: start
them with ``--nthreads 1`` and ``NUMBA_NUM_THREADS=cores/workers``.

Memory. Dask's nannies start workers with ``MALLOC_TRIM_THRESHOLD_=65536``,
which turns off glibc's dynamic mmap threshold: every large array is then
mapped and unmapped each time, and its pages faulted in again. gatfast
allocates the same large buffers every step; in a worker with that setting
a MUTAG fold ran 1.5x slower (3.0 s against 2.0 s, measured). The local
cluster leaves the variable unset; start ``dask worker`` with
``--no-nanny``, or with ``MALLOC_TRIM_THRESHOLD_: null`` under
``distributed.nanny.pre-spawn-environ`` in its Dask configuration file.

Replicas. The dataset is copied to every worker once, but the scheduler's
Active Memory Manager (on by default) drops replicas that no waiting task
needs, every 2 s: a worker then fetches the dataset again at its next
step, and a worker's death can take the last copy (gatfast then sends it
again). The local cluster runs without it; start ``dask scheduler`` with
``DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START=False`` (the
session says so when it finds it running).
"""

from __future__ import annotations

import contextlib
import logging
import os

import dask
from distributed import Client, LocalCluster

from .._cpus import usable_cpus
from ..training.options import check_address
from .executor import ShardExecutor
from .faults import Watch
from .folds import run_folds
from .tasks import IgnoreInterrupts

__all__ = ["Session", "connect", "local_cluster", "open_session", "threads_per_worker"]


def threads_per_worker(workers, cores=None):
    """Numba threads for each of ``workers`` workers sharing ``cores`` cores (default: this machine's).

    Parameters
    ----------
    workers : int
        Workers sharing the cores.
    cores : int, optional
        Cores to share (default: those this process may run on).

    Returns
    -------
    int
        ``cores // workers``, at least 1.
    """
    return max(1, (cores or usable_cpus()) // workers)


def local_cluster(workers, threads=None, quiet=True):
    """A :class:`distributed.LocalCluster` of ``workers`` processes on the loopback interface.

    Parameters
    ----------
    workers : int
        Worker processes (at least 1), one Dask thread each.
    threads : int, optional
        Numba threads per worker (default: :func:`threads_per_worker`).
    quiet : bool, default True
        Silence Dask's loggers but for critical messages (a killed worker
        is otherwise a page of warnings and tracebacks; gatfast handles it
        and reports what it could not handle).

    Returns
    -------
    distributed.LocalCluster
        No dashboard; random free ports on 127.0.0.1 only. Close it when done.
    """
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise TypeError(f"workers must be an int, got {type(workers).__name__}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    threads = threads_per_worker(workers) if threads is None else int(threads)
    # the worker processes inherit this environment (PYTHONPATH included) plus these
    # the scheduler's HTTP server (no dashboard) on a random loopback port: never 8787, which may be taken
    with dask.config.set(
        {
            "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
            "distributed.scheduler.active-memory-manager.start": False,
        }
    ):
        return LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            scheduler_port=0,
            dashboard_address="127.0.0.1:0",
            scheduler_kwargs={"dashboard": False},
            env={"NUMBA_NUM_THREADS": str(threads)},
            silence_logs=logging.CRITICAL if quiet else logging.WARNING,
        )


def connect(scheduler, timeout=30.0):
    """A :class:`distributed.Client` of the scheduler at ``scheduler`` (``tcp://host:port``).

    Parameters
    ----------
    scheduler : str
        The scheduler's address, ``tcp://host:port``.
    timeout : float, default 30
        Seconds to wait for the scheduler to answer.

    Returns
    -------
    distributed.Client
        Connected to that scheduler, not set as Dask's default client. Close it when done.

    Raises
    ------
    ValueError
        A malformed address (names ``scheduler``).
    ConnectionError
        Nothing answers there within ``timeout`` seconds.
    """
    address = check_address("scheduler", scheduler)
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(
            f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
            f"({type(exc).__name__}); is 'dask scheduler' running there?"
        ) from None


class Session:
    """A run's view of its cluster: what :func:`gatfast.train` calls (see ``gatfast.training.backends``).

    Parameters
    ----------
    client : distributed.Client
        The client of the cluster that runs the tasks.
    worker_timeout : float
        Seconds without any worker before the run stops.
    progress : Progress, optional
        Where to say which cluster is used.
    """

    def __init__(self, client, worker_timeout=30.0, progress=None):
        self.client = client
        self.worker_timeout = worker_timeout
        self.watch = Watch(client, worker_timeout)
        self.workers = len(self.watch.ensure_workers())
        self.progress = progress

    @contextlib.contextmanager
    def step_executor(self, dataset):
        """A :class:`ShardExecutor` for ``dataset``, released on exit.

        Parameters
        ----------
        dataset : NodeDataset or GraphDataset
            The run's dataset, placed on every worker on entry.

        Yields
        ------
        ShardExecutor
            The ``executor`` of :func:`gatfast.fit` for this dataset on the session's cluster.
        """
        with ShardExecutor(self.client, dataset, timeout=self.worker_timeout) as executor:
            yield executor

    def run_folds(self, dataset, config, splits, report, stop):
        """Every fold as a task (see :func:`gatfast.distributed.folds.run_folds`).

        Parameters
        ----------
        dataset : GraphDataset
            Placed on every worker once.
        config : TrainConfig
            The options of every fold.
        splits : list of dict
            One ``{"train", "val", "test"}`` split per fold.
        report : callable
            ``report(k, result)`` as fold ``k`` finishes (in the order they finish).
        stop : callable or None
            Polled while waiting; once it returns a reason and a fold has
            finished, the folds not finished are cancelled.

        Returns
        -------
        results : list of TrainResult
            The finished folds, in fold order.
        interrupted : str or None
            The stop reason when folds were cancelled, else None.
        """
        return run_folds(self.client, dataset, config, splits, report, stop, self.watch)


@contextlib.contextmanager
def open_session(client=None, workers=None, scheduler=None, worker_timeout=30.0, progress=None):
    """The cluster of a run, as a :class:`Session`; a cluster or client it opened is closed on exit.

    Exactly one of ``client``, ``workers`` and ``scheduler`` is given.

    Parameters
    ----------
    client : distributed.Client, optional
        A client of the caller's cluster (left open on exit).
    workers : int, optional
        Start a local cluster of that many worker processes.
    scheduler : str, optional
        Connect to the scheduler at that address (``tcp://host:port``).
    worker_timeout : float, default 30
        Seconds without any worker before the run stops (and, with
        ``scheduler``, to wait for it to answer).
    progress : Progress, optional
        Where to say which cluster is used.

    Yields
    ------
    Session
        The run's view of the cluster.
    """
    given = [
        name
        for name, v in (("client", client), ("workers", workers), ("scheduler", scheduler))
        if v is not None
    ]
    if len(given) != 1:
        raise ValueError(f"pass exactly one of client, workers and scheduler, got {given or 'none'}")
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
    with contextlib.ExitStack() as stack:
        if workers is not None:
            # the nannies run in this process and put their pre-spawn variables (OMP_NUM_THREADS=1 ...)
            # into its environment, where later child processes would inherit them: put them back after
            stack.callback(_restore_environ, {k: os.environ.get(k) for k in _nanny_variables()})
            cluster = stack.enter_context(local_cluster(workers))
            client = stack.enter_context(Client(cluster, set_as_default=False))
            client.register_plugin(IgnoreInterrupts())  # Ctrl-C at a terminal reaches them too
        elif scheduler is not None:
            client = stack.enter_context(connect(scheduler, timeout=worker_timeout))
        session = Session(client, worker_timeout, progress)
        if progress is not None:
            where = (
                f"{workers} local worker processes, {threads_per_worker(workers)} Numba thread(s) each"
                if workers is not None
                else f"{session.workers} workers at {client.scheduler.address}"
            )
            progress.line(f"cluster: {where}")
            if workers is None and _amm_running(client):
                progress.line(
                    "cluster: the scheduler's Active Memory Manager drops the dataset's replicas between "
                    "steps (workers fetch it again); start the scheduler with "
                    "DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START=False"
                )
        yield session


def _amm_running(client):
    try:
        return bool(client.amm.running())
    except Exception:  # an older scheduler without the extension: nothing to say
        return False


def _nanny_variables():
    return {"PYTHONHASHSEED", *dask.config.get("distributed.nanny.pre-spawn-environ", {})}


def _restore_environ(saved):
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
