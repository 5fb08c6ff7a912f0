"""Building blocks of LLVM IR shared by the kernels' intrinsics (``combine.py``, ``edge_sums.py``,
``source_sums.py``, ``edge_terms.py``, ``head_sums.py``, ``pairwise.py``, ``records.py``, ``reduce.py``,
``softmax.py``).

Addresses from an array's data pointer and strides, vector stores, the
loop over whole 8-lane vectors, the dropout factor without a branch, the
argument checks at typing time, the common set-up of the LeakyReLU
codegens (arguments by name, vector constants), every head at once
(:data:`ALL_HEADS`) and functions of their own (:func:`outlined`).
"""

from types import SimpleNamespace

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd import LANES, element_pointer, splat

#: The head argument that asks an intrinsic of ``combine.py``, ``edge_sums.py``, ``source_sums.py`` or
#: ``records.py`` for every head of a row (see :func:`for_heads`).
ALL_HEADS = -1


def whole_vectors(builder, channels):
    """IR: whether ``channels`` fill whole 8-lane vectors (``C mod 8 == 0``)."""
    zero = ir.Constant(channels.type, 0)
    return builder.icmp_unsigned("==", builder.urem(channels, ir.Constant(channels.type, LANES)), zero)


def several_heads_fused(builder, heads, channels):
    """IR: whether several heads fill whole vectors, so a row's heads are walked as one run of ``H * C``
    channels (:func:`for_heads`; the forward kernel's scores through :func:`heads_at_once`)."""
    return builder.and_(
        builder.icmp_signed(">", heads, ir.Constant(heads.type, 1)), whole_vectors(builder, channels)
    )


def one_head_in_vectors(builder, heads, channels):
    """IR: one head whose channels fill whole vectors (``head_sums.row_dots``, :func:`edges_at_once`)."""
    return builder.and_(
        builder.icmp_unsigned("==", heads, ir.Constant(heads.type, 1)), whole_vectors(builder, channels)
    )


