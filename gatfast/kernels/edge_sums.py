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
The target pass with edge features has its own intrinsic (``edge_terms.py``).
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
from .simd import LANES, add_edge_terms, load_vector, row_pointer, splat

TARGET_GROUP = 2  # vectors at once; two sums each
SOURCE_GROUP = 4  # 4 sums and the xl and att rows they reuse: float64 spills some on AVX2, float32 fits


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


def _target_typing(p_out, att_part, xl, xr, att, indices, delta, records):
    """The signature and code of the target intrinsics (``records`` None: no signs written)."""
    arrays = (p_out, att_part, xl, xr, att, indices, delta)
    if not arrays_ok(arrays, (3, 3, 3, 3, 2, 1, 2)) or not isinstance(indices.dtype, types.Integer):
        return None
    index = types.intp
    tail = () if records is None else (records, index, index)
    sig = types.intp(
        p_out, att_part, index, index, index, xl, xr, att, indices, delta, index, index, p_out.dtype, *tail
    )
    # the rows read as vectors
    vectorised = all_contiguous(p_out, att_part, xl, xr, att, *([] if records is None else [records]))
    return sig, _target_codegen(vectorised, records is not None)


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


def _target_codegen(vectorised, with_signs):
    """The code of :func:`target_row_sums` (``with_signs``: of :func:`target_row_sums_signs`)."""
    names = _TARGET_NAMES + (("records", "sign_base", "head_bytes") if with_signs else ())

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        if not vectorised:
            return ir.Constant(intp, 0)
        a, arr, v = leaky_setup(context, builder, signature, args, names)
        vec_ty, zero_v, one_v, slope_v = v.vec, v.zero, v.one, v.slope
        heads = builder.extract_value(arr["p_out"].shape, 1)
        channels = builder.extract_value(arr["p_out"].shape, 2)
        mask_ty = ir.IntType(LANES)

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
                with cgutils.for_range_slice(builder, a["lo"], a["hi"], ir.Constant(intp, 1), intp) as (e, _):
                    j = load_index(context, builder, arr["indices"], signature.args[8], e)
                    l_row = row_pointer(builder, arr["xl"], j, h)
                    if with_signs:  # a fused run's offsets go on into the next heads, whose bytes follow
                        sign_row = element_pointer(
                            builder,
                            arr["records"],
                            [e, builder.add(a["sign_base"], builder.mul(h, a["head_bytes"]))],
                        )
                    for part, p, r, off, hv in zip(parts, ps, rs, offsets, heads_v):
                        dl = splat(
                            builder, builder.load(element_pointer(builder, arr["delta"], [e, hv])), vec_ty
                        )
                        z = builder.fadd(r, load_vector(builder, l_row, off, vec_ty))
                        positive = builder.fcmp_ordered(">", z, zero_v)
                        if with_signs:  # lane k -> bit k
                            byte = builder.gep(sign_row, [builder.udiv(off, ir.Constant(intp, LANES))])
                            builder.store(builder.bitcast(positive, mask_ty), byte)
                        act = builder.select(positive, z, builder.fmul(slope_v, z))
                        builder.store(builder.fadd(builder.load(part), builder.fmul(dl, act)), part)
                        grad_act = builder.select(positive, one_v, slope_v)
                        builder.store(builder.fadd(builder.load(p), builder.fmul(dl, grad_act)), p)
                for part, p, off in zip(parts, ps, offsets):
                    store_vector(builder, part_row, off, builder.load(part))
                    store_vector(
                        builder,
                        p_row,
                        off,
                        builder.fmul(builder.load(p), load_vector(builder, att_row, off, vec_ty)),
                    )

            vector_groups(builder, intp, width, TARGET_GROUP, vectors)

        for_heads(builder, a["h"], heads, channels, head_run)
        return whole_vector_channels(builder, channels)

    return codegen


_SOURCE_NAMES = (
    "q_out",
    "j",
    "h",
    "xl",
    "xr",
    "att",
    "grad",
    "src_edges",
    "src_targets",
    "alpha",
    "delta",
    "edge_scale",
)


