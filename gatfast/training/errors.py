"""Errors raised by training."""

from __future__ import annotations

__all__ = ["NonFiniteOutput", "TrainingDiverged", "WorkersLost"]


class TrainingDiverged(RuntimeError):
    """A loss, gradient, parameter or activation became NaN/inf, or the loss blew up; names the epoch.

    Parameters
    ----------
    epoch : int
        The epoch at which it happened (1-based).
    what : str
        What became non-finite (or blew up).
    reason : str, default "is NaN or inf"
        What happened to it.
    """

    def __init__(self, epoch, what, reason="is NaN or inf"):
        super().__init__(f"training diverged at epoch {epoch}: {what} {reason}")
        self.epoch = epoch
        self.what = what
        self.reason = reason

    def __reduce__(self):
        # raised on a worker process and re-raised by the process that asked for the shard
        return type(self), (self.epoch, self.what, self.reason)


class WorkersLost(RuntimeError):
    """The cluster computing a run's steps or folds is gone (no worker left, or no scheduler).

    :func:`gatfast.fit` raises it with the model holding the best parameters
    so far and ``result`` set to what a stopped run returns (evaluated,
    ``interrupted="workers lost"``); :func:`gatfast.train` writes that
    result's outputs (``save``, ``metrics_json``) before raising it again.

    Parameters
    ----------
    message : str
        One line: what was lost and when.
    result : TrainResult, optional
        The run up to the loss (None when nothing was trained yet).
    """

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result

    def __reduce__(self):
        return type(self), (str(self),)


class NonFiniteOutput(ValueError):
    """The model's output holds NaN or inf (``fit`` reports it as :class:`TrainingDiverged`)."""
