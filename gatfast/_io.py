"""Atomic file writes: write a temporary file beside the target, then rename.

A crash (or an exception in the writer) never leaves a half-written file and
never damages the file being replaced.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "atomic_save_figure"]


def _file_mode(path):
    """Permissions for the new file: those of the file it replaces, else 0o666 minus the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path, write, text=False):
    """Call ``write(fh)`` on a temporary file in ``path``'s directory, then rename it to ``path``.

    ``fh`` is a binary file, or a UTF-8 text file (no newline translation)
    when ``text`` is true. Missing directories are created.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    try:
        opened = os.fdopen(fd, "w", newline="", encoding="utf-8") if text else os.fdopen(fd, "wb")
        with opened as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode(path))  # mkstemp creates 0o600 files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
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
