"""Atomic file writes: write a temporary file beside the target, then rename.

A crash, an exception in the writer, Ctrl-C or SIGTERM never leaves a
half-written file and never damages the file being replaced.

The temporary file is ``.<name>.gatfast-tmp-<pid>-<random>`` in the
target's directory (``<name>`` is the target's file name, cut to 100
characters; :data:`TEMP_PATTERN` matches it). It is removed when the writer
raises, on Ctrl-C, and on SIGTERM/SIGHUP (``gatfast._signals``: the signal
unwinds the write, then the process dies of it as it would have). Only a
hard kill (``kill -9``, a power cut) can leave one behind: before every
write, the leftovers of that target whose process is gone are removed
(:func:`remove_stale_temp_files`, also callable for a whole directory).

Missing directories are never created: writing into one is an error.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tempfile

from ._signals import cleanup_on_termination

__all__ = [
    "TEMP_PATTERN",
    "atomic_save_figure",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "git_tracked_files",
    "pid_alive",
    "remove_stale_temp_files",
]

#: Regular expression of the temporary file names (groups ``name``, ``pid``, ``token``).
TEMP_PATTERN = r"\.(?P<name>.+)\.gatfast-tmp-(?P<pid>[0-9]+)-(?P<token>[A-Za-z0-9_]+)"
_TEMP_RE = re.compile(TEMP_PATTERN)
_NAME_CHARS = 100  # keeps the temporary name within the usual 255-byte limit


def _temp_prefix(name, pid):
    return f".{name[:_NAME_CHARS]}.gatfast-tmp-{pid}-"


def _file_mode(path):
    """Permissions for the new file: those of the file it replaces, else 0o666 minus the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def pid_alive(pid):
    """Whether process ``pid`` exists (True when unsure, so nothing in use is removed)."""
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # e.g. PermissionError: it exists, owned by someone else
    return True


def remove_stale_temp_files(directory, name=None):
    """Remove gatfast's temporary files in ``directory`` whose writing process is gone.

    Parameters
    ----------
    directory : str or path-like
    name : str, optional
        Only the temporary files of the target with this file name.

    Returns
    -------
    list of str
        The paths removed (sorted). Files of live processes (including this
        one), other users' files that cannot be removed, symlinks and
        directories are left alone.
    """
    directory = os.fspath(directory)
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for entry in sorted(entries):
        match = _TEMP_RE.fullmatch(entry)
        if match is None or (name is not None and match["name"] != name[:_NAME_CHARS]):
            continue
        if pid_alive(match["pid"]):
            continue
        path = os.path.join(directory, entry)
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
    return removed


def atomic_write(path, write, text=False):
    """Call ``write(fh)`` on a temporary file in ``path``'s directory, then rename it to ``path``.

    ``fh`` is a binary file, or a UTF-8 text file (no newline translation)
    when ``text`` is true. The directory must exist (FileNotFoundError
    otherwise). See the module docstring for the temporary file.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.lexists(directory) else "does not exist"
        raise FileNotFoundError(f"cannot write {path}: directory {directory} {what}")
    remove_stale_temp_files(directory, name)
    tmp = None
    with cleanup_on_termination():
        try:
            fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(name, os.getpid()), dir=directory)
            opened = os.fdopen(fd, "w", newline="", encoding="utf-8") if text else os.fdopen(fd, "wb")
            with opened as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, _file_mode(path))  # mkstemp creates 0o600 files
            os.replace(tmp, path)
        except BaseException:
            if tmp is not None and os.path.lexists(tmp):
                os.unlink(tmp)
            raise


def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` atomically."""
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write(path, lambda fh: fh.write(text), text=True)


def atomic_save_figure(fig, path, dpi=120):
    """``fig.savefig(path)`` atomically; the format follows the file extension (default png)."""
    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".") or "png"
    atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=dpi))


def git_tracked_files(directory):
    """Files under ``directory`` that git tracks, or None when that cannot be known.

    None when git is not installed, ``directory`` is not inside a work tree,
    or git fails; otherwise a (possibly empty) list of paths relative to the
    repository root.
    """
    directory = os.path.abspath(os.fspath(directory))
    probe = directory
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    try:
        proc = subprocess.run(
            ["git", "-C", probe, "ls-files", "-z", "--full-name", "--", directory],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return [p for p in proc.stdout.decode("utf-8", "replace").split("\0") if p]
