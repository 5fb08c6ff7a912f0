"""k-fold cross-validation: the folds in turn (or as cluster tasks), and their summary."""

from __future__ import annotations

import time

import numpy as np

from .errors import WorkersLost
from .loop import TrainResult
from .splits import fold_splits

__all__ = ["fold_summary", "train_folds"]


def train_folds(ds, config, run_fold, progress, stop, session=None):
    """k-fold cross-validation; a stop request ends the current fold and skips the rest.

    ``run_fold(k, split)`` trains fold ``k`` in this process
    (:func:`~gatfast.training.run.train_fold`); on a cluster every fold is a
    task (``session.run_folds``) running the same function, so the results
    are the same bits.
    """
    t0 = time.perf_counter()
    splits = fold_splits(ds, config.folds, config.seed)

    def report(k, result):
        progress.line(
            f"fold {k + 1}/{config.folds}: test accuracy {result.metrics['test_accuracy']:.4f} "
            f"(best epoch {result.metrics['best_epoch']})"
        )

    if session is not None:
        try:
            results, interrupted = session.run_folds(ds, config, splits, report, stop)
        except WorkersLost as exc:  # exc.result: the folds that finished
            summary = fold_summary(exc.result, t0, "workers lost") if exc.result else None
            raise WorkersLost(str(exc), summary) from None
        return fold_summary(results, t0, interrupted)
    results = []
    for k, split in enumerate(splits):
        results.append(run_fold(k, split))
        report(k, results[-1])
        if results[-1].interrupted:
            break
    return fold_summary(results, t0, results[-1].interrupted)


def fold_summary(results, t0, interrupted):
    """One result for k-fold cross-validation: the folds' mean metrics, the last fold's model and history."""
    fold_metrics = [{k: v for k, v in r.metrics.items() if k != "interrupted"} for r in results]
    result = results[-1]
    metrics = {}
    for key in fold_metrics[0]:
        values = np.array([m[key] for m in fold_metrics], dtype=float)
        metrics[key] = float(values.mean())
        if key.endswith("_accuracy") or key.endswith("_loss"):
            metrics[f"{key}_std"] = float(values.std())
    metrics["folds"] = len(fold_metrics)  # fewer than config.folds when interrupted
    metrics["seconds"] = time.perf_counter() - t0
    if interrupted:
        metrics["interrupted"] = True
    return TrainResult(
        model=result.model,
        metrics=metrics,
        history=result.history,
        folds=fold_metrics,
        splits=result.splits,
        interrupted=interrupted,
    )
