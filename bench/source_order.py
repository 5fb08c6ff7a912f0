"""What the backward source pass gains from other data layouts: the source records and prototypes, timed
against the pass that forms ``z`` again.

The source pass (``gatfast/kernels/backward.py``) walks each source's edges
in source-major order. Where it forms ``z`` again (graphs that fit in cache,
and every graph before the source records), it gathers for every edge
``xr[i]`` (and, with edge features, ``u[e]``) to form ``z_ij`` again, only
for its sign, and it reads ``alpha[e]`` and ``delta[e]`` at the edge's CSR
position, which is random in that order. This script captures the arguments
of that pass on one workload (the records switched off), then times on the
same data, one thread each, alternating with it, and checks that each gives
the same bits:

* ``records``: today's pass on big graphs (``kernels/records.py``): the
  weight, ``delta`` and the signs as bits of each edge in one row the target
  pass writes in CSR order, read at the edge's CSR position;
* ``order``: ``alpha`` and ``delta`` copied into source-major order (read in
  sequence), ``z`` formed as today (no edge features only: it has no edge term);
* ``signs``: one byte per edge and channel, ``z > 0``, in source-major order,
  instead of forming ``z``; ``alpha`` and ``delta`` gathered as today;
* ``signs in CSR order``: the same bytes in the edges' CSR order (the
  target pass's own order, where it could write them in sequence), read at
  each edge's CSR position (big graphs with edge features used these
  before the records);
* ``both``: ``order`` and ``signs`` together;

and, without edge features, what writing the sign bytes into source order
would cost the target pass: a pass of its own over the edges in CSR order
that forms ``z`` and writes each edge's bytes to its source-major row (an
upper bound: in the target pass ``xr[i]`` and ``xl[j]`` are already loaded).

The prototypes and the records leave out what producing their inputs costs
(the target pass writes the records in sequence; the prototypes would need
the signs and the permuted ``delta``, the forward pass the permuted
``alpha``): they bound the gain, they do not measure a finished change. The
sign bytes are ``edges x channels`` bytes (134 MiB on ``large``); the
records, with their bits, 16 bytes an edge there.

Usage::

    python bench/source_order.py                        # large and large-edge, 7 rounds
    python bench/source_order.py --workloads large --rounds 3
    python bench/source_order.py --size tiny --rounds 1  # a smoke run

It prints a markdown table and writes nothing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numba  # noqa: E402
import workloads  # noqa: E402
from numba import njit  # noqa: E402

from gatfast import _runtime  # noqa: E402
from gatfast.kernels import gatv2_backward_source_record_rows, record_bytes  # noqa: E402
from gatfast.kernels.prefetch import WINDOW, prefetch_row  # noqa: E402
from gatfast.layers import passes  # noqa: E402

SOURCE_KERNELS = ("gatv2_backward_source_rows", "gatv2_backward_source_edge_rows")
BASE = "forms z"  # the row every time is divided by


@njit(nogil=True)
def _prototype(
    j0,
    j1,
    src_indptr,
    edge_ids,
    src_targets,
    att,
    slope,
    ahead,
    xl,
    xr,
    signs,
    sign_ids,
    alpha,
    delta,
    grad,
    q_out,
):
    """The LeakyReLU source pass reading ``signs`` (source order, one byte per channel), or forming
    ``z = xr + xl`` where ``signs`` is None; the signs of position ``p`` in row ``p``, or in row
    ``sign_ids[p]`` (CSR order); ``alpha``/``delta`` at the CSR positions ``edge_ids[p]``, or in source
    order where ``edge_ids`` is None. None is a type of its own: each case compiles on its own,
    without the other's branches."""
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * grad.itemsize
    zero = grad.dtype.type(0.0)
    one = grad.dtype.type(1.0)
    for j in range(j0, j1):
        for h in range(heads):
            for c in range(channels):
                q_out[j, h, c] = zero
        for p in range(src_indptr[j], src_indptr[j + 1]):
            if p + ahead < src_targets.size:
                prefetch_row(grad, src_targets[p + ahead], row_bytes)
                if signs is None:
                    prefetch_row(xr, src_targets[p + ahead], row_bytes)
                if sign_ids is not None:
                    prefetch_row(signs, sign_ids[p + ahead], heads * channels)
                if edge_ids is not None:
                    prefetch_row(alpha, edge_ids[p + ahead], heads * alpha.itemsize)
                    prefetch_row(delta, edge_ids[p + ahead], heads * delta.itemsize)
            i = src_targets[p]
            e = p if edge_ids is None else edge_ids[p]
            row = p if sign_ids is None else sign_ids[p]
            for h in range(heads):
                dl = delta[e, h]
                w = alpha[e, h]
                if signs is None:
                    for c in range(channels):
                        s = one if xr[i, h, c] + xl[j, h, c] > zero else slope
                        q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]
                else:
                    for c in range(channels):
                        s = one if signs[row, h * channels + c] != 0 else slope
                        q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]


