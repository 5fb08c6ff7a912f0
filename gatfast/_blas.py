"""Run a block with OpenBLAS capped at one thread, restoring it afterwards.

Dependency-free (ctypes on the OpenBLAS builds already loaded), so that the
runtime needs only numpy, scipy and numba.
"""

from __future__ import annotations

import ctypes

__all__ = ["ONE_BLAS_THREAD"]


class _OneBlasThread:
    """Cap OpenBLAS at one thread while a layer runs (a re-entrant context manager).

    After every multi-threaded call OpenBLAS's worker threads busy-wait for a
    while; on a machine with as many cores as Numba threads they take the
    cores that Numba's parallel kernels need, and every kernel then waits for
    a descheduled thread (measured on 2 cores: forward + backward of a
    200,000-node layer 2.5 s with 2 BLAS threads, 0.48 s with 1). The layer's
    dense products are skinny and small next to the edge kernels, so one BLAS
    thread costs little. The previous setting is restored on exit. Finds the
    OpenBLAS builds already loaded (NumPy's and SciPy's wheels, or a system
    one); does nothing where there is none (MKL, Accelerate).
    """

    _SYMBOLS = (
        ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
        ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
        ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
        ("openblas_get_num_threads", "openblas_set_num_threads"),
    )

    def __init__(self):
        self._controls = None
        self._depth = 0
        self._saved = []

    def _find(self):
        controls = []
        try:
            with open("/proc/self/maps") as fh:
                paths = sorted({line.split()[-1] for line in fh if "openblas" in line.lower() and "/" in line})
            for path in paths:
                lib = ctypes.CDLL(path)
                for get_name, set_name in self._SYMBOLS:
                    if hasattr(lib, get_name) and hasattr(lib, set_name):
                        get, set_ = getattr(lib, get_name), getattr(lib, set_name)
                        get.restype, get.argtypes = ctypes.c_int, []
                        set_.restype, set_.argtypes = None, [ctypes.c_int]
                        controls.append((get, set_))
                        break
        except (OSError, AttributeError, IndexError):
            pass  # not Linux, or an unexpected library: leave BLAS alone
        return controls

    def __enter__(self):
        if self._depth == 0:
            if self._controls is None:
                self._controls = self._find()
            self._saved = []
            for get, set_ in self._controls:
                before = get()
                if before != 1:
                    set_(1)
                self._saved.append(before)
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for (_, set_), before in zip(self._controls, self._saved):
                if before != 1:
                    set_(before)


ONE_BLAS_THREAD = _OneBlasThread()
"""The process-wide instance the layer enters around forward and backward."""
