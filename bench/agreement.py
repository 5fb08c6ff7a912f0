"""Same function, checked before timing: a peer's outputs and gradients against gatfast's.

Every runner (``GatfastRunner``, ``PygRunner``, ``DglRunner``) has
``outputs()``: a dict of float arrays under gatfast's names (``out``, the
parameter gradients, ``x`` / ``x_src`` / ``x_dst``, ``edge_attr``). Two of
them agree when they hold the same names and every array differs by at most
``FLOAT32_TOL`` in norm-wise relative terms: ``|a - b| / max(|a|, |b|)`` for
``out``, and for a gradient ``|a - b| / max(|a|, |b|, FLOOR * G)``, with
``G`` the norm of all the gradients together. The floor is there for
gradients that are (nearly) zero in exact arithmetic, such as Θ_R's when
every in-edge of a node sits in one LeakyReLU regime (the output layer of
``scene-batch-train``: 1e-17 in float64): in float32 both sides hold only
rounding noise there, about 1e-8, and no relative measure of it means
anything. A wrong weight mapping still shows: its error is of the order of
the gradient itself. ``compare.py``'s workers and the pytest-benchmark
suites run :func:`check` before any timing; a mismatch raises
:class:`Disagreement` and the run fails.

The norms are accumulated in float64 over chunks of at most ``CHUNK``
elements, so a check of a full-size workload allocates a few MB, not copies
of its arrays (it may run inside a worker's peak-memory window).
"""

from __future__ import annotations

import math

import numpy as np

from gatfast._io import atomic_write

# Norm-wise relative difference allowed between a peer and gatfast in float32. Each side's own
# rounding error bounds it from below: on `large` (2.2 M edges summed into W_r), against a float64
# run of the same weights, PyG's W_r gradient is 1.6e-4 off and gatfast's 6.4e-5 (2026-11-25; while
# both summed their dense products through OpenBLAS their errors were alike, 1.6e-4 and 1.9e-4, and
# differed from each other by under 1e-4). A wrong formula or weight mapping shows at order 1.
FLOAT32_TOL = 3e-4
FLOOR = 1e-2  # a gradient is judged against at least this share of the whole gradient's norm
CHUNK = 1 << 20


class Disagreement(AssertionError):
    """A peer does not compute gatfast's function on a workload."""


def _norms(a, b):
    """Squared norms of ``a``, ``b`` and ``a - b``, accumulated in float64 over chunks."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        raise Disagreement(f"shapes differ: {a.shape} vs {b.shape}")
    fa, fb = a.reshape(-1), b.reshape(-1)
    na = nb = nd = 0.0
    for lo in range(0, fa.size, CHUNK):
        ca = fa[lo : lo + CHUNK].astype(np.float64)
        cb = fb[lo : lo + CHUNK].astype(np.float64)
        na += float(ca @ ca)
        nb += float(cb @ cb)
        ca -= cb
        nd += float(ca @ ca)
    return na, nb, nd


def _ratio(nd, scale):
    if not (math.isfinite(scale) and math.isfinite(nd)):
        return math.inf
    return 0.0 if scale == 0 else math.sqrt(nd) / scale


def rel_err(a, b):
    """Norm-wise relative difference ``|a - b| / max(|a|, |b|)`` (0 for two zero arrays)."""
    na, nb, nd = _norms(a, b)
    return _ratio(nd, math.sqrt(max(na, nb)))


def errors(got, want):
    """``{name: error}`` over the names of ``want`` (see the module docstring); a name missing on either side fails."""
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing or extra:
        raise Disagreement(f"the peer's outputs lack {missing} and have extra {extra}")
    norms = {k: _norms(got[k], want[k]) for k in want}
    whole = math.sqrt(sum(max(na, nb) for k, (na, nb, _) in norms.items() if k != "out"))
    errs = {}
    for k, (na, nb, nd) in norms.items():
        floor = 0.0 if k == "out" else FLOOR * whole
        errs[k] = _ratio(nd, max(math.sqrt(na), math.sqrt(nb), floor))
    return errs


def check(got, want, peer, workload, tol=FLOAT32_TOL):
    """Raise :class:`Disagreement` unless every array agrees within ``tol``; returns ``{name: rel_err}``."""
    errs = errors(got, want)
    worst = max(errs, key=errs.get)
    if not errs[worst] <= tol:
        raise Disagreement(
            f"{peer} and gatfast differ on {workload}: {worst} rel. error {errs[worst]:.2e} > "
            f"{tol:g} ({', '.join(f'{k} {v:.1e}' for k, v in errs.items())})"
        )
    return errs


def save(path, arrays):
    """Write a reference (name -> array) to ``path`` (.npz, atomically)."""
    atomic_write(path, lambda fh: np.savez(fh, **{k: np.asarray(v) for k, v in arrays.items()}))


def load(path):
    """A reference written by :func:`save`, as a dict of arrays."""
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}
