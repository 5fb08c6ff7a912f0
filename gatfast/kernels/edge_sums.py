"""The per-row sums of the backward passes (LeakyReLU attention), with the sums in vector registers.

The target pass sums, over the edges of a row ``i`` and head ``h``,
``δ_ij act(z_ij)`` into the block's ``∂L/∂a`` partial and
``δ_ij act'(z_ij)`` into ``P_i``; the source pass sums
``δ_ij a ⊙ act'(z_ij) + α̃_ij g_i`` into ``Q_j``. Written with the channel
loop inside the edge loop, each edge stores the output rows and the next one
loads them again, and LLVM vectorises a channel loop only when it is long:
at 8 channels per head (Cora's 8 heads x 8) the loops ran scalar, 4-5x
slower per edge than 2 heads x 32 (one thread, 2-core AMD EPYC). These
intrinsics run the edge loop per group of 8-channel vectors with the sums in
registers and store them once, for the channels ``[0, C - C mod 8)`` of one
head (or of every head, below); the kernels do the last ``C mod 8`` channels with their plain loops
(and every channel of other activations, or of arrays with strided channels).
The target pass with edge features has its own intrinsic (``edge_terms.py``),
the source pass's are in ``source_sums.py``.
:func:`target_row_sums_sources` is the target pass's that also adds each
edge's term of the source pass to its source's row of ``Q`` (batches of
small graphs: ``backward.gatv2_backward_target_blocks``, ``cuts``).
On Cora's graph at 8 x 8 (one thread, old and new code alternating in one
process) the source pass went from 294 to 125 ns per edge and the target
pass from 137 to 104; at 1 x 32 on batches of small graphs 50 -> 32 and
64 -> 51.

The kernels pass ``ir_parts.ALL_HEADS`` and each intrinsic walks the
row's heads itself (``ir_parts.for_heads``): several heads whose channels
fill whole vectors as one run of ``H * C`` channels, each vector reading its
own head's ``δ`` and ``α``, so that a row's edges are walked once per group
of vectors rather than once per head; other shapes head by head. With
Cora's 8 heads x 8 channels (one thread, Intel Xeon, old and new trees
alternating) the source pass went from 0.57 to 0.40 ms and the target pass
from 1.05 to 0.96 ms.

Each channel's sum is the plain loop's sequence of IEEE operations (the
same products, added in edge order, never fused), so the result is the same
bits. The arrays read as vector rows must be C-contiguous as Numba types
them; otherwise the intrinsics emit nothing and return 0, and the plain
loops do every channel.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .gemm import compiles_for_avx512
from .ir_parts import (
    add_source_term,
    all_contiguous,
    arrays_ok,
    element_pointer,
    for_heads,
    leaky_setup,
    load_index,
    store_vector,
    times_scale,
    vector_groups,
    whole_vector_channels,
)
from .simd import LANES, load_vector, row_pointer, splat

#: vectors at once, two sums each: with AVX-512's 32 registers, 4 (a row's edges walked half as often; in the
#: cache, one thread, Zen 4, the intrinsic alone: 1 x 64 channels 10.1 -> 9.4 ns per edge, 11.4 -> 10.0 with
#: the signs, 1 x 32 5.6 -> 5.0, ``runs/s43/sums_ab.py``); AVX2's 16 hold 2 without spilling
TARGET_GROUP = 4 if compiles_for_avx512() else 2
#: with the source terms, where AVX-512's 32 vector registers hold the 5 rows of 4 vectors: the row's edges
#: walked once per 32 float32 channels (small-batch's layer), not twice
TARGET_SOURCES_GROUP = 4 if compiles_for_avx512() else 2


@intrinsic
def target_row_sums(typingctx, p_out, att_part, b, i, h, xl, xr, att, indices, delta, lo, hi, slope):
    """Row ``i``, head ``h`` of the target pass (LeakyReLU), for the channels in whole vectors.

    For each such channel ``c``: ``att_part[b, h, c] += Σ_e δ_e (z if z > 0
    else slope z)`` and ``p_out[i, h, c] = (Σ_e δ_e (1 if z > 0 else
    slope)) * att[h, c]``, with ``z = xr[i, h, c] + xl[j_e, h, c]``, ``j_e =
    indices[e]`` and ``δ_e = delta[e, h]`` over ``e`` in ``[lo, hi)``.
    ``h = ir_parts.ALL_HEADS``: every head (``ir_parts.for_heads``).
    Returns the first channel of each head not done, ``C - C mod 8`` (0
    for arrays that are not C-contiguous).
    """
    return _target_typing(p_out, att_part, xl, xr, att, indices, delta, None)


@intrinsic
def target_row_sums_signs(
    typingctx,
    p_out,
    att_part,
    b,
    i,
    h,
    xl,
    xr,
    att,
    indices,
    delta,
    lo,
    hi,
    slope,
    records,
    sign_base,
    head_bytes,
):
    """:func:`target_row_sums`, also writing each edge's signs ``z > 0`` as bits into its source record.

    ``records`` (E, R) uint8: edge ``e``'s bit for channel ``c`` of head ``h``
    is bit ``c mod 8`` of byte ``sign_base + h head_bytes + c // 8`` of row
    ``e`` (the layout of ``records.check_records``); one byte per vector of 8
    channels, for the channels this intrinsic does.
    """
    if not (isinstance(records, types.Array) and records.dtype == types.uint8 and records.ndim == 2):
        return None
    return _target_typing(p_out, att_part, xl, xr, att, indices, delta, records)


@intrinsic
def target_row_sums_sources(
    typingctx,
    p_out,
    att_part,
    b,
    i,
    h,
    xl,
    xr,
    att,
    indices,
    delta,
    lo,
    hi,
    slope,
    q_out,
    grad,
    alpha,
    edge_scale,
):
    """:func:`target_row_sums`, also adding each edge's term of the source pass to its source's row of ``q_out``.

    For each channel ``c`` it does, and each edge ``e = (j -> i)`` of the row:
    ``q_out[j, h, c] += (δ_e att[h, c]) s + w_e grad[i, h, c]``, with ``s`` and
    ``w_e`` as in ``source_sums.source_row_sums`` (``ir_parts.add_source_term``, the
    same operations), into the row in memory. Called on the rows of a range
    closed under the graph's edges, in row order, with those rows of ``q_out``
    zeroed first, each source's sum gets its terms in edge order from zero:
    the source pass's order (``CSRGraph.source_order``), so the same bits
    (``backward.gatv2_backward_target_blocks``, ``cuts``).
    """
    arrays = (q_out, grad, alpha, edge_scale)
    if not arrays_ok(arrays, (3, 3, 2, 2)) or not arrays_ok((p_out, q_out), (3, 3)):
        return None
    return _target_typing(p_out, att_part, xl, xr, att, indices, delta, None, arrays)


def _target_typing(p_out, att_part, xl, xr, att, indices, delta, records, sources=None):
    """The signature and code of the target intrinsics (``records`` None: no signs written; ``sources``:
    ``(q_out, grad, alpha, edge_scale)`` of :func:`target_row_sums_sources`, or None)."""
    arrays = (p_out, att_part, xl, xr, att, indices, delta)
    if not arrays_ok(arrays, (3, 3, 3, 3, 2, 1, 2)) or not isinstance(indices.dtype, types.Integer):
        return None
    index = types.intp
    tail = () if records is None else (records, index, index)
    tail += () if sources is None else tuple(sources)
    sig = types.intp(
        p_out, att_part, index, index, index, xl, xr, att, indices, delta, index, index, p_out.dtype, *tail
    )
    # the rows read as vectors
    rows = [] if records is None else [records]
    rows += [] if sources is None else list(sources[:2])
    vectorised = all_contiguous(p_out, att_part, xl, xr, att, *rows)
    return sig, _target_codegen(vectorised, records is not None, sources is not None)


_TARGET_NAMES = (
    "p_out",
    "att_part",
    "b",
    "i",
    "h",
    "xl",
    "xr",
    "att",
    "indices",
    "delta",
    "lo",
    "hi",
    "slope",
)


def _target_codegen(vectorised, with_signs, with_sources=False):
    """The code of :func:`target_row_sums` (``with_signs``: of :func:`target_row_sums_signs`;
    ``with_sources``: of :func:`target_row_sums_sources`)."""
    names = _TARGET_NAMES + (("records", "sign_base", "head_bytes") if with_signs else ())
    names += ("q_out", "grad", "alpha", "edge_scale") if with_sources else ()

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        if not vectorised:
            return ir.Constant(intp, 0)
        a, arr, v = leaky_setup(context, builder, signature, args, names)
        vec_ty, zero_v, one_v, slope_v = v.vec, v.zero, v.one, v.slope
        heads = builder.extract_value(arr["p_out"].shape, 1)
        channels = builder.extract_value(arr["p_out"].shape, 2)
        mask_ty = ir.IntType(LANES)
        if with_sources:
            has_scale = builder.icmp_signed(
                ">", builder.extract_value(arr["edge_scale"].shape, 0), ir.Constant(intp, 0)
            )
            unit = cgutils.alloca_once_value(builder, ir.Constant(v.fty, 1.0))

        def head_run(h, width, head_of, _fused):
            """The channels ``[0, width)`` of row ``i`` from head ``h`` (``ir_parts.for_heads``)."""
            p_row = row_pointer(builder, arr["p_out"], a["i"], h)
            part_row = row_pointer(builder, arr["att_part"], a["b"], h)
            r_row = row_pointer(builder, arr["xr"], a["i"], h)
            att_row = element_pointer(builder, arr["att"], [h, ir.Constant(intp, 0)])

            def vectors(base, count):
                offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
                heads_v = [head_of(off) for off in offsets]
                parts = [
                    cgutils.alloca_once_value(builder, load_vector(builder, part_row, off, vec_ty))
                    for off in offsets
                ]
                ps = [cgutils.alloca_once_value(builder, zero_v) for _ in offsets]
                rs = [load_vector(builder, r_row, off, vec_ty) for off in offsets]
                if with_sources:  # the row's upstream gradient and the weights, the same for every edge
                    g_row = row_pointer(builder, arr["grad"], a["i"], h)
                    gs = [load_vector(builder, g_row, off, vec_ty) for off in offsets]
                    atts = [load_vector(builder, att_row, off, vec_ty) for off in offsets]
                with cgutils.for_range_slice(builder, a["lo"], a["hi"], ir.Constant(intp, 1), intp) as (e, _):
                    j = load_index(context, builder, arr["indices"], signature.args[8], e)
                    l_row = row_pointer(builder, arr["xl"], j, h)
                    if with_sources:
                        q_row = row_pointer(builder, arr["q_out"], j, h)
                    if with_signs:  # a fused run's offsets go on into the next heads, whose bytes follow
                        sign_row = element_pointer(
                            builder,
                            arr["records"],
                            [e, builder.add(a["sign_base"], builder.mul(h, a["head_bytes"]))],
                        )
                    # each vector's head's scalars, once per distinct head value (head by head: once per edge;
                    # fused heads: once per vector), before any store of the edge (LLVM cannot tell these
                    # arrays apart, so a load after a store would be made again)
                    scalars = {}
                    for hv in heads_v:
                        if id(hv) not in scalars:
                            dl = builder.load(element_pointer(builder, arr["delta"], [e, hv]))
                            w = None
                            if with_sources:
                                w = builder.load(element_pointer(builder, arr["alpha"], [e, hv]))
                                scale = element_pointer(builder, arr["edge_scale"], [e, hv])
                                w = splat(builder, times_scale(builder, w, has_scale, scale, unit), vec_ty)
                            scalars[id(hv)] = (splat(builder, dl, vec_ty), w)
                    ls = [load_vector(builder, l_row, off, vec_ty) for off in offsets]
                    terms = []
                    for k, (part, p, r, off, hv) in enumerate(zip(parts, ps, rs, offsets, heads_v)):
                        dl, w = scalars[id(hv)]
                        z = builder.fadd(r, ls[k])
                        positive = builder.fcmp_ordered(">", z, zero_v)
                        if with_signs:  # lane k -> bit k
                            byte = builder.gep(sign_row, [builder.udiv(off, ir.Constant(intp, LANES))])
                            builder.store(builder.bitcast(positive, mask_ty), byte)
                        act = builder.select(positive, z, builder.fmul(slope_v, z))
                        builder.store(builder.fadd(builder.load(part), builder.fmul(dl, act)), part)
                        grad_act = builder.select(positive, one_v, slope_v)
                        builder.store(builder.fadd(builder.load(p), builder.fmul(dl, grad_act)), p)
                        terms.append((dl, grad_act, w))
                    for k, (off, (dl, grad_act, w)) in enumerate(zip(offsets, terms) if with_sources else ()):
                        # Q_j's term of this edge, added to its row in memory
                        q = cgutils.alloca_once_value(builder, load_vector(builder, q_row, off, vec_ty))
                        add_source_term(builder, q, dl, atts[k], grad_act, w, gs[k])
                        store_vector(builder, q_row, off, builder.load(q))
                for part, p, off in zip(parts, ps, offsets):
                    store_vector(builder, part_row, off, builder.load(part))
                    store_vector(
                        builder,
                        p_row,
                        off,
                        builder.fmul(builder.load(p), load_vector(builder, att_row, off, vec_ty)),
                    )

            # without the source terms, 2 or 3 vectors left go as a group of 2 (16 and 24 channels one walk
            # and two, as when the group was 2)
            vector_groups(
                builder,
                intp,
                width,
                TARGET_SOURCES_GROUP if with_sources else TARGET_GROUP,
                vectors,
                half=not with_sources,
            )

        for_heads(builder, a["h"], heads, channels, head_run)
        return whole_vector_channels(builder, channels)

    return codegen
