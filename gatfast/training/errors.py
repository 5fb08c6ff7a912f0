"""Errors raised by training."""

from __future__ import annotations

__all__ = ["NonFiniteOutput", "TrainingDiverged"]


class TrainingDiverged(RuntimeError):
    """A loss, gradient, parameter or activation became NaN/inf; names the epoch.

    Parameters
    ----------
    epoch : int
        The epoch at which it happened (1-based).
    what : str
        What became non-finite.
    """

    def __init__(self, epoch, what):
        super().__init__(f"training diverged at epoch {epoch}: {what} is NaN or inf")
        self.epoch = epoch


class NonFiniteOutput(ValueError):
    """The model's output holds NaN or inf (``fit`` reports it as :class:`TrainingDiverged`)."""
