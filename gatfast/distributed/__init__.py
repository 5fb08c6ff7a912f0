"""Data-parallel training on Dask: ``pip install gatfast[distributed]``.

Nothing else in gatfast imports this package (nor dask); :func:`gatfast.train`
opens it when given ``client=``, ``workers=`` or ``scheduler=``.

* Every step's batch is cut into shards (``TrainConfig.shards``; default
  on a cluster: one per worker), the workers compute the shards'
  gradients (:class:`ShardExecutor`), and this process adds them in shard
  order and takes the optimizer step: the result equals the one-process
  run's up to the order of floating-point sums, and for a given number of
  shards it is the same whatever the number of workers.
* ``folds`` run as one task per fold; :func:`sweep` runs a grid of
  configurations as tasks.
* A worker that dies has its task recomputed elsewhere; with no worker
  left for ``worker_timeout`` seconds the run stops with
  :class:`~gatfast.training.errors.WorkersLost` (``gatfast train`` writes the best
  model so far and exits with status 2).

``docs/SCALING.md`` has the measured costs and what limits the scaling.
"""

try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError:
    raise ImportError(
        "gatfast.distributed needs dask and distributed: pip install 'gatfast[distributed]'"
    ) from None

from ..training.errors import WorkersLost
from .cluster import Session, connect, local_cluster, open_session, threads_per_worker
from .executor import ShardExecutor, StepTiming
from .sweep import format_table, sweep

__all__ = [
    "Session",
    "ShardExecutor",
    "StepTiming",
    "WorkersLost",
    "connect",
    "format_table",
    "local_cluster",
    "open_session",
    "sweep",
    "threads_per_worker",
]
