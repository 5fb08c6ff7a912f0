"""Errors raised by training."""

from __future__ import annotations

__all__ = ["NonFiniteOutput", "TrainingDiverged"]


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


class NonFiniteOutput(ValueError):
    """The model's output holds NaN or inf (``fit`` reports it as :class:`TrainingDiverged`)."""
