"""k-fold cross-validation on a cluster: one task per fold, each a one-process run.

A fold's task runs the same :func:`~gatfast.training.run.train_fold` as a
one-process run does, so every fold gives the same bits wherever it runs,
and the folds' summary is computed here in fold order: ``--folds 10
--workers N`` prints the same metrics as ``--folds 10``.
"""

from __future__ import annotations

import uuid

from ..training.errors import WorkersLost
from ..training.loop import TrainResult
from ..training.run import build_model
from .faults import DONE, KilledWorker
from .tasks import run_fold

__all__ = ["run_folds"]


def run_folds(client, dataset, config, splits, report, stop, watch):
    """Every fold of ``splits`` as a task on ``client``'s cluster.

    Parameters
    ----------
    client : distributed.Client
    dataset : GraphDataset
        Scattered to every worker once.
    config : TrainConfig
    splits : list of dict
        One ``{"train", "val", "test"}`` split per fold.
    report : callable
        ``report(k, result)`` as fold ``k`` finishes (in the order they finish).
    stop : callable or None
        Polled while waiting; once it returns a reason and a fold has
        finished, the folds not finished are cancelled.
    watch : Watch
        Detects a cluster with no worker left.

    Returns
    -------
    results : list of TrainResult
        The finished folds, in fold order (their models rebuilt here).
    interrupted : str or None
        The stop reason when folds were cancelled.

    Raises
    ------
    WorkersLost
        With ``result`` the list of the folds that finished.
    """
    data = watch.scatter(dataset, everywhere=True)
    tag = uuid.uuid4().hex[:8]

    def submit(k):
        return client.submit(run_fold, data, config, k, splits[k], key=f"gatfast-fold-{k}-{tag}", pure=False)

    pending = {k: submit(k) for k in range(len(splits))}
    done, interrupted = {}, None
    try:
        while pending:
            watch.wait(pending.values(), first=True, stop=stop if done else None)
            for k, future in list(pending.items()):
                if future.status not in DONE:
                    continue
                del pending[k]
                if future.status == "cancelled":  # every copy of the dataset was lost: send it again
                    if data.status != "finished":
                        data = watch.scatter(dataset, everywhere=True)
                    pending[k] = submit(k)
                elif future.status == "error" and isinstance(future.exception(), KilledWorker):
                    raise WorkersLost(
                        f"fold {k + 1} was running on workers that died, again and again (out of "
                        f"memory?): {future.exception()}"
                    )
                else:
                    done[k] = _result(dataset, config, k, future.result())
                    report(k, done[k])
            reason = stop() if stop is not None and done else None
            if reason and pending:
                client.cancel(list(pending.values()))
                interrupted = reason if isinstance(reason, str) else "stop"
                break
    except WorkersLost as exc:
        raise WorkersLost(str(exc), [done[k] for k in sorted(done)] or None) from None
    finally:
        data.release()
    return [done[k] for k in sorted(done)], interrupted


def _result(dataset, config, k, outcome):
    """A fold's :class:`TrainResult`, its model rebuilt from the parameters the task sent back."""
    fold_config = config.replace(seed=config.seed + k)
    model = build_model(dataset, fold_config, fold_config.seed)
    model.load_parameters(outcome["params"])
    return TrainResult(
        model=model,
        metrics=outcome["metrics"],
        history=outcome["history"],
        splits=outcome["splits"],
        config=fold_config,
    )
