"""Software prefetch for the gathers of the edge loops.

The edge loops read rows ``xl[j]`` (and in the source pass ``xr[i]``,
``grad[i]``, ``alpha[e]``) of nodes or edges scattered over the whole
graph. On graphs larger than the last-level cache each such row is a
main-memory miss, and the long per-edge arithmetic leaves the CPU's
out-of-order window too small to overlap them. Asking for the rows of the
edge ``PREFETCH_DISTANCE`` positions ahead hides that latency (about 5x on a
200,000-node graph). On batches of small graphs, whose edges join rows a
few apart, the passes ask instead for the rows a window past the current
row (:data:`WINDOW`). A prefetch is only a hint: it never faults (even past
the end of an array) and never changes a result.
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# edges ahead of the one being computed; 16-32 works best on rows of 32-64 floats
PREFETCH_DISTANCE = 16
CACHE_LINE = 64  # bytes

#: The backward source pass prefetches nothing when the rows it gathers fit
#: in this many bytes in all: the caches already hold them, and the 4-5
#: prefetches per edge (and the index loads that address them) are pure cost.
#: One thread, 2-core AMD EPYC, ns per edge without / with, on random graphs
#: of in-degree 5: 32 channels, 2.8 MB gathered 103 / 116, 5.7 MB 136 / 94;
#: 64 channels, 5.3 MB 78 / 108, 10.5 MB 205 / 136. (Measured on the pass
#: that forms z, whose gathered rows these sizes count; with LeakyReLU the
#: edge prefetch now also switches to the source records, ``records.py``.)
SMALL_GATHER_BYTES = 4 << 20

#: Bigger graphs whose edge's two rows lie at most this far apart on average
#: (batches of small graphs) get the :data:`WINDOW` prefetch instead of the
#: edge prefetch: on batches of graphs of 8-32 nodes (mean span 6 rows), 32
#: channels, the edge prefetch lost at every size: 5.8 MB gathered 45 / 58
#: ns per edge without / with, 185 MB 33 / 49.
LOCAL_SPAN_BYTES = 32 << 10

#: The source pass's ``ahead`` that asks, for each source ``j``, for the rows
#: ``xr`` and ``grad`` of node ``j + window_rows(row bytes)`` (about
#: :data:`WINDOW_AHEAD_BYTES` of rows ahead) instead of the rows of later
#: edges. In a batch of small graphs a source's targets lie a few rows from
#: it, so those are the rows the sources just ahead will gather, and 2
#: prefetches per source (no index to load) cost far less than 4-5 per edge.
#: Without any, each such row was a cache miss (the hardware prefetchers do
#: not follow gathers at random within a graph's few rows): on ``small-batch``
#: (1024 graphs of 8-32 nodes, 5.8 MB gathered, 1 x 32 channels, one thread,
#: AMD EPYC Zen 4) the pass took 0.64-0.74 ms with windows of 24 to 128 rows
#: of 128 bytes and 1.0-1.1 ms without (old and new kernels alternating in one
#: process), and the whole step 0.955x the time. The forward kernels and
#: the backward's target pass take it too (``layers.passes.forward_prefetch``:
#: one prefetch of ``xl`` per target row instead of one per edge, where the
#: graph is local by the same test): on ``small-batch`` a copy of the forward
#: kernel took 1.74-1.80 ms with it and 1.82-1.89 with the edge prefetch
#: (2.14-2.17 with none), the target pass 1.47-1.50 instead of 1.69-1.72, and
#: the step 0.966-0.980x the time (small-batch-edge 0.973-0.982x). On random
#: graphs the window's rows are no better than any other, so they do not get
#: it.
WINDOW = 0
WINDOW_AHEAD_BYTES = 4 << 10


@njit(inline="always", cache=True)
def window_rows(row_bytes):
    """How many rows past the current row (target, or the source pass's source) the :data:`WINDOW`
    prefetch asks for (at least 4)."""
    return max(4, WINDOW_AHEAD_BYTES // max(row_bytes, 1))


def source_pass_ahead(gathered_bytes, mean_span_bytes):
    """What the backward source pass prefetches: None (nothing), :data:`WINDOW`, or the edge distance
    :data:`PREFETCH_DISTANCE` (see :data:`SMALL_GATHER_BYTES` and :data:`LOCAL_SPAN_BYTES`).

    ``mean_span_bytes`` is a function that returns the span, called only
    when the gathered bytes do not decide alone. None rather than
    :data:`WINDOW` for graphs in cache: None is a type of its own, so the
    kernels compile it as a function without any prefetch code.
    """
    if gathered_bytes <= SMALL_GATHER_BYTES:
        return None
    return gather_prefetch(mean_span_bytes())


def gather_prefetch(mean_span_bytes):
    """What a pass that gathers rows prefetches, given how far apart an edge's two rows lie on average in
    bytes: :data:`WINDOW` up to :data:`LOCAL_SPAN_BYTES` (batches of small graphs), else the rows of the
    edge :data:`PREFETCH_DISTANCE` positions on."""
    return WINDOW if mean_span_bytes <= LOCAL_SPAN_BYTES else PREFETCH_DISTANCE


def _emit_prefetch(builder, ptr):
    """One prefetch instruction for the line of ``ptr`` (an ``i8*``): read, keep in all cache levels."""
    i32 = ir.IntType(32)
    fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
    builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


def _row_start(context, builder, signature, args):
    """``(i8* to arr[row], intp type)`` from the intrinsic's first two arguments (the array and a row)."""
    ary = context.make_array(signature.args[0])(context, builder, args[0])
    intp = context.get_value_type(types.intp)
    row = context.cast(builder, args[1], signature.args[1], types.intp)
    i8p = ir.IntType(8).as_pointer()
    offset = builder.mul(row, builder.extract_value(ary.strides, 0))
    return builder.gep(builder.bitcast(ary.data, i8p), [offset]), intp


def _prefetch_lines(builder, base, first, stop, intp):
    """A prefetch for every line from byte ``first`` (intp) while below ``stop``, stepping one line."""
    line = ir.Constant(intp, CACHE_LINE)
    with cgutils.for_range_slice(builder, first, stop, line, intp) as (off, _):
        _emit_prefetch(builder, builder.gep(base, [off]))


def _array_row_bytes(*args):
    """The argument types fit: an array of at least one dimension, then integers."""
    arr, *ints = args
    return isinstance(arr, types.Array) and arr.ndim >= 1 and all(isinstance(t, types.Integer) for t in ints)


# The helpers below are intrinsics, not ``njit(inline="always")`` functions: Numba's inlining copies
# the array arguments into new variables, with a reference-count increment and decrement (atomic
# calls into the runtime) that it could not prune out of the kernels' edge loops. In the backward
# source pass (in-degree 256, 32 channels, one thread, Intel Xeon) those calls took 30 of 38 ms, in
# a loop whose prefetch branch was never taken.


def _row_prefetch(arr, row, row_bytes, last_line):
    """The typing and code of :func:`prefetch_row` (``last_line``: of :func:`prefetch_whole_row`)."""
    if not _array_row_bytes(arr, row, row_bytes):
        return None
    sig = types.void(arr, row, row_bytes)

    def codegen(context, builder, signature, args):
        base, intp = _row_start(context, builder, signature, args)
        stop = context.cast(builder, args[2], signature.args[2], types.intp)
        _prefetch_lines(builder, base, ir.Constant(intp, 0), stop, intp)
        if last_line:
            with builder.if_then(builder.icmp_signed(">", stop, ir.Constant(intp, 0))):
                _emit_prefetch(builder, builder.gep(base, [builder.sub(stop, ir.Constant(intp, 1))]))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_row(typingctx, arr, row, row_bytes):
    """Prefetch the first ``row_bytes`` bytes of ``arr[row]`` (one prefetch per 64-byte step)."""
    return _row_prefetch(arr, row, row_bytes, last_line=False)


@intrinsic
def prefetch_whole_row(typingctx, arr, row, row_bytes):
    """Prefetch the first ``row_bytes`` bytes of ``arr[row]`` and the line of its last byte.

    An array from malloc starts 16 bytes past a line boundary, so a row of
    256 bytes spans 5 lines, one more than :func:`prefetch_row` asks for."""
    return _row_prefetch(arr, row, row_bytes, last_line=True)


@intrinsic
def prefetch_span(typingctx, arr, lo, hi, max_bytes):
    """Prefetch the cache lines of the 1-D ``arr[lo:hi]`` (a CSR row), the first ``max_bytes`` of it.

    A row rarely starts on a line boundary: a fixed number of bytes from its
    start leaves its last line out about as often as not, so the last
    byte is asked for as well."""
    if not _array_row_bytes(arr, lo, hi, max_bytes) or arr.ndim != 1:
        return None
    sig = types.void(arr, lo, hi, max_bytes)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        lo, hi, cap = (context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], signature.args[1:]))
        item = ir.Constant(intp, context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype)))
        first = builder.mul(lo, item)
        end = builder.mul(hi, item)
        capped = builder.add(first, cap)
        end = builder.select(builder.icmp_signed("<", end, capped), end, capped)
        last = builder.sub(end, ir.Constant(intp, 1))
        base = builder.bitcast(ary.data, ir.IntType(8).as_pointer())
        _prefetch_lines(builder, base, first, last, intp)
        with builder.if_then(builder.icmp_signed(">=", last, first)):
            _emit_prefetch(builder, builder.gep(base, [last]))
        return context.get_dummy_value()

    return sig, codegen
