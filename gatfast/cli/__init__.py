"""The ``gatfast`` command line: ``train``, ``sweep``, ``evaluate``, ``gradcheck``, ``experiment``.

This module imports nothing heavy: :func:`main` starts ``train``'s compile
helper first (``gatfast/_precompile.py``), so that it loads Numba and the
kernels while this process loads the library.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["build_parser", "main", "run"]


def __getattr__(name):
    if name == "build_parser":  # imported on first use, like everything the commands need
        from .parser import build_parser

        return build_parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv=None):
    """Entry point of the ``gatfast`` command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        The command-line arguments, without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 on success, 1 when ``gradcheck`` finds an error above
        its tolerance, 2 on an error (reported on one line of stderr), 128 + the
        signal number when a signal stopped the command (141, SIGPIPE's, quietly,
        when the reader of its output left: ``gatfast train | head``).
    """
    from .._precompile import let_go_waiting_helper, prestart_helper

    argv = sys.argv[1:] if argv is None else list(argv)
    prestart_helper(argv)
    try:
        return _run_command(argv)
    finally:  # a helper started for a run that never told it what to compile (help, an error, a recipe)
        let_go_waiting_helper()


def _run_command(argv):
    from ..training import TrainingDiverged, WorkersLost
    from .commands import cmd_evaluate, cmd_experiment, cmd_gradcheck, cmd_train
    from .options import CLIError
    from .parser import build_parser
    from .sweep import cmd_sweep

    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {
        "train": cmd_train,
        "sweep": cmd_sweep,
        "evaluate": cmd_evaluate,
        "gradcheck": cmd_gradcheck,
        "experiment": cmd_experiment,
    }
    try:
        return handlers[args.command](args)
    except BrokenPipeError:  # the reader of the output left (gatfast train | head): stop quietly, as git does
        _discard_stdout()
        return 128 + getattr(signal, "SIGPIPE", 13)
    except (CLIError, ValueError, TypeError, OSError, ImportError, TrainingDiverged, WorkersLost) as exc:
        message = " ".join(str(exc).split("\n"))  # always one line
        print(f"gatfast {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C outside training, or a second one during it
        from .._signals import exit_status

        signum = getattr(exc, "signum", signal.SIGINT)
        print(
            f"gatfast {args.command}: aborted by {signal.Signals(signum).name}; files being written were "
            "left as they were",
            file=sys.stderr,
        )
        return exit_status(signum)


def _discard_stdout():
    """Point stdout at the null device, so that flushing what is left at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured output): nothing to redirect
        pass


def run():
    """The ``gatfast`` program: :func:`main` on ``sys.argv``, then a quick exit with its status.

    Once the command is done, the exit handlers run and the output is
    flushed as at any exit; then the process ends without the interpreter's
    teardown of every module, which took 0.4-0.5 s of each ``gatfast train``
    (Numba's and LLVM's objects; 0.05 s this way). Nothing is left running
    by then: the thread pool's workers are idle. A command that raises
    leaves the usual way, with its traceback. Being the program, it ends
    the process: a library calls :func:`main`, which returns the status.
    """
    status = main()
    try:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except Exception:  # a closed pipe, or an interpreter without these: exit as usual
        sys.exit(status)
    os._exit(status)
