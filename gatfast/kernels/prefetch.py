"""Software prefetch for the gathers of the edge loops.

The edge loops read rows ``xl[j]`` (and in the source pass ``xr[i]``,
``grad[i]``, ``alpha[e]``) of nodes or edges scattered over the whole
graph. On graphs larger than the last-level cache each such row is a
main-memory miss, and the long per-edge arithmetic leaves the CPU's
out-of-order window too small to overlap them. Asking for the rows of the
edge ``PREFETCH_DISTANCE`` positions ahead hides that latency (about 5x on a
200,000-node graph). A prefetch is only a hint: it never faults (even past
the end of an array) and never changes a result.
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# edges ahead of the one being computed; 16-32 works best on rows of 32-64 floats
PREFETCH_DISTANCE = 16
CACHE_LINE = 64  # bytes

#: The backward source pass skips its prefetches when the rows it gathers fit
#: in this many bytes in all, or when an edge's two rows lie at most
#: LOCAL_SPAN_BYTES apart on average (batches of small graphs): there the
#: caches already hold them or the hardware's own prefetchers find them, and
#: the 4-5 prefetches per edge (and the index loads that address them) are
#: pure cost. One thread, 2-core AMD EPYC, ns per edge without / with, on
#: random graphs of in-degree 5: 32 channels, 2.8 MB gathered 103 / 116,
#: 5.7 MB 136 / 94; 64 channels, 5.3 MB 78 / 108, 10.5 MB 205 / 136. On
#: batches of graphs of 8-32 nodes (mean span 6 rows), 32 channels, without
#: wins at every size: 5.8 MB 45 / 58, 185 MB 33 / 49.
SMALL_GATHER_BYTES = 4 << 20
LOCAL_SPAN_BYTES = 32 << 10


def source_pass_ahead(gathered_bytes, mean_span_bytes):
    """How many edges ahead the backward source pass prefetches (None: not at all); see SMALL_GATHER_BYTES.

    ``mean_span_bytes`` is a function that returns the span: it is a pass
    over the graph (and a kernel to compile), called only when the gathered
    bytes do not decide alone. None rather than 0: the kernels compile the
    two cases as separate functions, and a run that never prefetches never
    compiles that one.
    """
    if gathered_bytes <= SMALL_GATHER_BYTES or mean_span_bytes() <= LOCAL_SPAN_BYTES:
        return None
    return PREFETCH_DISTANCE


@intrinsic
def _prefetch_byte(typingctx, arr, row, offset):
    """Prefetch the byte ``offset`` of row ``row`` of ``arr`` (read, keep in all cache levels)."""
    if not isinstance(arr, types.Array) or arr.ndim < 1:
        return None
    if not isinstance(row, types.Integer) or not isinstance(offset, types.Integer):
        return None
    sig = types.void(arr, row, offset)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        r = context.cast(builder, args[1], signature.args[1], types.intp)
        off = context.cast(builder, args[2], signature.args[2], types.intp)
        stride0 = builder.extract_value(ary.strides, 0)
        nbytes = builder.add(builder.mul(r, stride0), off)
        i8p = ir.IntType(8).as_pointer()
        ptr = builder.gep(builder.bitcast(ary.data, i8p), [nbytes])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always", cache=True)
def prefetch_row(arr, row, row_bytes):
    """Prefetch the first ``row_bytes`` bytes of ``arr[row]``."""
    for off in range(0, row_bytes, CACHE_LINE):
        _prefetch_byte(arr, row, off)


@njit(inline="always", cache=True)
def prefetch_whole_row(arr, row, row_bytes):
    """Prefetch the first ``row_bytes`` bytes of ``arr[row]`` and the line of its last byte.

    An array from malloc starts 16 bytes past a line boundary, so a row of
    256 bytes spans 5 lines, one more than :func:`prefetch_row` asks for."""
    prefetch_row(arr, row, row_bytes)
    _prefetch_byte(arr, row, row_bytes - 1)


@njit(inline="always", cache=True)
def prefetch_span(arr, lo, hi, max_bytes):
    """Prefetch the cache lines of the 1-D ``arr[lo:hi]`` (a CSR row), the first ``max_bytes`` of it.

    A row rarely starts on a line boundary: a fixed number of bytes from its
    start leaves its last line out about as often as not, so the last
    byte is asked for as well."""
    first = lo * arr.itemsize
    last = min(hi * arr.itemsize, first + max_bytes) - 1
    for off in range(first, last, CACHE_LINE):
        _prefetch_byte(arr, 0, off)
    if last >= first:
        _prefetch_byte(arr, 0, last)