@njit(nogil=True)
def _scatter_signs(indptr, indices, positions, xl, xr, signs):
    """A pass of its own in the target pass's order (CSR): ``z = xr[i] + xl[j]`` and its signs written to
    row ``positions[e]``, the edge's source-major position: the random writes the signs would cost there."""
    heads = xl.shape[1]
    channels = xl.shape[2]
    zero = xl.dtype.type(0.0)
    for i in range(indptr.size - 1):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            row = positions[e]
            for h in range(heads):
                for c in range(channels):
                    signs[row, h * channels + c] = 1 if xr[i, h, c] + xl[j, h, c] > zero else 0


def scatter_cost(name, size, src_edges, xl, xr, signs, rounds):
    """Seconds (median) of :func:`_scatter_signs` on the workload's graph, and whether it wrote ``signs``."""
    graph = workloads.make_workload(name, size).graph
    positions = np.empty_like(src_edges)
    positions[src_edges] = np.arange(src_edges.size)
    out = np.empty_like(signs)
    times = []
    for _ in range(rounds + 1):
        t0 = time.perf_counter()
        _scatter_signs(graph.indptr, graph.indices, positions, xl, xr, out)
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:])), bool(np.array_equal(out, signs))


def capture(name, size):
    """The workload's source-pass kernel and its arguments, from one forward + backward on one thread."""
    seen = {}
    run_rows = _runtime.run_rows

    def recording(kernel, count, args, work):
        seen[kernel.__name__] = (kernel, count, args)
        return run_rows(kernel, count, args, work)

    uses_records = passes.uses_source_records
    _runtime.run_rows = recording
    passes.uses_source_records = lambda kind, ahead, row_bytes: False  # the pass that forms z, at any size
    try:
        workloads.GatfastRunner(workloads.make_workload(name, size)).forward_backward()
    finally:
        _runtime.run_rows = run_rows
        passes.uses_source_records = uses_records
    found = [k for k in SOURCE_KERNELS if k in seen]
    if not found:
        raise SystemExit(f"{name}: no source pass ran")
    return found[0], seen[found[0]]


def records_in_csr_order(signs_csr, alpha, edge_scale, delta):
    """The source records (``kernels/records.py``) of the edges, from their sign bytes in CSR order."""
    edges, heads = alpha.shape
    channels = signs_csr.shape[1] // heads
    records = np.zeros((edges, record_bytes(heads, channels, alpha.itemsize)), np.uint8)
    floats = records.view(alpha.dtype)
    floats[:, :heads] = alpha * edge_scale if edge_scale.shape[0] else alpha
    floats[:, heads : 2 * heads] = delta
    bits = np.packbits(signs_csr.reshape(edges, heads, channels) != 0, axis=2, bitorder="little")
    base = 2 * heads * alpha.itemsize
    records[:, base : base + bits[0].size] = bits.reshape(edges, -1)
    return records


def signs_in_source_order(src_indptr, src_edges, src_targets, xl, xr, att, u, weT):
    """``z > 0`` per edge and channel (one byte each), rows in source-major order: z formed as the kernels do
    (``u``/``weT`` None: no edge term)."""
    sources = np.repeat(np.arange(src_indptr.size - 1), np.diff(src_indptr))
    heads, channels = att.shape
    signs = np.empty((src_edges.size, heads * channels), np.uint8)
    for lo in range(0, src_edges.size, 1 << 18):
        hi = min(src_edges.size, lo + (1 << 18))
        z = xr[src_targets[lo:hi]] + xl[sources[lo:hi]]
        if u is not None:
            for d in range(u.shape[1]):
                z = z + weT[None, :, d, :] * u[src_edges[lo:hi], d][:, None, None]
        signs[lo:hi] = (z > 0).reshape(hi - lo, -1)
    return signs


