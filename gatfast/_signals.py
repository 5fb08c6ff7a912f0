"""Signal handling: the one module of gatfast that installs signal handlers.

Two uses, both only in the main thread (Python delivers signals there; in
another thread both are no-ops) and both restoring the previous handlers on
exit:

* :func:`cleanup_on_termination`, around every atomic file write
  (``gatfast._io``): SIGTERM and SIGHUP, whose default action would kill the
  process without running any Python code, instead raise inside the write,
  so the temporary file is removed; then the previous (default) handler is
  restored and the signal sent again, so the process still dies of it, with
  the status a parent expects. Signals that already have a Python handler or
  are ignored are left alone (a Python handler's exception unwinds the write
  just the same).
* :func:`deferred_interrupts`, around a training run (``gatfast.train``):
  the first SIGINT (Ctrl-C) or SIGTERM only records a stop request, which
  the training loop reads at the end of every epoch; a second one aborts at
  once by raising :class:`SignalInterrupt` (a KeyboardInterrupt).

Nothing is installed at import.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

__all__ = ["SignalInterrupt", "StopRequest", "cleanup_on_termination", "deferred_interrupts", "exit_status"]

#: Signals whose default action kills the process without unwinding Python code.
TERMINATION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class SignalInterrupt(KeyboardInterrupt):
    """A second SIGINT or SIGTERM during :func:`deferred_interrupts`: abort now.

    Attributes
    ----------
    signum : int
        The signal received.
    """

    def __init__(self, signum):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


class _Terminated(BaseException):
    """Raised by the handler of :func:`cleanup_on_termination` (never escapes it)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def exit_status(signum):
    """The shell's exit status for a process stopped by ``signum``: 128 + signum (130 for SIGINT)."""
    return 128 + int(signum)


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()


def _restore(previous):
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    previous.clear()


@contextmanager
def cleanup_on_termination():
    """Let a termination signal unwind the block (running its cleanup), then die of it.

    Used around file writes: SIGTERM/SIGHUP with their default action raise
    an internal exception inside the block, so ``except``/``finally``
    clauses run (the caller removes its temporary file); then the default
    action is restored and the signal re-sent to this process.
    """
    previous = {}
    if _in_main_thread():
        for signum in TERMINATION_SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                previous[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    except _Terminated as exc:
        _restore(previous)
        os.kill(os.getpid(), exc.signum)  # the default action: the process ends here
        raise SystemExit(exit_status(exc.signum)) from None  # only if the signal is blocked
    finally:
        _restore(previous)


def _raise_terminated(signum, frame):
    raise _Terminated(signum)


class StopRequest:
    """What :func:`deferred_interrupts` yields: the first signal received, if any.

    Attributes
    ----------
    signum : int or None
        The first SIGINT/SIGTERM received, or None.
    """

    def __init__(self):
        self.signum = None

    def __bool__(self):
        return self.signum is not None

    def __call__(self):
        """The signal's name once one arrived, else None (the ``stop`` protocol of ``gatfast.fit``)."""
        return self.name

    @property
    def name(self):
        """``"SIGINT"``, ``"SIGTERM"`` or None."""
        return None if self.signum is None else signal.Signals(self.signum).name


@contextmanager
def deferred_interrupts(signals=None):
    """Turn the first SIGINT/SIGTERM into a stop request; the second aborts.

    Parameters
    ----------
    signals : sequence of int, optional
        Default: SIGINT and SIGTERM. Signals that are currently ignored stay
        ignored.

    Yields
    ------
    StopRequest
        Becomes true when the first signal arrives; the caller checks it at
        safe points (the end of an epoch). A second signal restores the
        previous handlers and raises :class:`SignalInterrupt`.
    """
    request = StopRequest()
    if signals is None:
        signals = (signal.SIGINT, signal.SIGTERM)
    previous = {}

    def handler(signum, frame):
        if request.signum is None:
            request.signum = signum
            return
        _restore(previous)
        raise SignalInterrupt(signum)

    if _in_main_thread():
        for signum in signals:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, handler)
    try:
        yield request
    finally:
        _restore(previous)
