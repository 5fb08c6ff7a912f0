"""The layers' dense products as register-tiled loops: ``x @ Wᵀ + b``, ``g @ W`` and ``gᵀ x``.

These products are skinny: thousands of rows times 16-128 features and
outputs. OpenBLAS packs its operands for every call and reached 21-42
GFLOP/s on one thread of a 2-core AMD EPYC, where this tile reached 35-68
(20,399 x 16 -> 32: 0.97 vs 0.60 ms; 200,000 x 64 -> 64: 41 vs 24 ms).

:func:`matmul_rows` computes ``c[r0:r1] = a[r0:r1] @ b (+ bias)`` in tiles
of 4, 2 or 1 vectors of columns (the widest that fits first) by a few rows,
the accumulators held in registers across the whole sum. A vector is one
AVX-512 register where Numba compiles for AVX-512 (16 float32 or 8
float64), else one AVX2 register; the walks leave the 4-vector tiles out
there (their accumulators would fill AVX2's 16 registers; ``TILE_ROWS[4]``
serves direct calls of the tile, the tests'). On a 2-core Intel Xeon with
AVX-512 (one thread, old and new tile alternating, tiles of 4 rows then)
the wider vectors and tiles took 0.62-0.73x the time of 4 x 2 AVX2 vectors
on 200,000 x 64 -> 64 (79 GFLOP/s, near the 89 of the CPU's separate
multiplies and adds) and 0.79-0.84x on 20,399 x 16 -> 32.

Each tile holds as many accumulators as the registers allow beside its
column vectors and the broadcast input (:data:`TILE_ROWS`: 6 rows of 4
vectors and 8 of 2 or 1 with AVX-512's 32 registers; 8 of 2 or 1 with
AVX2's 16, where the compiler reads ``b``'s two vectors as operands of
the multiply-adds), so that each vector loaded from ``b`` feeds more fused
multiply-adds. The walk hands every tile of the columns :data:`ROW_BLOCK`
rows at a time, and each tile loops over them in sub-tiles of its rows.
On a 2-core Intel Xeon with AVX-512 (session of 2026-12-07, one thread,
in cache, against tiles of 4 rows alternating in one process), in
GFLOP/s: 64 -> 64 143-147 -> 164, 64 -> 128 142-145 -> 160, 64 -> 48
110 -> 145, 64 -> 32 120 -> 155, 16 -> 32 91 -> 130, 32 -> 16 87 -> 112;
the same CPU compiling for AVX2 (``NUMBA_CPU_NAME=haswell``) went from
74-90 to 90-116 with 8 rows of 2 vectors (87-107 with 6). The loop over
sub-tiles is emitted in the tile itself: a loop for it in the Numba walk
compiled the products' callers in 1.1-1.2x the time.

Every output element is ``Σ_k a[i, k] * b[k, j]`` over ``k`` in increasing
order, each step one fused multiply-add (``llvm.fma``: the product and the
sum rounded once), started from 0 (or from ``c[i, j]`` with
``accumulate``), and the bias added last. The columns past the last full
vector take a scalar loop with exactly those operations (:func:`fma`), so
the result does not depend on the vector width, the tile, the CPU or the
thread count (each row of ``c`` is computed alone). ``llvm.fma`` is exact
by definition, on a CPU without the instruction too (then a slow library
call; every x86-64 CPU with AVX2 has it), and likewise where Numba compiles
for a named target without FMA (``NUMBA_CPU_NAME=generic``, a portable
cache): the same bits, at a fraction of the speed. Fused steps in place of a
multiply then an add took 0.58-0.77x the time on a 2-core Intel Xeon (one
thread, alternating: 200,000 x 64 -> 64 25.7 -> 17.1 ms, 20,399 x 16 -> 32
0.43 -> 0.33 ms, 480 x 64 -> 64 50 -> 29 us), and they are more accurate.
"""

import llvmlite.binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.extending import intrinsic

#: the narrowest output row (in bytes) that goes to the tile; narrower products stay with BLAS
TILE_BYTES = 64


def compiles_for_avx512():
    """Whether Numba compiles for a CPU with AVX-512 (``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` honoured)."""
    if config.CPU_FEATURES is not None:
        return "+avx512f" in config.CPU_FEATURES.split(",")
    if config.CPU_NAME not in (None, "host"):
        return False  # a named target (a portable cache): the narrower vectors run everywhere
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