def measure(name, rounds, size="full"):
    kname, (kernel, count, args) = capture(name, size)
    edge = kname.endswith("edge_rows")
    src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, ahead = args[:9]
    edge_scale, alpha, delta, grad, q_out = args[-5:]
    # the prototypes and the records pass prefetch by edge; the window of batches of small graphs
    # (prefetch.WINDOW) is the captured kernel's own, so they prefetch nothing there
    records_ahead = None if ahead == WINDOW else ahead
    ahead = (1 << 62) if ahead is None or ahead == WINDOW else ahead
    u, weT = (args[9], args[10]) if edge else (None, None)
    signs = signs_in_source_order(src_indptr, src_edges, src_targets, xl, xr, att, u, weT)
    alpha_s, delta_s = np.ascontiguousarray(alpha[src_edges]), np.ascontiguousarray(delta[src_edges])
    permute = []  # what producing one source-order array by a gather would cost (numpy, this thread)
    for _ in range(3):
        t0 = time.perf_counter()
        np.take(alpha, src_edges, axis=0, out=np.empty_like(alpha))
        permute.append(time.perf_counter() - t0)
    kernel(0, count, *args)
    want = q_out.copy()
    signs_csr = np.empty_like(signs)
    signs_csr[src_edges] = signs
    variants = {
        "signs": (src_edges, signs, None, alpha, delta),
        "signs in CSR order": (src_edges, signs_csr, src_edges, alpha, delta),
        "both": (None, signs, None, alpha_s, delta_s),
    }
    if not edge:  # without the edge term, z = xr + xl is the pass's z
        variants = {"order": (None, None, None, alpha_s, delta_s), **variants}
    got = np.empty_like(q_out)
    records = records_in_csr_order(signs_csr, alpha, edge_scale, delta)

    def prototype(ids, s, s_ids, a, d):
        return lambda: _prototype(
            0, count, src_indptr, ids, src_targets, att, slope, ahead, xl, xr, s, s_ids, a, d, grad, got
        )

    runs = {
        "records": lambda: gatv2_backward_source_record_rows(
            0,
            count,
            src_indptr,
            src_edges,
            src_targets,
            att,
            slope,
            records_ahead,
            records.view(alpha.dtype),
            records,
            grad,
            got,
        ),
        **{label: prototype(*v) for label, v in variants.items()},
    }
    for label, run in runs.items():
        run()
        if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
            raise SystemExit(f"{name}: the {label} variant does not give the bits of the pass forming z")
    times = {BASE: [], **{label: [] for label in runs}}
    for _ in range(rounds):
        t0 = time.perf_counter()
        kernel(0, count, *args)
        times[BASE].append(time.perf_counter() - t0)
        for label, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[label].append(time.perf_counter() - t0)
    base = np.array(times[BASE])
    res = {k: (float(np.median(v)), float(np.median(np.array(v) / base))) for k, v in times.items()}
    scatter = None if edge else scatter_cost(name, size, src_edges, xl, xr, signs, rounds)
    return kname, signs.nbytes, float(np.median(permute)), scatter, res


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workloads", default="large,large-edge", help="layer workloads (default: large,large-edge)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (median)")
    parser.add_argument("--size", choices=workloads.SIZES, default="full", help="tiny: a smoke run (seconds)")
    args = parser.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    bad = [n for n in names if workloads.WORKLOADS.get(n, ("",))[0] != "layer"]
    if bad or not names:
        parser.error(f"--workloads: not layer workloads: {bad}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    from rooflib.cpu import CPU

    if args.size == "tiny":
        print("smoke run (tiny sizes): not the published results")
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {CPU['model']}, {CPU['simd']}, one thread, "
        f"python {platform.python_version()}, numba {numba.__version__}; median of {args.rounds} alternating rounds"
    )
    print(f"| workload | kernel forming z | variant | time | × {BASE} |")
    print("|---|---|---|---:|---:|")
    # one thread, restored afterwards: main() also runs inside the test process
    with _runtime.threads(1):
        for name in names:
            kname, sign_bytes, permute_s, scatter, res = measure(name, args.rounds, args.size)
            for label, (median, ratio) in res.items():
                print(f"| {name} | `{kname}` | {label} | {median * 1e3:.1f} ms | {ratio:.2f} |", flush=True)
            print(
                f"| {name} | | (sign bytes: {sign_bytes / 2**20:.0f} MiB; gathering `alpha` into source order: "
                f"{permute_s * 1e3:.1f} ms) | | |"
            )
            if scatter is not None:
                if not scatter[1]:
                    raise SystemExit(f"{name}: the scattered signs differ from the source-order signs")
                print(
                    f"| {name} | | writing the signs in source order, a pass of its own in CSR order | "
                    f"{scatter[0] * 1e3:.1f} ms | {scatter[0] / res[BASE][0]:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
