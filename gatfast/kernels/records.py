"""Source records: what the backward source pass needs of an edge, in one short row written by the target pass.

Without them the LeakyReLU source pass (``backward.py``) gathers, for every
edge ``j -> i`` in source order, the target's rows ``xr[i]`` (only to form
``z_ij = xr[i] + xl[j]`` again for its sign) and ``grad[i]``, and the edge's
``alpha[e]`` and ``delta[e]`` from two more arrays: on a graph much larger
than the cache each is a miss of its own, ``2 ceil(HC itemsize / 64) + 2``
cache lines per edge (10 at one head of 64 float32 channels).

The target pass already holds ``z_ij`` in registers, and ``alpha``/``delta``
of the row it works on. It writes, sequentially in CSR order, one record per
edge: the weight ``w = alpha[e, h]`` (times the dropout multiplier), then
``delta[e, h]``, for every head, then the signs ``z > 0`` as bits (bit ``c mod
8`` of byte ``h ceil(C / 8) + c // 8`` after the floats), the row padded to a
whole number of floats: 16 bytes at one head of 64 float32 channels. The
source pass then gathers ``grad[i]`` and the record, one line: 5 lines per
edge instead of 10 there. Every value is the one the pass used to compute or
read, so the results are the same bits (``tests/test_source_records.py``).

Big graphs with edge features had the target pass write one byte per edge
and channel (``z > 0``, 134 MiB on ``large-edge``) instead; the records
replace those bytes with bits and add the weight and ``δ``.

Measured on a 2-vCPU AMD EPYC (Zen 4, AVX-512), ``large``: 200,000 nodes,
2.2 million edges, 1 x 64 channels. ``python bench/source_order.py`` (one
thread, the same data): the source pass from records took 0.63x the time of
the pass that forms ``z`` on ``large``, 0.36x on ``large-edge`` (the sign
bytes: 0.73x). In the layer's step (2 threads), the source pass went from
133-144 to 82-85 ms on ``large`` and the target pass took about 10 ms more
for the writes; ``python bench/ab.py large --base d96cb07`` gave 0.905x the
step's time (279 -> 253 ms), ``large-edge`` 0.98x (341 -> 334 ms, within
noise; its sign bytes had taken 103 ms to read, the records 78-81 ms).
Used where the source pass prefetches by edge (its gathers miss the cache) and the
target rows it would gather are big (:data:`RECORD_MIN_ROW_BYTES`;
``layers/passes.py``): on graphs that fit in cache the records are writes
the pass does not need; forced there (with the prefetches), the step took
1.08x the time on ``small-batch`` and 1.04x on ``cora`` (one process,
alternating, 2 threads).
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .activations import LEAKY_RELU
from .ir_parts import (
    ALL_HEADS,
    add_source_term,
    all_contiguous,
    arrays_ok,
    element_pointer,
    for_heads,
    leaky_setup,
    load_index,
    store_vector,
    vector_groups,
    whole_vector_channels,
)
from .prefetch import prefetch_row, prefetch_whole_row
from .simd import LANES, load_vector, row_pointer, splat
from .source_sums import SOURCE_GROUP  # vectors at once, as the source pass forming z

#: The layer takes the records where the source pass prefetches by edge and the target rows it gathers
#: (``xr`` and the upstream gradient) take more than this many bytes. Where those rows stay in cache
#: the records are writes that save little: the layer's step (2 threads, AMD EPYC Zen 4, one process,
#: records off and on alternating) took, with the records, 1.10x the time at in-degree 256 on 2000
#: nodes (32 channels: rows of 0.5 MB in all, edge arrays of 4 MB), and on random graphs of in-degree
#: 10 at 64 channels 0.99x at 5,000 nodes (rows of 2.6 MB), 1.01x at 10,000 (5.1 MB), 0.96x at 20,000
#: (10 MB), 0.91x at 40,000, 0.84x at 80,000 and 0.85x on ``large`` (200,000 nodes).
RECORD_MIN_ROW_BYTES = 8 << 20

LANES_PER_BYTE = 8  # one sign bit per channel: a vector's signs are one byte
assert LANES == LANES_PER_BYTE


def record_bytes(heads, channels, itemsize):
    """Bytes of one edge's record: ``2 H`` floats, ``H ceil(C / 8)`` bytes of signs, padded to whole floats."""
    sign_bytes = heads * -(-channels // LANES_PER_BYTE)
    return 2 * heads * itemsize + -(-sign_bytes // itemsize) * itemsize


@njit(inline="always", cache=True)
def check_records(rec_w, rec_signs, edges, heads, channels, kind, itemsize):
    """``(sign_base, head_bytes)``: the byte where a record's signs start and the bytes of signs of each
    head, the layout every reader and writer of the records uses (the intrinsics take both), after
    checking the records' shapes (the intrinsics write them without bounds checks); ValueError if they
    do not fit ``edges`` edges of ``heads`` x ``channels`` of the layer's floats (``itemsize`` bytes)."""
    if kind != LEAKY_RELU:
        raise ValueError("source records hold LeakyReLU signs only")
    if rec_w.itemsize != itemsize:
        raise ValueError("records must hold the layer's floats")
    sign_base = 2 * heads * rec_w.itemsize
    head_bytes = (channels + LANES_PER_BYTE - 1) // LANES_PER_BYTE
    width = rec_signs.shape[1]
    if (
        rec_w.shape[0] != edges
        or rec_signs.shape[0] != edges
        or rec_w.shape[1] * rec_w.itemsize != width
        or width < sign_base + heads * head_bytes
    ):
        raise ValueError(
            "records must have one row per edge, of record_bytes(heads, channels, itemsize) bytes"
        )
    return sign_base, head_bytes


@njit(nogil=True, cache=True)
def gatv2_backward_source_record_rows(
    j0, j1, src_indptr, src_edges, src_targets, att, slope, ahead, rec_w, rec_signs, grad, q_out
):
    """The LeakyReLU source pass over sources ``[j0, j1)`` from the edges' records (the module docstring).

    ``q_out[j, h, c] = Σ_p δ_e att[h, c] s + w_e grad[i, h, c]`` over the
    source's edges ``p`` in order (``e = src_edges[p]``, ``i =
    src_targets[p]``), with ``w_e``, ``δ_e`` and ``s = 1 if z > 0 else slope``
    from record ``e``: the operations of ``backward.gatv2_backward_source_rows``
    on the same values. ``ahead``: prefetch distance in edges (None, or ``prefetch.WINDOW``: none; the
    layer takes the records only where the pass prefetches by edge).
    """
    heads = att.shape[0]
    channels = att.shape[1]
    sign_base, head_bytes = check_records(
        rec_w, rec_signs, src_edges.size, heads, channels, LEAKY_RELU, grad.itemsize
    )
    if src_targets.size != src_edges.size or grad.shape[1] != heads or grad.shape[2] != channels:
        raise ValueError("src_targets must list one target per edge and grad have att's heads and channels")
    # the vector sums take the heads and channels from q_out and read without bounds checks
    if q_out.shape[0] != src_indptr.size - 1 or q_out.shape[1] != heads or q_out.shape[2] != channels:
        raise ValueError("q_out must have one row per source and att's heads and channels")
    # a record of 4, 8 or 16 bytes never straddles two lines (arrays start 16-byte aligned); longer ones can
    straddles = rec_signs.shape[1] > 16 or 64 % rec_signs.shape[1] != 0
    row_bytes = heads * channels * grad.itemsize
    zero = grad.dtype.type(0.0)
    one = grad.dtype.type(1.0)
    for j in range(j0, j1):
        lo = src_indptr[j]
        hi = src_indptr[j + 1]
        if ahead is not None and ahead > 0:  # the rows of the edges `ahead` positions past this source's
            for p in range(lo + ahead, min(hi + ahead, src_edges.size)):
                prefetch_row(grad, src_targets[p], row_bytes)
                if straddles:
                    prefetch_whole_row(rec_signs, src_edges[p], rec_signs.shape[1])
                else:
                    prefetch_row(rec_signs, src_edges[p], rec_signs.shape[1])
        # the channels in whole vectors with the sums in registers, the rest in the loop below
        first = source_record_sums(
            q_out,
            j,
            ALL_HEADS,
            att,
            grad,
            src_edges,
            src_targets,
            rec_w,
            rec_signs,
            sign_base,
            head_bytes,
            lo,
            hi,
            slope,
        )
        if first == channels:
            continue
        for h in range(heads):
            for c in range(first, channels):
                q_out[j, h, c] = zero
        for p in range(lo, hi):
            e = src_edges[p]
            i = src_targets[p]
            for h in range(heads):
                w = rec_w[e, h]
                dl = rec_w[e, heads + h]
                at = sign_base + h * head_bytes
                for c in range(first, channels):
                    s = one if rec_signs[e, at + c // 8] & (1 << (c % 8)) else slope
                    q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]


@intrinsic
def source_record_sums(
    typingctx,
    q_out,
    j,
    h,
    att,
    grad,
    src_edges,
    src_targets,
    rec_w,
    rec_signs,
    sign_base,
    head_bytes,
    lo,
    hi,
    slope,
):
    """Source ``j`` of :func:`gatv2_backward_source_record_rows` for the channels in whole vectors, every head
    (``h = ir_parts.ALL_HEADS``), with the sums in vector registers (as ``edge_sums.source_row_sums``).

    Each vector's signs are one byte of the record, its lanes the byte's
    bits; ``sign_base`` and ``head_bytes`` are the layout of :func:`check_records`. Returns the first channel of each head not done, ``C - C mod 8``
    (0 for arrays that are not C-contiguous).
    """
    arrays = (q_out, att, grad, src_edges, src_targets, rec_signs)
    if not arrays_ok(arrays, (3, 2, 3, 1, 1, 2)) or rec_signs.dtype != types.uint8:
        return None
    if not (isinstance(rec_w, types.Array) and rec_w.ndim == 2):
        return None
    if not (isinstance(src_edges.dtype, types.Integer) and isinstance(src_targets.dtype, types.Integer)):
        return None
    index = types.intp
    sig = index(
        q_out, index, index, att, grad, src_edges, src_targets, rec_w, rec_signs, index, index, index, index,
        q_out.dtype,
    )  # fmt: skip
    # records of other floats than the data's: the kernel refuses them before the call (check_records)
    vectorised = all_contiguous(q_out, att, grad, rec_w, rec_signs) and rec_w.dtype == q_out.dtype
    names = (
        "q_out",
        "j",
        "h",
        "att",
        "grad",
        "src_edges",
        "src_targets",
        "rec_w",
        "rec_signs",
        "sign_base",
        "head_bytes",
        "lo",
        "hi",
        "slope",
    )

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        if not vectorised:
            return ir.Constant(intp, 0)
        a, arr, v = leaky_setup(context, builder, signature, args, names)
        vec_ty, one_v, slope_v = v.vec, v.one, v.slope
        heads = builder.extract_value(arr["q_out"].shape, 1)
        channels = builder.extract_value(arr["q_out"].shape, 2)
        lanes = ir.Constant(intp, LANES)
        mask_ty = ir.VectorType(ir.IntType(1), LANES)

        def head_run(h, width, head_of, _fused):
            q_row = row_pointer(builder, arr["q_out"], a["j"], h)
            att_row = element_pointer(builder, arr["att"], [h, ir.Constant(intp, 0)])
            signs_at = builder.add(a["sign_base"], builder.mul(h, a["head_bytes"]))

            def vectors(base, count):
                offsets = [builder.add(base, ir.Constant(intp, k * LANES)) for k in range(count)]
                heads_v = [head_of(off) for off in offsets]
                sums = [cgutils.alloca_once_value(builder, v.zero) for _ in offsets]
                atts = [load_vector(builder, att_row, off, vec_ty) for off in offsets]
                with cgutils.for_range_slice(builder, a["lo"], a["hi"], ir.Constant(intp, 1), intp) as (p, _):
                    e = load_index(context, builder, arr["src_edges"], signature.args[5], p)
                    i = load_index(context, builder, arr["src_targets"], signature.args[6], p)
                    g_row = row_pointer(builder, arr["grad"], i, h)
                    sign_row = element_pointer(builder, arr["rec_signs"], [e, signs_at])
                    for s, at, off, hv in zip(sums, atts, offsets, heads_v):
                        w = builder.load(element_pointer(builder, arr["rec_w"], [e, hv]))
                        dl = builder.load(element_pointer(builder, arr["rec_w"], [e, builder.add(heads, hv)]))
                        bits = builder.load(builder.gep(sign_row, [builder.udiv(off, lanes)]))
                        positive = builder.bitcast(bits, mask_ty)  # bit k -> lane k
                        slope_or_one = builder.select(positive, one_v, slope_v)
                        dl_v, w_v = splat(builder, dl, vec_ty), splat(builder, w, vec_ty)
                        add_source_term(
                            builder, s, dl_v, at, slope_or_one, w_v, load_vector(builder, g_row, off, vec_ty)
                        )
                for s, off in zip(sums, offsets):
                    store_vector(builder, q_row, off, builder.load(s))

            vector_groups(builder, intp, width, SOURCE_GROUP, vectors)

        for_heads(builder, a["h"], heads, channels, head_run)
        return whole_vector_channels(builder, channels)

    return sig, codegen