WIDE = compiles_for_avx512()
VECTOR_BYTES = 64 if WIDE else 32  # one register; LLVM splits or joins vectors for other widths
#: rows of a sub-tile, by its vectors of columns (see the module docstring)
TILE_ROWS = {4: 6, 2: 8, 1: 8} if WIDE else {4: 4, 2: 8, 1: 8}
#: rows the walk hands each tile at once: a multiple of every tile's rows
ROW_BLOCK = 24


def _lanes(dtype):
    return VECTOR_BYTES // (dtype.bitwidth // 8)


def _make_tile(vectors):
    """The intrinsic that computes any rows of ``vectors`` vectors of columns, ``TILE_ROWS[vectors]`` at a time."""

    def tile(typingctx, a, b, c, bias, b2, c2, bias2, split, i0, rows, j0, accumulate, use_bias):
        return _tile_typer(
            vectors, typingctx, a, b, c, bias, b2, c2, bias2, split, i0, rows, j0, accumulate, use_bias
        )

    tile.__name__ = tile.__qualname__ = f"_tile{vectors}"
    return intrinsic(tile)


def _tile_typer(vectors, typingctx, a, b, c, bias, b2, c2, bias2, split, i0, rows, j0, accumulate, use_bias):
    """``c[i0:i0+rows, j0:j0+W]`` of :func:`matmul_rows`, ``W = vectors`` vectors, ``TILE_ROWS[vectors]`` at a time.

    The columns are those of ``[b | b2]`` (and ``[bias | bias2]``): a vector
    starting at column ``split`` or later reads ``b2`` and writes ``c2`` at
    its column minus ``split`` (:func:`matmul_pair_rows`); with ``split`` past
    the last column every vector is ``b``'s. A vector never straddles
    ``split`` (the callers' guarantee). A short last sub-tile computes the
    rows past ``rows`` from the last valid row and never stores them.
    """
    shapes = ((a, 2), (b, 2), (c, 2), (bias, 1), (b2, 2), (c2, 2), (bias2, 1))
    if not all(isinstance(t, types.Array) and t.ndim == n for t, n in shapes):
        return None
    if not (
        a.dtype == b.dtype == c.dtype == bias.dtype == b2.dtype == c2.dtype == bias2.dtype
    ) or not isinstance(a.dtype, types.Float):
        return None
    index = types.intp
    sig = types.void(a, b, c, bias, b2, c2, bias2, index, index, index, index, types.boolean, types.boolean)
    lanes = _lanes(a.dtype)
    tile_rows = TILE_ROWS[vectors]

    def codegen(context, builder, signature, args):
        arr_a, arr_b, arr_c, arr_bias, arr_b2, arr_c2, arr_bias2 = (
            context.make_array(t)(context, builder, v) for t, v in zip(signature.args[:7], args[:7])
        )
        split, i0, rows, j0, accumulate, use_bias = args[7:]
        intp = context.get_value_type(types.intp)
        fty = context.get_value_type(signature.args[0].dtype)
        vty = ir.VectorType(fty, lanes)
        i8p = ir.IntType(8).as_pointer()
        itemsize = ir.Constant(intp, signature.args[0].dtype.bitwidth // 8)

        def const(v):
            return ir.Constant(intp, v)

        def bytes_of(arr):
            return builder.bitcast(arr.data, i8p)

        def load_vec(base, offset):
            return builder.load(builder.bitcast(builder.gep(base, [offset]), vty.as_pointer()), align=1)

        def store_vec(base, offset, value):
            builder.store(value, builder.bitcast(builder.gep(base, [offset]), vty.as_pointer()), align=1)

        # each vector's arrays (b, c, bias or the second ones) and column in them, chosen once per tile
        columns = []
        for v in range(vectors):
            column = builder.add(j0, const(v * lanes))
            second = builder.icmp_signed(">=", column, split)

            def pick(first_value, second_value, second=second):
                return builder.select(second, second_value, first_value)

            col_bytes = builder.mul(pick(column, builder.sub(column, split)), itemsize)
            columns.append(
                {
                    "b": builder.gep(pick(bytes_of(arr_b), bytes_of(arr_b2)), [col_bytes]),
                    "b_row": pick(*(builder.extract_value(arr.strides, 0) for arr in (arr_b, arr_b2))),
                    "c": builder.gep(pick(bytes_of(arr_c), bytes_of(arr_c2)), [col_bytes]),
                    "c_row": pick(*(builder.extract_value(arr.strides, 0) for arr in (arr_c, arr_c2))),
                    "bias": builder.gep(pick(bytes_of(arr_bias), bytes_of(arr_bias2)), [col_bytes]),
                }
            )
        a_base = bytes_of(arr_a)
        a_row, a_col = (builder.extract_value(arr_a.strides, d) for d in (0, 1))
        depth = builder.extract_value(arr_a.shape, 1)

        def sub_tile(i0, rows):
            """Rows ``[i0, i0 + rows)``, ``1 <= rows <= tile_rows``, in one pass over ``depth``."""
            last = builder.add(i0, builder.sub(rows, const(1)))
            row_ids = [
                builder.select(builder.icmp_signed("<", const(r), rows), builder.add(i0, const(r)), last)
                for r in range(tile_rows)
            ]
            a_rows = [builder.mul(i, a_row) for i in row_ids]
            c_offsets = [[builder.mul(i, col["c_row"]) for col in columns] for i in row_ids]
            zero = ir.Constant(vty, None)
            accs = []
            for r in range(tile_rows):
                row = []
                for v in range(vectors):
                    start = builder.select(accumulate, load_vec(columns[v]["c"], c_offsets[r][v]), zero)
                    row.append(cgutils.alloca_once_value(builder, start))
                accs.append(row)
            splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
            with cgutils.for_range(builder, depth) as loop:
                k = loop.index
                b_vecs = [load_vec(col["b"], builder.mul(k, col["b_row"])) for col in columns]
                a_k = builder.mul(k, a_col)
                for r in range(tile_rows):
                    scalar = builder.load(
                        builder.bitcast(builder.gep(a_base, [builder.add(a_rows[r], a_k)]), fty.as_pointer())
                    )
                    one = builder.insert_element(
                        ir.Constant(vty, ir.Undefined), scalar, ir.Constant(ir.IntType(32), 0)
                    )
                    splat = builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), splat_mask)
                    for v in range(vectors):
                        builder.store(fused(builder, splat, b_vecs[v], builder.load(accs[r][v])), accs[r][v])
            for r in range(tile_rows):
                with builder.if_then(builder.icmp_signed("<", const(r), rows)):
                    for v in range(vectors):
                        total = builder.load(accs[r][v])
                        with builder.if_then(use_bias):
                            bias_v = load_vec(columns[v]["bias"], const(0))
                            builder.store(builder.fadd(total, bias_v), accs[r][v])
                        store_vec(columns[v]["c"], c_offsets[r][v], builder.load(accs[r][v]))

        end = builder.add(i0, rows)
        # sub-tiles of tile_rows rows, the last one short: a loop in the tile, not in the Numba walk,
        # whose own loop for it compiled the products' callers in 1.1-1.2x the time
        with cgutils.for_range_slice(builder, i0, end, const(tile_rows)) as (t0, _):
            left = builder.sub(end, t0)
            sub_tile(
                t0, builder.select(builder.icmp_signed("<", left, const(tile_rows)), left, const(tile_rows))
            )
        return context.get_dummy_value()

    return sig, codegen


