"""A writable array retyped as read-only inside a kernel, so that calls share one specialisation.

Numba compiles a function once per combination of argument types, and a
read-only array is another type than a writable one. The layer passes its
kernels read-only arrays (``kernels.readonly``); a kernel that calls the
same kernels with scratch arrays it made itself (``small_layer.py``) would
compile a second copy of each, seconds of a first run, unless it passes
them retyped. Nothing is copied: the same data under a type that forbids
writing.
"""

from numba import types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic


@intrinsic
def frozen(typingctx, arr):
    """``arr`` typed read-only (the same array, no copy)."""
    if not isinstance(arr, types.Array):
        return None
    result = arr.copy(readonly=True)

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, result, args[0])

    return result(arr), codegen
