"""Waiting for tasks on a cluster that may lose workers, or all of them.

Dask already recomputes a task whose worker died on another worker, and
moves data between workers as tasks need it; what it cannot do is run
anything when no worker is left (tasks then wait for ever), or recover
scattered data whose every copy was on workers that died (the futures
are cancelled). :class:`Watch` waits for futures while checking that the
cluster still has a worker: after ``timeout`` seconds without one, or
when the scheduler is unreachable, it raises
:class:`~gatfast.training.errors.WorkersLost`. Callers re-send lost
scattered data from their own copy and resubmit cancelled tasks.
"""

from __future__ import annotations

import threading
import time

from distributed.scheduler import KilledWorker

from ..training.errors import WorkersLost
from .tasks import hold

__all__ = ["KilledWorker", "Watch", "split_done"]

#: Final states of a future ("lost" is not: dask recomputes a lost result).
DONE = ("finished", "error", "cancelled")

#: Errors of the client's connection to the scheduler.
CONNECTION_ERRORS = (OSError, TimeoutError)


class Watch:
    """Wait for futures on ``client``'s cluster; raise WorkersLost when it has no worker left.

    Parameters
    ----------
    client : distributed.Client
    timeout : float
        Seconds without any worker before giving up (a restarted worker
        usually registers again within a few seconds).
    poll : float
        Seconds between checks of the worker count while waiting.
    """

    def __init__(self, client, timeout, poll=0.5):
        self.client = client
        self.timeout = float(timeout)
        self.poll = float(poll)

    def workers(self):
        """``{address: threads}`` of the workers now (WorkersLost if the scheduler cannot be reached)."""
        try:
            return dict(self.client.nthreads())
        except CONNECTION_ERRORS as exc:
            raise WorkersLost(
                f"lost the connection to the scheduler at {self._address()} ({type(exc).__name__}: {exc})"
            ) from None

    def _address(self):
        return getattr(self.client.scheduler, "address", "?")

    def wait(self, futures, first=False, stop=None):
        """Block until every future (or, with ``first``, one of them) is finished, failed or cancelled.

        ``stop()`` is polled too; a true value returns early. Raises
        WorkersLost after ``timeout`` seconds with no worker in the cluster.
        """
        futures = list(futures)
        if not futures:
            return
        event = threading.Event()
        for f in futures:
            f.add_done_callback(lambda _f: event.set())
        alone_since = None
        while True:
            pending = sum(f.status not in DONE for f in futures)  # "lost" results are recomputed
            if pending == 0 or (first and pending < len(futures)):
                return
            if stop is not None and stop():
                return
            if event.wait(self.poll):
                event.clear()
                continue
            if self.workers():
                alone_since = None
            elif alone_since is None:
                alone_since = time.monotonic()
            elif time.monotonic() - alone_since > self.timeout:
                raise WorkersLost(
                    f"lost all workers of the cluster at {self._address()} (none for {self.timeout:g} s)"
                )

    def scatter(self, value, everywhere=False):
        """``value`` sent once, to one worker, as a future; Dask copies it to the workers whose tasks need it.

        With ``everywhere``, one small task per worker reads it now, so that
        every worker holds a replica before the run starts (tasks are then
        placed by load, not by where the data is, and a dead worker loses
        nothing the others lack). Not ``scatter(broadcast=True)``: Dask's
        replication retries for ever when a worker dies during it.

        A scatter that fails (no worker yet, or one that died and the
        scheduler has not noticed) is tried again, after
        :meth:`ensure_workers`, for up to ``timeout`` seconds.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                # timeout: how long the scheduler waits for a worker to scatter to (then we check why)
                [future] = self.client.scatter([value], hash=False, timeout=min(self.timeout, 2.0))
                break
            except CONNECTION_ERRORS as exc:
                self.ensure_workers()  # WorkersLost when the scheduler is gone or no worker comes
                if time.monotonic() > deadline:
                    raise WorkersLost(
                        f"could not send data to the workers for {self.timeout:g} s "
                        f"({type(exc).__name__}: {exc})"
                    ) from None
                time.sleep(min(self.poll, 0.2))
        if everywhere:
            self.wait(
                [
                    self.client.submit(hold, future, workers=[w], allow_other_workers=True, pure=False)
                    for w in self.workers()
                ]
            )
        return future

    def placement(self, count):
        """A worker address for each of ``count`` tasks, round robin over the workers now (None: no worker).

        Used as a loose restriction (``allow_other_workers=True``): the shards
        of a step are spread over the workers, and a task whose worker has
        died runs on another.
        """
        workers = sorted(self.workers())
        return [[workers[i % len(workers)]] if workers else None for i in range(count)]

    def ensure_workers(self):
        """The workers now, after waiting up to ``timeout`` seconds for the first one."""
        deadline = time.monotonic() + self.timeout
        while True:
            workers = self.workers()
            if workers:
                return workers
            if time.monotonic() > deadline:
                raise WorkersLost(
                    f"no worker in the cluster at {self._address()} (waited {self.timeout:g} s)"
                )
            time.sleep(min(self.poll, 0.2))


def split_done(futures):
    """``(finished, failed, lost)``: indices of the futures that finished, raised, or were cancelled.

    ``failed`` holds ``(index, exception)``. A :class:`KilledWorker` error
    (the task was on ``allowed-failures`` workers that died) counts as
    failed: such a task probably kills its workers (memory).
    """
    finished, failed, lost = [], [], []
    for i, f in enumerate(futures):
        if f.status == "finished":
            finished.append(i)
        elif f.status == "error":
            failed.append((i, f.exception()))
        else:  # "cancelled": its inputs (scattered data) are gone
            lost.append(i)
    return finished, failed, lost