def _source_codegen(vectorised, with_edges):
    """The code of :func:`source_row_sums` (``with_edges``: of :func:`source_edge_row_sums`)."""
    names = _SOURCE_NAMES + (("u", "weT") if with_edges else ()) + ("lo", "hi", "slope")

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        if not vectorised:
            return ir.Constant(intp, 0)
        a, arr, v = leaky_setup(context, builder, signature, args, names)
        fty, vec_ty, zero_v, one_v, slope_v = v.fty, v.vec, v.zero, v.one, v.slope
        heads = builder.extract_value(arr["q_out"].shape, 1)
        channels = builder.extract_value(arr["q_out"].shape, 2)
        has_scale = builder.icmp_signed(
            ">", builder.extract_value(arr["edge_scale"].shape, 0), ir.Constant(intp, 0)
        )
        unit = cgutils.alloca_once_value(builder, ir.Constant(fty, 1.0))

        def head_run(h, width, head_of, _fused):
            """The channels ``[0, width)`` of source ``j`` from head ``h`` (``ir_parts.for_heads``)."""
            q_row = row_pointer(builder, arr["q_out"], a["j"], h)
            l_row = row_pointer(builder, arr["xl"], a["j"], h)
            att_row = element_pointer(builder, arr["att"], [h, ir.Constant(intp, 0)])

            def pre_activations(e, i, ls, offsets, heads_v):
                """``z`` per vector: ``xr[i] + xl[j]``, then ``+ weT[h, d] u[e, d]`` for d = 0, 1, ..."""
                r_row = row_pointer(builder, arr["xr"], i, h)
                zs = [
                    builder.fadd(load_vector(builder, r_row, off, vec_ty), l) for l, off in zip(ls, offsets)
                ]
                if not with_edges:
                    return zs
                # weT is (H, D, C): each vector's weights at its own head, at its offset within that head
                in_head = [
                    builder.sub(off, builder.mul(builder.sub(hv, h), channels))
                    for off, hv in zip(offsets, heads_v)
                ]
                return add_edge_terms(builder, arr["u"], arr["weT"], e, heads_v, zs, in_head, vec_ty)

            def vectors(base, count):
                offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
                heads_v = [head_of(off) for off in offsets]
                sums = [cgutils.alloca_once_value(builder, zero_v) for _ in offsets]
                ls = [load_vector(builder, l_row, off, vec_ty) for off in offsets]
                atts = [load_vector(builder, att_row, off, vec_ty) for off in offsets]
                with cgutils.for_range_slice(builder, a["lo"], a["hi"], ir.Constant(intp, 1), intp) as (p, _):
                    e = load_index(context, builder, arr["src_edges"], signature.args[7], p)
                    i = load_index(context, builder, arr["src_targets"], signature.args[8], p)
                    dls, wvs = [], []
                    for hv in heads_v:
                        dls.append(
                            splat(
                                builder, builder.load(element_pointer(builder, arr["delta"], [e, hv])), vec_ty
                            )
                        )
                        w = builder.load(element_pointer(builder, arr["alpha"], [e, hv]))
                        w = times_scale(
                            builder, w, has_scale, element_pointer(builder, arr["edge_scale"], [e, hv]), unit
                        )
                        wvs.append(splat(builder, w, vec_ty))
                    g_row = row_pointer(builder, arr["grad"], i, h)
                    zs = pre_activations(e, i, ls, offsets, heads_v)
                    for s, z, at, off, dl, wv in zip(sums, zs, atts, offsets, dls, wvs):
                        slope_or_one = builder.select(builder.fcmp_ordered(">", z, zero_v), one_v, slope_v)
                        add_source_term(
                            builder, s, dl, at, slope_or_one, wv, load_vector(builder, g_row, off, vec_ty)
                        )
                for s, off in zip(sums, offsets):
                    store_vector(builder, q_row, off, builder.load(s))

            vector_groups(builder, intp, width, SOURCE_GROUP, vectors)

        for_heads(builder, a["h"], heads, channels, head_run)
        return whole_vector_channels(builder, channels)

    return codegen


def _source_head(q_out, xl, xr, att, grad, src_edges, src_targets, alpha, delta, edge_scale):
    """The argument types both source intrinsics start with (``j``, ``h``: intp), or None if they do not fit."""
    arrays = (q_out, xl, xr, att, grad, src_edges, src_targets, alpha, delta, edge_scale)
    if not arrays_ok(arrays, (3, 3, 3, 2, 3, 1, 1, 2, 2, 2)):
        return None
    if not (isinstance(src_edges.dtype, types.Integer) and isinstance(src_targets.dtype, types.Integer)):
        return None
    return (q_out, types.intp, types.intp) + arrays[1:]


@intrinsic
def source_row_sums(
    typingctx, q_out, j, h, xl, xr, att, grad, src_edges, src_targets, alpha, delta, edge_scale, lo, hi, slope
):
    """Source ``j``, head ``h`` of the source pass (LeakyReLU), for the channels in whole vectors.

    For each such channel ``c``: ``q_out[j, h, c] = Σ_p ((δ_e att[h, c]) s +
    w_e grad[i, h, c])`` over ``p`` in ``[lo, hi)``, with ``e =
    src_edges[p]``, ``i = src_targets[p]``, ``δ_e = delta[e, h]``, ``w_e =
    alpha[e, h]`` (times ``edge_scale[e, h]`` when it is not empty) and ``s =
    1 if xr[i, h, c] + xl[j, h, c] > 0 else slope``.
    ``h = ir_parts.ALL_HEADS``: every head (``ir_parts.for_heads``).
    Returns the first channel of each head not done, ``C - C mod 8`` (0
    for arrays that are not C-contiguous).
    """
    head = _source_head(q_out, xl, xr, att, grad, src_edges, src_targets, alpha, delta, edge_scale)
    if head is None:
        return None
    sig = types.intp(*head, types.intp, types.intp, q_out.dtype)
    return sig, _source_codegen(all_contiguous(q_out, xl, xr, att, grad), with_edges=False)


@intrinsic
def source_edge_row_sums(
    typingctx,
    q_out,
    j,
    h,
    xl,
    xr,
    att,
    grad,
    src_edges,
    src_targets,
    alpha,
    delta,
    edge_scale,
    u,
    weT,
    lo,
    hi,
    slope,
):
    """:func:`source_row_sums` with edge features: ``z`` gains ``Σ_d weT[h, d, c] u[e, d]`` (``edge.py``)."""
    head = _source_head(q_out, xl, xr, att, grad, src_edges, src_targets, alpha, delta, edge_scale)
    if head is None or not arrays_ok((q_out, u, weT), (3, 2, 3)):
        return None
    sig = types.intp(*head, u, weT, types.intp, types.intp, q_out.dtype)
    return sig, _source_codegen(all_contiguous(q_out, xl, xr, att, grad, weT), with_edges=True)
