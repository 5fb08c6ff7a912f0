"""Progress output: a tqdm bar on a terminal, plain lines in logs, nothing when quiet."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]

#: Off a terminal, seconds between the progress lines inside a long epoch.
LOG_SECONDS = 30.0

_METRIC_KEYS = ("train_accuracy", "val_accuracy", "test_accuracy", "val_loss", "test_loss")


def _short(key):
    return key.replace("_accuracy", " acc").replace("_loss", " loss")


class Progress:
    """Report epochs of a run.

    On a terminal (``stream.isatty()``) a tqdm bar shows epochs done, the
    time left and the latest metrics; elsewhere (logs, pipes, captured
    output) one line every ``every`` epochs and at the last one. ``quiet``
    silences both.

    Parameters
    ----------
    quiet : bool
    every : int
        Epochs between progress lines (lines only).
    stream : file object, optional
        Default ``sys.stdout``.
    total : int, optional
        Number of epochs, for the bar's length and time estimate.
    desc : str, default "epochs"
        The bar's label.
    """

    def __init__(self, quiet, every, stream=None, total=None, desc="epochs"):
        self.quiet = bool(quiet)
        self.every = max(1, int(every))
        self.stream = stream or sys.stdout
        self._bar = None
        if not self.quiet and _isatty(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total, desc=desc, unit="epoch", file=self.stream, leave=False, dynamic_ncols=True
            )

    def epoch(self, epoch, last, row):
        """Report epoch ``epoch`` (``row`` holds ``loss`` and the metrics)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(
                {_short(k): f"{row[k]:.4f}" for k in ("loss", *_METRIC_KEYS) if k in row}, refresh=False
            )
            return
        if epoch % self.every and not last:
            return
        parts = [f"epoch {epoch:4d}", f"loss {row['loss']:.4f}"]
        parts += [f"{_short(k)} {row[k]:.4f}" for k in _METRIC_KEYS if k in row]
        print(" | ".join(parts), file=self.stream, flush=True)

    def line(self, text):
        """Print one line (above the bar, if there is one)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def batches(self, total, epoch):
        """A context giving ``tick()`` per batch: a tqdm bar of the epoch's batches (time left) on a terminal."""
        return _BatchBar(self, total, epoch)

    def close(self):
        """Remove the bar (lines stay)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _isatty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _BatchBar:
    """The batches of one epoch: a tqdm bar on a terminal; in logs, a line every :data:`LOG_SECONDS`."""

    def __init__(self, progress, total, epoch):
        self.bar, self.stream, self.total, self.epoch = None, progress.stream, total, epoch
        self.done, self.logging = 0, not progress.quiet and progress._bar is None and total > 1
        self.start = self.last = time.perf_counter()
        if not progress.quiet and progress._bar is not None and total > 1:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                desc=f"epoch {epoch}",
                unit="batch",
                file=progress.stream,
                leave=False,
                dynamic_ncols=True,
                position=1,
            )

    def __enter__(self):
        return self.tick

    def tick(self):
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.logging and self.done < self.total:
            now = time.perf_counter()
            if now - self.last >= LOG_SECONDS:  # a long epoch in a log: how far, how long still
                self.last = now
                left = (now - self.start) / self.done * (self.total - self.done)
                print(
                    f"epoch {self.epoch}: {self.done}/{self.total} batches, {left:.0f} s left",
                    file=self.stream,
                    flush=True,
                )

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