_tile4, _tile2, _tile1 = (_make_tile(v) for v in (4, 2, 1))


def fused(builder, a, b, c):
    """``a * b + c`` rounded once (``llvm.fma``), for float scalars or vectors."""
    ty = a.type
    element = ty.element if isinstance(ty, ir.VectorType) else ty
    suffix = "f32" if isinstance(element, ir.FloatType) else "f64"
    name = f"llvm.fma.v{ty.count}{suffix}" if isinstance(ty, ir.VectorType) else f"llvm.fma.{suffix}"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty, [ty, ty, ty]), name)
    return builder.call(fn, [a, b, c])


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` with one rounding, for three floats of one type (the tile's step, in scalar code)."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        return fused(builder, *args)

    return a(a, b, c), codegen


@njit(nogil=True, cache=True)
def matmul_rows(r0, r1, a, b, bias, accumulate, c):
    """``c[i] = a[i] @ b + bias`` for the rows ``i`` in ``[r0, r1)`` (``accumulate``: ``c[i] += a[i] @ b + bias``).

    ``a`` (n, K) with any strides, ``b`` (K, N) and ``c`` (n, N) with
    contiguous rows, ``bias`` (N,) or (0,) for none; one float dtype.
    """
    n_out = b.shape[1]
    depth = a.shape[1]
    lanes = VECTOR_BYTES // c.itemsize
    use_bias = bias.size > 0
    zero = c.dtype.type(0.0)
    # the walk over the tiles is written out here and in matmul_pair_rows: a helper inlined into both
    # made a first run compile the products in 1.25x the time (an extra Numba inlining per call site)
    for i in range(r0, r1, ROW_BLOCK):
        rows = min(ROW_BLOCK, r1 - i)
        j = 0
        if WIDE:  # a compile-time constant: AVX2 builds leave the 4-vector tile out
            while j + 4 * lanes <= n_out:
                _tile4(a, b, c, bias, b, c, bias, n_out, i, rows, j, accumulate, use_bias)
                j += 4 * lanes
        while j + 2 * lanes <= n_out:
            _tile2(a, b, c, bias, b, c, bias, n_out, i, rows, j, accumulate, use_bias)
            j += 2 * lanes
        while j + lanes <= n_out:
            _tile1(a, b, c, bias, b, c, bias, n_out, i, rows, j, accumulate, use_bias)
            j += lanes
        for r in range(i, i + rows):
            for col in range(j, n_out):
                total = c[r, col] if accumulate else zero
                for k in range(depth):
                    total = fma(a[r, k], b[k, col], total)
                if use_bias:
                    total += bias[col]
                c[r, col] = total


@njit(nogil=True, cache=True)
def matmul_pair_rows(r0, r1, a, b, bias, c, b2, bias2, c2):
    """``c[i] = a[i] @ b + bias`` and ``c2[i] = a[i] @ b2 + bias2`` for the rows ``i`` in ``[r0, r1)``.

    A layer's two projections of one input in one pass: each block of
    :data:`ROW_BLOCK` rows reads ``a`` for the columns of both while it is
    in the cache, and the widest tile spans both
    outputs where one alone is narrower (``small-batch``'s 32 + 32 columns:
    one 4-vector tile instead of two 2-vector ones), and the rows run in one
    call (the layer's chunks on the thread team, not a Python task per
    chunk making two calls). The same operations per element as
    :func:`matmul_rows`, so the same bits. Arrays as in :func:`matmul_rows`;
    ``bias`` (N,) and ``bias2`` (N2,), either of size 0 for none.

    The columns of ``[b | b2]`` run as one span where no vector can straddle
    the two outputs (``N`` whole vectors) and both or neither have a bias,
    else each output's columns as a span of their own.
    """
    split = b.shape[1]
    n_out = split + b2.shape[1]
    depth = a.shape[1]
    lanes = VECTOR_BYTES // c.itemsize
    # the tiles read and write without bounds checks
    if b.shape[0] != depth or b2.shape[0] != depth or c.shape[1] != split or c2.shape[1] != b2.shape[1]:
        raise ValueError("b and b2 need a row per column of a; c and c2 their widths")
    if bias.size not in (0, split) or bias2.size not in (0, b2.shape[1]) or min(c.shape[0], c2.shape[0]) < r1:
        raise ValueError("bias and bias2 need a value per column or none; c and c2 the rows up to r1")
    whole = split % lanes == 0 and (bias.size > 0) == (bias2.size > 0)
    zero = c.dtype.type(0.0)
    for i in range(r0, r1, ROW_BLOCK):
        rows = min(ROW_BLOCK, r1 - i)
        for span in range(1 if whole else 2):
            j = split if span == 1 else 0
            end = split if span == 0 and not whole else n_out
            use_bias = (bias2.size if span == 1 else bias.size) > 0
            if WIDE:
                while j + 4 * lanes <= end:
                    _tile4(a, b, c, bias, b2, c2, bias2, split, i, rows, j, False, use_bias)
                    j += 4 * lanes
            while j + 2 * lanes <= end:
                _tile2(a, b, c, bias, b2, c2, bias2, split, i, rows, j, False, use_bias)
                j += 2 * lanes
            while j + lanes <= end:
                _tile1(a, b, c, bias, b2, c2, bias2, split, i, rows, j, False, use_bias)
                j += lanes
            for r in range(i, i + rows):  # the columns past the last whole vector of the span
                for col in range(j, end):
                    second = col >= split
                    out_col = col - split if second else col
                    total = zero
                    for k in range(depth):
                        total = fma(a[r, k], b2[k, out_col] if second else b[k, out_col], total)
                    if second:
                        c2[r, out_col] = total + bias2[out_col] if bias2.size > 0 else total
                    else:
                        c[r, out_col] = total + bias[out_col] if bias.size > 0 else total
