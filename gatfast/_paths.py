"""Checks of output paths, before any work starts: each error names the option and the path."""

from __future__ import annotations

import os

__all__ = ["check_output_dir", "check_output_paths"]


def _same_file(a, b):
    """Whether paths ``a`` and ``b`` name one file: same real path, or the same inode."""
    if os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b)):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def check_output_paths(outputs, inputs=()):
    """Refuse output paths that would fail late or destroy a file, before any work starts.

    Every output must be a file path (not a directory) in an existing,
    writable directory (missing directories are never created), must not be
    one of the inputs and must differ from every other output. Paths are
    compared by their resolved real paths (symlinks, ``./x`` and ``x``, hard
    links all count as the same file).

    Parameters
    ----------
    outputs : sequence of (name, path or None)
        ``name`` is the option as the caller knows it (``"save"``,
        ``"--metrics-json"``); None paths are skipped.
    inputs : sequence of (name, path or None)
        Files read by the run (the dataset, a checkpoint); None is skipped.

    Raises
    ------
    ValueError
        One line naming the option, the path and what is wrong.
    """
    seen = []
    inputs = [(n, os.fspath(p)) for n, p in inputs if p is not None]
    for name, path in outputs:
        if path is None:
            continue
        path = os.fspath(path)
        if not path:
            raise ValueError(f"{name} must be a non-empty path")
        if os.path.isdir(path):
            raise ValueError(f"{name} {path!r} is a directory; expected the path of a file to write")
        directory = os.path.dirname(os.path.realpath(path))
        if not os.path.isdir(directory):
            raise ValueError(
                f"{name} {path!r}: directory {os.path.dirname(os.path.abspath(path))!r} does not exist "
                "(gatfast does not create directories; create it first)"
            )
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ValueError(f"{name} {path!r}: directory {directory!r} is not writable")
        for what, source in inputs:
            if _same_file(path, source):
                raise ValueError(
                    f"{name} {path!r} is the {what} ({source!r}): refusing to overwrite an input"
                )
        for other, other_path in seen:
            if _same_file(path, other_path):
                raise ValueError(f"{other} and {name} are the same file {path!r}: each output needs its own")
        seen.append((name, path))


def check_output_dir(name, path, create_parents=False):
    """Check (and create if missing) a directory that receives outputs.

    The directory itself is created when its parent exists (or, with
    ``create_parents``, with all missing parents: for documented default
    locations such as ``runs/``); an existing file in its place, a missing
    parent or an unwritable directory is a ValueError naming ``name``.

    Returns
    -------
    created : bool
        Whether the directory was created (the caller says so).
    """
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{name} must be a non-empty path")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{name} {path!r} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    created = not os.path.isdir(path)
    if created:
        if not create_parents and not os.path.isdir(parent):
            raise ValueError(
                f"{name} {path!r}: parent directory {parent!r} does not exist "
                "(gatfast does not create directories; create it first)"
            )
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"{name} {path!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {path!r} is not writable")
    return created
