"""Per-edge dot products as explicit SIMD code, in a fixed summation order.

The two per-edge reductions of GATv2 (the score ``Σ_c a_c LeakyReLU(r_ic +
x_jc)`` and ``A_ij = Σ_c g_ic x_jc``) are sequential float sums, which LLVM
may not vectorise without fast-math reassociation (and Numba leaves its SLP
vectoriser off), so a 64-channel sum costs a chain of 64 dependent adds per
edge. These intrinsics emit the vector code directly: 8 lanes, lane ``l``
summing channels ``l, l + 8, l + 16, ...`` in order, the lanes then added
in a fixed tree ``((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`` and the
last ``C mod 8`` channels added one by one. Every operation is an ordinary
IEEE add, multiply, compare or select (no fast-math flags), so the result is
the same on every x86 CPU whatever the vector width the backend picks
(AVX-512, AVX2 or SSE), and the same for any thread count.

Arrays are 3-D ``(rows, H, C)`` with contiguous channels (the layer's
C-contiguous buffers); ``h`` selects the head. :func:`dot3` and
:func:`leaky_dot` take both leading indices explicitly, for the edge term's
weights ``(H, D, C)`` and the per-edge scratch rows.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8
EDGE_SCORE_GROUP = 4  # vectors of z formed side by side in leaky_edge_score


def row_pointer(builder, ary, row, h):
    """Pointer to ``ary[row, h, 0]`` from the array's data pointer and strides (3-D arrays)."""
    return element_pointer(builder, ary, [row, h])


def element_pointer(builder, ary, indices):
    """Pointer to ``ary[indices]`` from the data pointer and strides (any number of dimensions)."""
    offset = None
    for axis, index in enumerate(indices):
        term = builder.mul(index, builder.extract_value(ary.strides, axis))
        offset = term if offset is None else builder.add(offset, term)
    i8p = ir.IntType(8).as_pointer()
    return builder.bitcast(builder.gep(builder.bitcast(ary.data, i8p), [offset]), ary.data.type)


def load_vector(builder, ptr, index, vec_ty):
    p = builder.gep(ptr, [index])
    return builder.load(builder.bitcast(p, vec_ty.as_pointer()), align=1)


def hsum(builder, vec):
    """Sum the 8 lanes in the fixed order described in the module docstring."""
    i32 = ir.IntType(32)

    def shuffle(v, idx):
        mask = ir.Constant(ir.VectorType(i32, len(idx)), [ir.Constant(i32, k) for k in idx])
        return builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), mask)

    quad = builder.fadd(shuffle(vec, [0, 1, 2, 3]), shuffle(vec, [4, 5, 6, 7]))  # l0+l4, ..., l3+l7
    pair = builder.fadd(shuffle(quad, [0, 1]), shuffle(quad, [2, 3]))  # (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
    return builder.fadd(builder.extract_element(pair, i32(0)), builder.extract_element(pair, i32(1)))


def _check_3d(*arrays):
    return all(isinstance(a, types.Array) and a.ndim == 3 and isinstance(a.dtype, types.Float) for a in arrays)


def _reduction(context, builder, lanes_body, tail_body, channels, fty, group_body=None, group=1):
    """Vector loop over full 8-lane chunks, fixed-tree horizontal sum, then the scalar tail.

    With ``group_body``, the chunks go first in groups of ``group``:
    ``group_body(base, vec_ty)`` returns the group's ``group`` vectors, added
    to the sum in chunk order (the same order as one chunk at a time), so a
    body can interleave the groups' independent work.
    """
    intp = context.get_value_type(types.intp)
    vec_ty = ir.VectorType(fty, LANES)
    acc = cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None))
    chunks = builder.udiv(channels, ir.Constant(intp, LANES))
    first_single = ir.Constant(intp, 0)
    if group_body is not None:
        groups = builder.udiv(chunks, ir.Constant(intp, group))
        with cgutils.for_range(builder, groups) as loop:
            base = builder.mul(loop.index, ir.Constant(intp, group * LANES))
            for vec in group_body(base, vec_ty):
                builder.store(builder.fadd(builder.load(acc), vec), acc)
        first_single = builder.mul(groups, ir.Constant(intp, group))
    with cgutils.for_range(builder, chunks, start=first_single) as loop:
        base = builder.mul(loop.index, ir.Constant(intp, LANES))
        builder.store(builder.fadd(builder.load(acc), lanes_body(base, vec_ty)), acc)
    total = cgutils.alloca_once_value(builder, hsum(builder, builder.load(acc)))
    tail_start = builder.mul(chunks, ir.Constant(intp, LANES))
    with cgutils.for_range(builder, channels, start=tail_start) as loop:
        builder.store(builder.fadd(builder.load(total), tail_body(loop.index)), total)
    return builder.load(total)


