"""Bounded, pickle-free reading of ``.npz`` archives (datasets and checkpoints).

``numpy.load`` on an ``.npz`` trusts the archive: a member's ``.npy``
header decides how much memory is allocated, a compressed member may claim
any size, and a text file is reported as "pickled data". :class:`NpzReader`
checks the zip directory and every header first, so a small hostile file
cannot make gatfast allocate more than the limits below, and every problem
is one ValueError naming the file.
"""

from __future__ import annotations

import os

__all__ = ["MAX_EXPANSION", "MAX_NPZ_BYTES", "NpzError", "NpzReader"]

#: Most bytes an archive may hold once decompressed (all members together).
MAX_NPZ_BYTES = 8 * 2**30
#: Most a compressed member may claim per compressed byte: deflate cannot
#: expand more than about 1032 to 1, so a larger claim is not honest data.
MAX_EXPANSION = 1100
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_CHUNK = 16 * 2**20


class NpzError(ValueError):
    """A file that :class:`NpzReader` refuses; ``reason`` says why (without the path)."""

    def __init__(self, path, what, reason):
        super().__init__(f"{what} {path} {reason}")
        self.path, self.reason = path, reason


class NpzReader:
    """Pickle-free, size-bounded reading of an ``.npz`` archive: each member read once.

    Opening reads only the zip directory and checks it: every member is a
    ``name.npy`` file, stored or deflated, members do not overlap, a
    compressed member claims at most :data:`MAX_EXPANSION` times its
    compressed size, and all members together at most ``max_bytes``
    decompressed (default :data:`MAX_NPZ_BYTES`). :meth:`header` reads a
    member's ``.npy`` header (shape and dtype) without its data, refusing
    object arrays (pickled Python objects) and headers whose shape does not
    match the member's size; :meth:`read` then decompresses the data once,
    into an array of exactly that size. Every problem is a ValueError that
    names the file (FileNotFoundError if it does not exist).

    Parameters
    ----------
    path : str or path-like
    what : str, default "file"
        How messages call the file (``"dataset file"``, ``"checkpoint"``).
    max_bytes : int, optional
    """

    def __init__(self, path, what="file", max_bytes=None):
        import zipfile

        self.path = os.fspath(path)
        self.what = what
        limit = MAX_NPZ_BYTES if max_bytes is None else int(max_bytes)
        size = self._check_file()
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
            raise self.error(f"is not a valid .npz archive (truncated or corrupt zip: {exc})") from None
        self._members, total, packed, offsets = {}, 0, 0, set()
        for info in self._zip.infolist():
            name = info.filename
            if info.is_dir() or not name.endswith(".npy"):
                raise self.error(f"member {name!r} is not a .npy array (an .npz holds only .npy files)")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise self.error(f"member {name!r} uses an unsupported zip compression ({info.compress_type})")
            if name[:-4] in self._members or info.header_offset in offsets:
                raise self.error(f"member {name!r} is duplicated or overlaps another (not a valid .npz)")
            offsets.add(info.header_offset)
            stored = info.compress_type == zipfile.ZIP_STORED
            if (stored and info.file_size != info.compress_size) or (
                info.file_size > MAX_EXPANSION * info.compress_size + 4096
            ):
                raise self.error(
                    f"member {name!r} claims {info.file_size} bytes from {info.compress_size} compressed "
                    "(more than compression can produce: a corrupt file or a zip bomb)"
                )
            total += info.file_size
            packed += info.compress_size
            self._members[name[:-4]] = info
        if packed > size:
            raise self.error("members claim more compressed data than the file holds (corrupt, or a zip bomb)")
        if total > limit:
            raise self.error(f"would decompress to {total} bytes, above the limit of {limit} bytes")
        self._headers = {}
        for key in self._members:  # every header now (a few hundred bytes each): bad arrays fail early
            with self._open(key) as fp:
                shape, _, dtype, _ = self._read_header(key, fp)
            self._headers[key] = (shape, dtype)

    def _check_file(self):
        if not os.path.lexists(self.path):
            raise FileNotFoundError(f"{self.what} not found: {self.path}")
        if os.path.isdir(self.path):
            raise self.error("is a directory, not an .npz file")
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as fh:
                start = fh.read(512)
        except OSError as exc:
            raise self.error(f"cannot be read ({exc.strerror or exc})") from None
        if size == 0:
            raise self.error("is empty")
        if start.startswith(_NPY_MAGIC):
            raise self.error("holds a single .npy array, not an .npz archive")
        if not start.startswith(_ZIP_MAGICS):
            try:
                text = start.decode("utf-8")
                kind = "a text file" if all(c.isprintable() or c in "\t\r\n" for c in text) else None
            except UnicodeDecodeError:
                kind = None
            kind = kind or f"binary data {start[:8]!r}"
            raise self.error(f"is not an .npz archive (no zip signature: it is {kind})")
        return size

    def error(self, message):
        """An :class:`NpzError` about this file."""
        return NpzError(self.path, self.what, message)

    @property
    def keys(self):
        """Member names without ``.npy``, in archive order."""
        return list(self._members)

    def _open(self, key):
        import zipfile

        if key not in self._members:
            raise KeyError(f"{self.path} has no array {key!r}")
        try:
            return self._zip.open(self._members[key])
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
            raise self.error(f"member {key!r} cannot be read ({exc})") from None

    def _read_header(self, key, fp):
        import numpy as np

        fmt = np.lib.format
        try:
            version = fmt.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(fp)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(fp)
            else:
                raise ValueError(f".npy format version {version} is not supported")
        except (ValueError, SyntaxError, TypeError) as exc:  # numpy's header parsing
            raise self.error(f"member {key!r} is not a valid .npy array ({_one_line(exc)})") from None
        except Exception as exc:  # zlib.error, BadZipFile (CRC), EOFError: damaged data
            raise self.error(f"member {key!r} is corrupt ({_one_line(exc)})") from None
        if dtype.hasobject:
            raise self.error(f"member {key!r} holds pickled Python objects (dtype object), which gatfast never loads")
        count = 1
        for s in shape:
            count *= int(s)
        nbytes = count * dtype.itemsize
        header_bytes = fp.tell()
        if nbytes != self._members[key].file_size - header_bytes:
            raise self.error(
                f"member {key!r}: its header claims shape {shape} of {dtype} ({nbytes} bytes) but the member "
                f"holds {self._members[key].file_size - header_bytes} bytes of data"
            )
        return shape, fortran, dtype, nbytes

    def header(self, key):
        """``(shape, dtype)`` of member ``key``, from its header only."""
        if key not in self._headers:
            raise KeyError(f"{self.path} has no array {key!r}")
        return self._headers[key]

    def read(self, key):
        """Member ``key`` as an array (its data decompressed once, into memory of the checked size)."""
        import numpy as np

        with self._open(key) as fp:
            shape, fortran, dtype, nbytes = self._read_header(key, fp)
            try:
                flat = np.empty(nbytes, np.uint8)
                view, pos = memoryview(flat), 0
                while pos < nbytes:
                    got = fp.readinto(view[pos : pos + _CHUNK])
                    if not got:
                        raise EOFError("the data ends early")
                    pos += got
                if fp.read(1):
                    raise ValueError("data continues after the array")
            except (OSError, EOFError, ValueError) as exc:
                raise self.error(f"member {key!r} cannot be read ({_one_line(exc)})") from None
            except Exception as exc:  # zlib.error, BadZipFile (CRC) and the like
                raise self.error(f"member {key!r} is corrupt ({_one_line(exc)})") from None
        if dtype.itemsize == 0:
            return np.empty(shape, dtype)
        return flat.view(dtype).reshape(shape, order="F" if fortran else "C")

    def read_all(self):
        """Every member, ``{key: array}``."""
        return {key: self.read(key) for key in self._members}

    def close(self):
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _one_line(exc):
    return " ".join(str(exc).split()) or type(exc).__name__