def _count_test(name, test):
    """An intrinsic ``name(heads, channels)`` that returns ``test(builder, heads, channels)``: a kernel asks
    in Numba code what an intrinsic asks in IR, from the one definition."""

    def typer(typingctx, heads, channels):
        if not (isinstance(heads, types.Integer) and isinstance(channels, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            h, c = (context.cast(builder, v, t, types.intp) for v, t in zip(args, signature.args))
            return test(builder, h, c)

        return types.boolean(heads, channels), codegen

    typer.__name__ = name
    return intrinsic(typer)


#: Whether several heads fill whole vectors (:func:`several_heads_fused`), for a kernel's own loops.
heads_at_once = _count_test("heads_at_once", several_heads_fused)
#: Whether one head fills whole vectors (:func:`one_head_in_vectors`), for a kernel's own loops.
edges_at_once = _count_test("edges_at_once", one_head_in_vectors)


@intrinsic
def typed_contiguous(typingctx, *arrays):
    """Whether Numba types every one of ``arrays`` (float arrays of one dtype) C-contiguous: a constant of
    the compiled kernel. The vector intrinsics compile their code only for C-contiguous arrays and write
    nothing otherwise; a kernel that must choose its loop before calling one asks this with the same
    arrays (the forward kernel's scores, the target pass's ``A_ij``)."""
    if not all(isinstance(a, types.Array) and isinstance(a.dtype, types.Float) for a in arrays):
        return None
    if len({a.dtype for a in arrays}) != 1:
        return None
    fits = all_contiguous(*arrays)

    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(1), int(fits))

    return types.boolean(types.StarArgTuple.from_types(arrays)), codegen


def store_vector(builder, ptr, index, value):
    builder.store(value, builder.bitcast(builder.gep(ptr, [index]), value.type.as_pointer()), align=1)


def add_source_term(builder, total, dl, at, slope_or_one, w, g):
    """``total += (dl at) s + w g`` for one vector of a source pass (``total``: the sum's alloca).

    The plain loop's operations in its order, ``dl * att[h, c] * s + w *
    grad[i, h, c]``, never fused: the source pass that forms ``z``, the one
    that reads the source records (``source_sums.py``, ``records.py``) and
    the target pass that sums ``Q_j`` too (``edge_sums.target_row_sums_sources``)
    share it, so they give the same bits.
    """
    term = builder.fadd(builder.fmul(builder.fmul(dl, at), slope_or_one), builder.fmul(w, g))
    builder.store(builder.fadd(builder.load(total), term), total)


def times_scale(builder, w, has_scale, scale_pointer, unit):
    """``w * scale`` where there is a scale, else ``w * 1.0``, which is ``w`` exactly: no branch in the loop.

    ``unit`` points at a 1.0 of ``w``'s type; ``scale_pointer`` is only read
    when ``has_scale``. A branch there made LLVM compile each edge loop twice.
    """
    return builder.fmul(w, builder.load(builder.select(has_scale, scale_pointer, unit)))


def index_groups(builder, intp, count, group, body, half=False):
    """Call ``body(start, k)`` for the indices ``[0, count)``: blocks of ``k = group``, then (with ``half``)
    one block of ``group // 2`` where that many are left, then ``k = 1`` each."""
    width = ir.Constant(intp, group)
    groups = builder.udiv(count, width)
    with cgutils.for_range(builder, groups) as loop:
        body(builder.mul(loop.index, width), group)
    done = builder.mul(groups, width)
    if half:
        size = ir.Constant(intp, group // 2)
        has_half = builder.icmp_signed(">=", builder.sub(count, done), size)
        with builder.if_then(has_half):
            body(done, group // 2)
        done = builder.select(has_half, builder.add(done, size), done)
    with cgutils.for_range(builder, count, start=done) as loop:
        body(loop.index, 1)


def vector_groups(builder, intp, channels, group, body, half=False):
    """Call ``body(base, count)`` for the channels in whole vectors: groups of ``group``, then (with ``half``)
    one of ``group // 2`` where that many are left, then one at a time.

    ``body`` emits the code for the channels ``[base, base + 8 count)``.
    Returns the first channel left over (``C - C mod 8``).
    """
    lanes = ir.Constant(intp, LANES)
    vectors = builder.udiv(channels, lanes)
    index_groups(
        builder, intp, vectors, group, lambda start, count: body(builder.mul(start, lanes), count), half
    )
    return builder.mul(vectors, lanes)


def for_heads(builder, h, heads, channels, body, fusable=True):
    """Emit an intrinsic's code for its head argument ``h``: ``body(row_head, width, head_of, fused)``.

    ``body`` emits the code for the channels ``[0, width)`` of a row, from
    its head ``row_head``, each vector's per-head scalars (``δ``, ``α``, the
    weights) read at head ``head_of(offset)``; ``fused`` (a Python bool)
    says which of the two calls below it is in.

    - ``h >= 0``: head ``h``'s ``C`` channels (``fused`` False).
    - ``h == ALL_HEADS`` with several heads whose channels fill whole
      vectors (:func:`several_heads_fused`), where ``fusable``: all ``H * C``
      channels of a row as one run from head 0 (a C-contiguous ``(H, C)``
      row is one), each vector lying in one head, so the loop over the row's
      edges runs once per group of vectors instead of once per head
      (``fused`` True). With 8 heads of 8 channels (Cora's layer) that is
      4 heads a walk in ``combine.py``, the source pass and (with AVX-512)
      the target pass.
    - ``h == ALL_HEADS`` otherwise: each head in turn, as ``h >= 0``. One
      head goes by its index: fused, its scalars would be loaded once per
      vector instead of once per group of vectors (the source pass at 1 x 32
      took 1.18x the time, Cora's graph).

    Each channel's sum is the same sequence of operations either way, so the
    bits do not depend on the path. The kernels pass ``ALL_HEADS`` and the
    choice is made here, once, for every intrinsic that walks a row's heads.
    """
    intp = h.type
    zero = ir.Constant(intp, 0)
    one = ir.Constant(intp, 1)
    every = builder.icmp_signed("<", h, zero)

    def head_by_head():
        first = builder.select(every, zero, h)
        last = builder.select(every, heads, builder.add(h, one))
        with cgutils.for_range_slice(builder, first, last, one, intp) as (head, _):
            body(head, channels, lambda _offset: head, False)

    if not fusable:
        head_by_head()
        return
    fused = builder.and_(every, several_heads_fused(builder, heads, channels))
    with builder.if_else(fused) as (together, apart):
        with together:
            body(zero, builder.mul(heads, channels), lambda offset: builder.udiv(offset, channels), True)
        with apart:
            head_by_head()


def whole_vector_channels(builder, channels):
    """``C - C mod 8``: the first channel of each head that the intrinsics leave to the kernels' loops."""
    return builder.sub(channels, builder.urem(channels, ir.Constant(channels.type, LANES)))


def outlined(builder, name, args, body):
    """Call ``name(*args)``, a void LLVM function of this module that ``body(fb, params)`` writes, defined
    on first use, never inlined, with internal linkage (nothing exported, each cached kernel its own copy).

    The function's name gets its argument types, so each variant (float32, float64) has its own; one
    ``name`` must always come with one ``body``. For vector code too long to sit in a kernel's row loop:
    the heads' softmax written into the loop slowed the loop's other path too, where it never ran (one
    head: the forward kernel 1.025x, the target pass 1.2x the time on Cora's graph), while a call to a
    Numba function would count the references of its arrays.
    """
    module = builder.module
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    full_name = name + "." + ".".join(str(t).replace(" ", "") for t in fnty.args)
    fn = module.globals.get(full_name)
    if fn is None:
        fn = ir.Function(module, fnty, full_name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fb = ir.IRBuilder(fn.append_basic_block("entry"))
        body(fb, list(fn.args))
        fb.ret_void()
    elif fn.function_type != fnty:
        raise TypeError(f"{full_name} exists with another signature")
    builder.call(fn, args)


def array_args(builder, arr):
    """A Numba array structure as ``[data, stride 0, stride 1, ...]``: arguments for :func:`outlined`."""
    ndim = arr.strides.type.count
    return [arr.data] + [builder.extract_value(arr.strides, k) for k in range(ndim)]


def array_from(fb, params):
    """:func:`array_args` back, inside the outlined function, as what :func:`element_pointer` reads
    (``.data``, ``.strides``)."""
    data, strides = params[0], params[1:]
    packed = ir.Constant(ir.ArrayType(strides[0].type, len(strides)), None)
    for k, stride in enumerate(strides):
        packed = fb.insert_value(packed, stride, k)
    return SimpleNamespace(data=data, strides=packed)


def lane_groups(builder, count, group):
    """``group(k, width)`` for the items ``[k, k + width)`` of ``[0, count)``: 8 at a time, then the last
    ``count mod 8`` as one group of that width (one code path per width, ``width`` a Python int). For code
    with heads (``softmax.py``, ``head_sums.py``) or a row's edges (``head_sums.row_dots``) in the lanes
    of a vector: plain loads and stores of exactly those lanes, where masked ones of 8 lanes overlapped
    the next edge's and stalled (2 heads took 1.9x the loops' time)."""
    intp = count.type
    full = builder.udiv(count, ir.Constant(intp, LANES))
    with cgutils.for_range(builder, full) as loop:
        group(builder.mul(loop.index, ir.Constant(intp, LANES)), LANES)
    lane_rest(
        builder,
        builder.urem(count, ir.Constant(intp, LANES)),
        builder.mul(full, ir.Constant(intp, LANES)),
        group,
    )


def lane_rest(builder, rest, first, group):
    """``group(first, width)`` for the ``rest`` items from ``first``, ``rest`` in ``[0, 8)``: one code path per
    width (``width`` a Python int, 1 to 7), nothing for none. For the channels past the last whole vector
    of a row, in one vector of their own width (``reduce.sum_rows``, ``pairwise.pair_sums``)."""
    intp = rest.type
    done = builder.append_basic_block("lanes.rest.done")
    switch = builder.switch(rest, done)
    for width in range(1, LANES):
        block = builder.append_basic_block(f"lanes.rest.{width}")
        switch.add_case(ir.Constant(intp, width), block)
        builder.position_at_end(block)
        group(first, width)
        builder.branch(done)
    builder.position_at_end(done)


def arrays_ok(arrays, ndims):
    """Whether ``arrays`` are Numba arrays of these ``ndims`` whose float dtypes are all one."""
    if not all(isinstance(a, types.Array) for a in arrays):
        return False
    if tuple(a.ndim for a in arrays) != ndims:
        return False
    floats = [a for a in arrays if isinstance(a.dtype, types.Float)]
    return len({a.dtype for a in floats}) == 1


def all_contiguous(*arrays):
    """Whether Numba types every one of ``arrays`` C-contiguous."""
    return all(a.layout == "C" for a in arrays)


def load_index(context, builder, ary, ty, k):
    """``ary[k]`` of a 1-D integer array, as intp."""
    return context.cast(builder, builder.load(element_pointer(builder, ary, [k])), ty.dtype, types.intp)


def leaky_setup(context, builder, signature, args, names):
    """``(values, arrays, v)`` of a LeakyReLU codegen whose arguments are ``names`` (one of them ``"slope"``).

    ``values`` maps each name to its LLVM value, ``arrays`` each array
    argument to its Numba array structure; ``v`` holds the float type
    (``v.fty``), the 8-lane vector type (``v.vec``) and the vectors ``v.zero``,
    ``v.one`` and ``v.slope``. The first argument's dtype is the float type.
    """
    values = dict(zip(names, args))
    arrays = {
        name: context.make_array(ty)(context, builder, value)
        for name, ty, value in zip(names, signature.args, args)
        if isinstance(ty, types.Array)
    }
    fty = context.get_value_type(signature.args[0].dtype)
    vec = ir.VectorType(fty, LANES)
    v = SimpleNamespace(
        fty=fty,
        vec=vec,
        zero=ir.Constant(vec, None),
        one=splat(builder, ir.Constant(fty, 1.0), vec),
        slope=splat(builder, values["slope"], vec),
    )
    return values, arrays, v
