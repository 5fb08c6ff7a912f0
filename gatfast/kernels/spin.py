"""Spin waits for the thread team of ``gatfast._team``: atomic loads and adds on an int64 array, in nogil code.

Waking a sleeping thread costs 25-60 us on a 2-vCPU virtual machine (a
futex wake, then the vCPU's own wake-up), as much as a small graph's whole
edge pass. The team's helpers therefore wait for the next task by reading a
sequence number in a loop for a short while before they sleep, and the
caller waits for their last chunks the same way. These loops release the
GIL (they would otherwise stop the very thread they wait for) and use the
CPU's pause hint, which frees the core's shared resources and costs about
25 ns an iteration (AMD Zen 4); ``gatfast._team`` measures that once and
turns its wait times into iteration counts.

Every function here returns after a bounded number of iterations, so a
caller in Python gets control back (and sees Ctrl-C) within its wait time.
"""

from llvmlite import binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_ARCH = binding.get_process_triple().split("-")[0]  # what LLVM compiles for, not the kernel's machine


def _cell_pointer(context, builder, signature, args):
    ary = context.make_array(signature.args[0])(context, builder, args[0])
    index = context.cast(builder, args[1], signature.args[1], types.intp)
    return builder.gep(ary.data, [index])


def _cell_and_value(context, builder, signature, args):
    """The pointer to ``cells[index]`` and the third argument as an int64 (stores and adds)."""
    value = context.cast(builder, args[2], signature.args[2], types.int64)
    return _cell_pointer(context, builder, signature, args), value


def _check_cells(arr):
    # the cell's address is data + index * 8, with no bounds check: the callers own their small arrays
    if not (
        isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1 and arr.layout == "C"
    ):
        raise TypeError("spin cells must be a contiguous 1-D int64 array")


@intrinsic
def load_acquire(typingctx, cells, index):
    """``cells[index]``, read with acquire ordering (never cached in a register across iterations)."""
    _check_cells(cells)

    def codegen(context, builder, signature, args):
        return builder.load_atomic(
            _cell_pointer(context, builder, signature, args), ordering="acquire", align=8
        )

    return types.int64(cells, index), codegen


@intrinsic
def fetch_add(typingctx, cells, index, amount):
    """Add ``amount`` to ``cells[index]`` atomically (sequentially consistent); returns the old value."""
    _check_cells(cells)

    def codegen(context, builder, signature, args):
        ptr, amount = _cell_and_value(context, builder, signature, args)
        return builder.atomic_rmw("add", ptr, amount, "seq_cst")

    return types.int64(cells, index, amount), codegen


@intrinsic
def cpu_pause(typingctx):
    """The CPU's spin-wait hint (x86 ``pause``, Arm ``yield``); nothing on other CPUs."""

    def codegen(context, builder, signature, args):
        void = ir.FunctionType(ir.VoidType(), [])
        if _ARCH in ("x86_64", "i386", "i486", "i586", "i686"):
            builder.call(cgutils.get_or_insert_function(builder.module, void, "llvm.x86.sse2.pause"), [])
        elif _ARCH in ("aarch64", "arm64"):  # YIELD: a hint some cores ignore, never wrong
            hint = ir.FunctionType(ir.VoidType(), [ir.IntType(32)])
            fn = cgutils.get_or_insert_function(builder.module, hint, "llvm.aarch64.hint")
            builder.call(fn, [ir.Constant(ir.IntType(32), 1)])  # 1: YIELD
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def store_release(typingctx, cells, index, value):
    """``cells[index] = value`` with release ordering: every store before it is seen first."""
    _check_cells(cells)

    def codegen(context, builder, signature, args):
        ptr, value = _cell_and_value(context, builder, signature, args)
        builder.store_atomic(value, ptr, ordering="release", align=8)
        return context.get_dummy_value()

    return types.void(cells, index, value), codegen


@njit(nogil=True, cache=True)
def publish(cells, seq_at, seq, slots_at, slots):
    """Post task ``seq`` for ``slots`` helpers: the slots first, then the sequence number (release)."""
    store_release(cells, slots_at, slots)
    store_release(cells, seq_at, seq)


@njit(nogil=True, cache=True)
def add(cells, index, amount):
    """Add ``amount`` to ``cells[index]`` atomically, without the GIL."""
    fetch_add(cells, index, amount)


@njit(nogil=True, cache=True)
def spin_at_least(cells, index, target, iterations):
    """Wait until ``cells[index] >= target``, at most ``iterations`` pauses; returns the value last read."""
    for _ in range(iterations):
        value = load_acquire(cells, index)
        if value >= target:
            return value
        cpu_pause()
    return load_acquire(cells, index)


@njit(nogil=True, cache=True)
def finish_and_spin(done, finished, cells, seq_at, slots_at, rank, old, iterations, delay):
    """A helper's wait between tasks: mark its finished chunks, then wait for a task that has a place for it.

    Adds ``finished`` to ``done[0]``; then waits, at most ``iterations``
    pauses (one look with none), for the sequence number ``cells[seq_at]``
    to move past ``old`` with ``rank < cells[slots_at]`` (a task that takes
    this helper). Returns the new sequence number, or ``-1 - last`` when the
    time is up or at the first task that leaves this helper out, ``last``
    the newest number seen. After seeing a task for it, it pauses ``delay``
    more times: the caller that posted it still holds the GIL for a few
    microseconds, and a helper that asks for it then sleeps on it (and pays
    the very wake-up this avoids). Marking the chunks here, not before the
    call, keeps the helper from holding the GIL just as the caller, which
    waits for that mark, wants it back.
    """
    if finished:
        fetch_add(done, 0, finished)
    for _ in range(max(iterations, 1)):
        value = load_acquire(cells, seq_at)
        if value != old:
            if rank >= load_acquire(cells, slots_at):
                return -1 - value
            for _ in range(delay):
                cpu_pause()
            return value
        cpu_pause()
    return -1 - old
