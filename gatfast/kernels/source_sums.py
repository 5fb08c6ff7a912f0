"""The source pass's per-source sums (LeakyReLU attention), with the sums in vector registers.

``Q_j = Σ δ_ij a ⊙ act'(z_ij) + α̃_ij g_i`` over a source's edges, for the
channels in whole 8-lane vectors, the edge loop run per group of vectors
with the sums in registers, as ``edge_sums.py`` does for the target pass
(the reasons, the measurements and the same-bits rule are there); the
kernels' plain loops do the rest. ``records.py`` reads the source records
instead of forming ``z`` on big graphs, with this module's grouping.
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

SOURCE_GROUP = 4  # 4 sums and the xl and att rows they reuse: float64 spills some on AVX2, float32 fits


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
