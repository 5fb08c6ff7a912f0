"""Building blocks of LLVM IR shared by the intrinsics of ``combine.py``, ``edge_sums.py`` and ``edge_terms.py``.

Addresses from an array's data pointer and strides, vector stores, the
loop over whole 8-lane vectors, the dropout factor without a branch, the
argument checks at typing time, and the common set-up of the LeakyReLU
codegens (arguments by name, vector constants).
"""

from types import SimpleNamespace

from llvmlite import ir
from numba import types
from numba.core import cgutils

from .simd import LANES, element_pointer, splat


def store_vector(builder, ptr, index, value):
    builder.store(value, builder.bitcast(builder.gep(ptr, [index]), value.type.as_pointer()), align=1)


def times_scale(builder, w, has_scale, scale_pointer, unit):
    """``w * scale`` where there is a scale, else ``w * 1.0``, which is ``w`` exactly: no branch in the loop.

    ``unit`` points at a 1.0 of ``w``'s type; ``scale_pointer`` is only read
    when ``has_scale``. A branch there made LLVM compile each edge loop twice.
    """
    return builder.fmul(w, builder.load(builder.select(has_scale, scale_pointer, unit)))


def index_groups(builder, intp, count, group, body):
    """Call ``body(start, k)`` for the indices ``[0, count)``: blocks of ``k = group``, then ``k = 1`` each."""
    width = ir.Constant(intp, group)
    groups = builder.udiv(count, width)
    with cgutils.for_range(builder, groups) as loop:
        body(builder.mul(loop.index, width), group)
    done = builder.mul(groups, width)
    with cgutils.for_range(builder, count, start=done) as loop:
        body(loop.index, 1)


def vector_groups(builder, intp, channels, group, body):
    """Call ``body(base, count)`` for the channels in whole vectors: groups of ``group``, then one at a time.

    ``body`` emits the code for the channels ``[base, base + 8 count)``.
    Returns the first channel left over (``C - C mod 8``).
    """
    lanes = ir.Constant(intp, LANES)
    vectors = builder.udiv(channels, lanes)
    index_groups(builder, intp, vectors, group, lambda start, count: body(builder.mul(start, lanes), count))
    return builder.mul(vectors, lanes)


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