@intrinsic
def dot_rows(typingctx, a, i, b, j, h):
    """``Σ_c a[i, h, c] * b[j, h, c]`` over the channels of head ``h``."""
    if not _check_3d(a, b) or a.dtype != b.dtype:
        return None
    sig = a.dtype(a, types.intp, b, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        arr_a = context.make_array(signature.args[0])(context, builder, args[0])
        arr_b = context.make_array(signature.args[2])(context, builder, args[2])
        pa = row_pointer(builder, arr_a, args[1], args[4])
        pb = row_pointer(builder, arr_b, args[3], args[4])
        channels = builder.extract_value(arr_a.shape, 2)
        fty = context.get_value_type(signature.args[0].dtype)

        def lanes(base, vec_ty):
            return builder.fmul(load_vector(builder, pa, base, vec_ty), load_vector(builder, pb, base, vec_ty))

        def tail(c):
            return builder.fmul(builder.load(builder.gep(pa, [c])), builder.load(builder.gep(pb, [c])))

        return _reduction(context, builder, lanes, tail, channels, fty)

    return sig, codegen


@intrinsic
def leaky_score(typingctx, att, xr, i, xl, j, h, slope):
    """``Σ_c att[h, c] * LeakyReLU(xr[i, h, c] + xl[j, h, c])`` (negative slope ``slope``).

    Per channel exactly the scalar ``z if z > 0 else slope * z``.
    """
    if not (isinstance(att, types.Array) and att.ndim == 2 and _check_3d(xr, xl)):
        return None
    if not (att.dtype == xr.dtype == xl.dtype):
        return None
    sig = att.dtype(att, xr, types.intp, xl, types.intp, types.intp, att.dtype)

    def codegen(context, builder, signature, args):
        arr_att = context.make_array(signature.args[0])(context, builder, args[0])
        arr_r = context.make_array(signature.args[1])(context, builder, args[1])
        arr_l = context.make_array(signature.args[3])(context, builder, args[3])
        h = args[5]
        slope = args[6]
        pa = element_pointer(builder, arr_att, [h])
        pr = row_pointer(builder, arr_r, args[2], h)
        pl = row_pointer(builder, arr_l, args[4], h)
        channels = builder.extract_value(arr_att.shape, 1)
        fty = context.get_value_type(signature.args[0].dtype)

        def leaky(z, zero, slope_v):
            positive = builder.fcmp_ordered(">", z, zero)
            return builder.select(positive, z, builder.fmul(slope_v, z))

        def lanes(base, vec_ty):
            z = builder.fadd(load_vector(builder, pr, base, vec_ty), load_vector(builder, pl, base, vec_ty))
            slope_v = splat(builder, slope, vec_ty)
            act = leaky(z, ir.Constant(vec_ty, None), slope_v)
            return builder.fmul(load_vector(builder, pa, base, vec_ty), act)

        def tail(c):
            z = builder.fadd(builder.load(builder.gep(pr, [c])), builder.load(builder.gep(pl, [c])))
            act = leaky(z, ir.Constant(fty, 0.0), slope)
            return builder.fmul(builder.load(builder.gep(pa, [c])), act)

        return _reduction(context, builder, lanes, tail, channels, fty)

    return sig, codegen


def splat(builder, value, vec_ty):
    """``value`` in every lane of ``vec_ty``."""
    i32 = ir.IntType(32)
    vec = ir.Constant(vec_ty, ir.Undefined)
    for k in range(vec_ty.count):
        vec = builder.insert_element(vec, value, i32(k))
    return vec


def add_edge_terms(builder, u, weT, e, h, zs, offsets, vec_ty):
    """``zs[v] + Σ_d weT[h, d, offsets[v]:offsets[v] + 8] * u[e, d]``, ``d`` in order: ``edge.py``'s ``z``.

    ``h`` is one head for every vector, or a list of one head per vector
    (``offsets`` then within each vector's head).

    ``u`` and ``weT`` are Numba array structures, ``weT`` with contiguous
    channels. The loop over ``d`` is the outer one, so the vectors' chains
    of dependent adds run side by side: one vector at a time, an edge waited
    for D adds in a row per vector.
    """
    slots = [cgutils.alloca_once_value(builder, z) for z in zs]
    with cgutils.for_range(builder, builder.extract_value(u.shape, 1)) as loop:
        d = loop.index
        ud = splat(builder, builder.load(element_pointer(builder, u, [e, d])), vec_ty)
        heads_v = h if isinstance(h, list) else [h] * len(offsets)
        for slot, off, hv in zip(slots, offsets, heads_v):
            term = builder.fmul(load_vector(builder, row_pointer(builder, weT, hv, d), off, vec_ty), ud)
            builder.store(builder.fadd(builder.load(slot), term), slot)
    return [builder.load(slot) for slot in slots]


@intrinsic
def dot3(typingctx, a, i0, i1, b, j0, j1):
    """``Σ_c a[i0, i1, c] * b[j0, j1, c]`` over the last axis, in the fixed 8-lane order."""
    if not _check_3d(a, b) or a.dtype != b.dtype:
        return None
    sig = a.dtype(a, types.intp, types.intp, b, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        arr_a = context.make_array(signature.args[0])(context, builder, args[0])
        arr_b = context.make_array(signature.args[3])(context, builder, args[3])
        pa = row_pointer(builder, arr_a, args[1], args[2])
        pb = row_pointer(builder, arr_b, args[4], args[5])
        channels = builder.extract_value(arr_a.shape, 2)
        fty = context.get_value_type(signature.args[0].dtype)

        def lanes(base, vec_ty):
            return builder.fmul(load_vector(builder, pa, base, vec_ty), load_vector(builder, pb, base, vec_ty))

        def tail(c):
            return builder.fmul(builder.load(builder.gep(pa, [c])), builder.load(builder.gep(pb, [c])))

        return _reduction(context, builder, lanes, tail, channels, fty)

    return sig, codegen


@intrinsic
def leaky_dot(typingctx, att, z, row, h, slope):
    """``Σ_c att[h, c] * LeakyReLU(z[row, h, c])``, ``z`` a precomputed pre-activation row.

    The same per-channel operations and summation order as :func:`leaky_score`
    (which forms ``z`` itself from two rows).
    """
    if not (isinstance(att, types.Array) and att.ndim == 2 and _check_3d(z)):
        return None
    if att.dtype != z.dtype:
        return None
    sig = att.dtype(att, z, types.intp, types.intp, att.dtype)

    def codegen(context, builder, signature, args):
        arr_att = context.make_array(signature.args[0])(context, builder, args[0])
        arr_z = context.make_array(signature.args[1])(context, builder, args[1])
        h = args[3]
        slope = args[4]
        pa = element_pointer(builder, arr_att, [h])
        pz = row_pointer(builder, arr_z, args[2], h)
        channels = builder.extract_value(arr_att.shape, 1)
        fty = context.get_value_type(signature.args[0].dtype)

        def leaky(z, zero, slope_v):
            positive = builder.fcmp_ordered(">", z, zero)
            return builder.select(positive, z, builder.fmul(slope_v, z))

        def lanes(base, vec_ty):
            zv = load_vector(builder, pz, base, vec_ty)
            act = leaky(zv, ir.Constant(vec_ty, None), splat(builder, slope, vec_ty))
            return builder.fmul(load_vector(builder, pa, base, vec_ty), act)

        def tail(c):
            act = leaky(builder.load(builder.gep(pz, [c])), ir.Constant(fty, 0.0), slope)
            return builder.fmul(builder.load(builder.gep(pa, [c])), act)

        return _reduction(context, builder, lanes, tail, channels, fty)

    return sig, codegen


@intrinsic
def leaky_edge_score(typingctx, att, xr, i, xl, j, u, weT, e, h, slope):
    """``Σ_c att[h, c] * LeakyReLU(z_c)``, ``z`` the pre-activation of ``edge.edge_z`` formed in registers.

    ``z_c = (xr[i, h, c] + xl[j, h, c]) + Σ_d weT[h, d, c] * u[e, d]``, the
    sum over ``d`` in order: the same operations as ``edge_z`` followed by
    :func:`leaky_dot`, so the same bits, without the scratch row. Needs
    contiguous channels in ``att``, ``xr``, ``xl`` and ``weT``: the caller
    checks the strides at run time (the forward kernel's ``in_registers``).
    """
    if not (isinstance(att, types.Array) and att.ndim == 2 and _check_3d(xr, xl, weT)):
        return None
    if not (isinstance(u, types.Array) and u.ndim == 2):
        return None
    if not att.dtype == xr.dtype == xl.dtype == u.dtype == weT.dtype:
        return None
    sig = att.dtype(att, xr, types.intp, xl, types.intp, u, weT, types.intp, types.intp, att.dtype)

    def codegen(context, builder, signature, args):
        arr_att, arr_r, arr_l, arr_u, arr_w = (
            context.make_array(signature.args[k])(context, builder, args[k]) for k in (0, 1, 3, 5, 6)
        )
        e, h, slope = args[7], args[8], args[9]
        fty = context.get_value_type(signature.args[0].dtype)
        pa = element_pointer(builder, arr_att, [h])
        pr = row_pointer(builder, arr_r, args[2], h)
        pl = row_pointer(builder, arr_l, args[4], h)
        channels = builder.extract_value(arr_att.shape, 1)
        dims = builder.extract_value(arr_u.shape, 1)

        def attribute(d):
            return builder.load(element_pointer(builder, arr_u, [e, d]))

        def pre_activation(c):
            """``z`` of channel ``c`` (the scalar tail)."""
            z = cgutils.alloca_once_value(
                builder, builder.fadd(builder.load(builder.gep(pr, [c])), builder.load(builder.gep(pl, [c])))
            )
            with cgutils.for_range(builder, dims) as loop:
                w = builder.load(builder.gep(row_pointer(builder, arr_w, h, loop.index), [c]))
                builder.store(builder.fadd(builder.load(z), builder.fmul(w, attribute(loop.index))), z)
            return builder.load(z)

        def leaky(z, zero, slope_v):
            positive = builder.fcmp_ordered(">", z, zero)
            return builder.select(positive, z, builder.fmul(slope_v, z))

        def terms(offsets, vec_ty):
            """``att * LeakyReLU(z)`` of the vectors at ``offsets``, their ``z`` formed side by side."""
            zs = [
                builder.fadd(load_vector(builder, pr, off, vec_ty), load_vector(builder, pl, off, vec_ty))
                for off in offsets
            ]
            slope_v = splat(builder, slope, vec_ty)
            zs = add_edge_terms(builder, arr_u, arr_w, e, h, zs, offsets, vec_ty)
            zero_v = ir.Constant(vec_ty, None)
            return [
                builder.fmul(load_vector(builder, pa, off, vec_ty), leaky(z, zero_v, slope_v))
                for z, off in zip(zs, offsets)
            ]

        def group(base, vec_ty):
            offsets = [builder.add(base, ir.Constant(base.type, v * LANES)) for v in range(EDGE_SCORE_GROUP)]
            return terms(offsets, vec_ty)

        def tail(c):
            z = pre_activation(c)
            act = leaky(z, ir.Constant(fty, 0.0), slope)
            return builder.fmul(builder.load(builder.gep(pa, [c])), act)

        def lanes(base, vec_ty):
            return terms([base], vec_ty)[0]

        return _reduction(context, builder, lanes, tail, channels, fty, group, EDGE_SCORE_GROUP)

    return sig, codegen
