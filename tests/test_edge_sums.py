"""``kernels.edge_sums``: the backward passes' vector sums give the plain loops' bits."""

import numpy as np
import pytest
from naive import records_of, written_part

from gatfast.kernels import (
    gatv2_backward_source_record_rows,
    gatv2_backward_source_rows,
    gatv2_backward_target_blocks,
    num_att_blocks,
    record_bytes,
)
from gatfast.kernels.activations import ACTIVATIONS
from gatfast.kernels.edge import edge_z
from gatfast.kernels.prefetch import PREFETCH_DISTANCE, WINDOW
from gatfast.layers.passes import NO_CUTS


def _strided(shape, dtype):
    """An array of ``shape`` whose last axis has stride 2 elements: Numba types it non-contiguous."""
    return np.full(shape[:-1] + (2 * shape[-1],), np.nan, dtype)[..., ::2]


def _graph(seed, n, max_degree=9):
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, max_degree + 1, n)
    degree[::7] = 0  # rows without edges
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int64)
    targets = np.repeat(np.arange(n), degree)
    order = np.argsort(indices, kind="stable")
    src_indptr = np.concatenate([[0], np.cumsum(np.bincount(indices, minlength=n))]).astype(np.int64)
    return indptr, indices, src_indptr, order.astype(np.int64), targets[order].astype(np.int64)


def _inputs(seed, n, nnz, heads, channels, dtype, dropout):
    rng = np.random.default_rng(seed)
    xl, xr, grad = (
        rng.standard_normal((n, heads, channels)) * 10.0 ** rng.uniform(-4, 4, (n, heads, 1))
        for _ in range(3)
    )
    att = rng.standard_normal((heads, channels))
    alpha = rng.random((nnz, heads))
    edge_scale = (rng.random((nnz, heads)) >= 0.4) / 0.6 if dropout else np.zeros((0, heads))
    xl[::3, :, ::2] = -xr[::3, :, ::2]  # z = +0 exactly: the LeakyReLU's test must be z > 0, not z >= 0
    return [a.astype(dtype) for a in (xl, xr, grad, att, alpha, edge_scale)]


# every SIMD path: tails alone (1, 7), single vectors (8, 9), whole groups of 16 (target pass) or 32
# channels (source pass) followed by single vectors and a tail (24, 25, 40), and longer rows; with
# several heads of whole vectors the passes take every head at once (ir_parts.ALL_HEADS), their groups
# of vectors spanning heads (8 x 8, 4 x 16)
CASES = [(h, c) for c in (1, 7, 8, 9, 16, 17, 24, 25, 33, 40, 64) for h in (1, 3)] + [(8, 8), (4, 16)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dropout", [False, True])
def test_target_pass_gives_the_same_bits_with_and_without_the_vector_sums(dtype, heads, channels, dropout):
    """Contiguous outputs take ``target_row_sums`` (and one head's ``head_sums.row_dots``, the softmax's
    vector backward); strided ones make them step aside for the plain loops."""
    n = 40
    indptr, indices, *_ = _graph(channels * 10 + heads, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(channels, n, indices.size, heads, channels, dtype, dropout)
    blocks = num_att_blocks(n, 16) if n > 16 else 1
    results = []
    for make in (lambda shape: np.full(shape, np.nan, dtype), lambda shape: _strided(shape, dtype)):
        upstream, delta = make((indices.size, heads)), np.empty((indices.size, heads), dtype)
        p_out, att_part = make((n, heads, channels)), make((blocks, heads, channels))
        bias_part = make((blocks, heads, channels))
        gatv2_backward_target_blocks(
            0,
            blocks,
            indptr,
            indices,
            xl,
            xr,
            att,
            dtype(0.2),
            ACTIVATIONS["leaky_relu"],
            WINDOW,
            edge_scale,
            alpha,
            grad,
            upstream,
            delta,
            p_out,
            att_part,
            bias_part,
            None,
            None,
            NO_CUTS,
            np.empty((n, heads, channels), dtype),
        )
        results.append([np.ascontiguousarray(a) for a in (upstream, delta, p_out, att_part, bias_part)])
    for name, fast, plain in zip(("upstream", "delta", "p_out", "att_part", "bias_part"), *results):
        assert not np.isnan(fast).any(), name
        assert fast.tobytes() == plain.tobytes(), name
    assert results[0][-1].tobytes() == _block_sums(grad, blocks).tobytes()


def _block_sums(grad, blocks):
    """Each block's rows of ``grad`` added in order from zero (numpy, one row at a time)."""
    n = grad.shape[0]
    size = -(-n // blocks)
    sums = np.zeros((blocks, *grad.shape[1:]), grad.dtype)
    for i in range(n):
        sums[i // size] += grad[i]
    return sums


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dropout", [False, True])
def test_source_pass_gives_the_same_bits_with_and_without_the_vector_sums(dtype, heads, channels, dropout):
    """The vector sums (no prefetch, contiguous) against the plain loop (strided), and with prefetch."""
    n = 40
    _, indices, src_indptr, src_edges, src_targets = _graph(channels * 10 + heads, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(
        channels + 1, n, indices.size, heads, channels, dtype, dropout
    )
    delta = np.random.default_rng(channels).standard_normal((indices.size, heads)).astype(dtype)
    results = []
    for ahead, make in (
        (None, lambda shape: np.full(shape, np.nan, dtype)),
        (None, lambda shape: _strided(shape, dtype)),
        (16, lambda shape: np.full(shape, np.nan, dtype)),
    ):
        q_out = make((n, heads, channels))
        gatv2_backward_source_rows(
            0,
            n,
            src_indptr,
            src_edges,
            src_targets,
            xl,
            xr,
            att,
            dtype(0.2),
            ACTIVATIONS["leaky_relu"],
            ahead,
            edge_scale,
            alpha,
            delta,
            grad,
            q_out,
        )
        results.append(np.ascontiguousarray(q_out))
    assert not np.isnan(results[0]).any()
    assert results[0].tobytes() == results[1].tobytes()
    assert results[0].tobytes() == results[2].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dims", [1, 4, 9, 14])  # attributes in blocks of 8, then 4, then one at a time
def test_source_edge_pass_gives_the_same_bits_with_and_without_the_vector_sums(dtype, heads, channels, dims):
    """With edge features: the vector sums against the plain loop (strided), and with prefetch."""
    from gatfast.kernels import gatv2_backward_source_edge_rows

    n = 40
    _, indices, src_indptr, src_edges, src_targets = _graph(channels * 10 + heads, n)
    dropout = dims == 4  # with and without, without doubling the cases
    xl, xr, grad, att, alpha, edge_scale = _inputs(
        channels + 2, n, indices.size, heads, channels, dtype, dropout
    )
    rng = np.random.default_rng(channels + dims)
    delta = rng.standard_normal((indices.size, heads)).astype(dtype)
    u = rng.standard_normal((indices.size, dims)).astype(dtype)
    weT = rng.standard_normal((heads, dims, channels)).astype(dtype)
    results = []
    for ahead, make in (
        (None, lambda shape: np.full(shape, np.nan, dtype)),
        (None, lambda shape: _strided(shape, dtype)),
        (16, lambda shape: np.full(shape, np.nan, dtype)),
    ):
        q_out = make((n, heads, channels))
        gatv2_backward_source_edge_rows(
            0, n, src_indptr, src_edges, src_targets, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"],
            ahead, u, weT, edge_scale, alpha, delta, grad, q_out,
        )  # fmt: skip
        results.append(np.ascontiguousarray(q_out))
    assert not np.isnan(results[0]).any()
    assert results[0].tobytes() == results[1].tobytes()
    assert results[0].tobytes() == results[2].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dims", [1, 4, 9, 14])  # attributes in blocks of 8, then 4, then one at a time
def test_target_edge_pass_gives_the_same_bits_with_and_without_the_vector_terms(dtype, heads, channels, dims):
    """Contiguous outputs take ``target_edge_terms``; a strided ``p_out`` makes it step aside for the loops,
    and ``weT`` of another layout (contiguous channels, not C-contiguous) makes ``attribute_grads`` step aside
    for ``dot3`` per attribute."""
    from gatfast.kernels import gatv2_backward_target_edge_blocks

    n = 40
    indptr, indices, src_indptr, src_edges, src_targets = _graph(channels * 10 + heads, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(
        channels + 3, n, indices.size, heads, channels, dtype, True
    )
    rng = np.random.default_rng(channels + dims)
    u = rng.standard_normal((indices.size, dims)).astype(dtype)
    weT = rng.standard_normal((heads, dims, channels)).astype(dtype)
    targets = np.repeat(np.arange(n), np.diff(indptr))
    exact = np.flatnonzero(targets % 5 == 1)  # these edges get z = -0 + -0 (+ 0 w): exactly zero
    u[exact] = 0
    xr[targets[exact]] = -0.0
    xl[indices[exact]] = -0.0
    blocks = num_att_blocks(n, 16)
    results = []
    loose_weT = np.full((heads, dims + 1, channels), np.nan, dtype)[:, :dims]  # Numba types it layout "A"
    loose_weT[...] = weT
    plain_runs = (
        (lambda shape: np.full(shape, np.nan, dtype), weT),
        (lambda shape: _strided(shape, dtype), loose_weT),
    )
    for make, weights in plain_runs:
        upstream, delta = np.empty((indices.size, heads), dtype), np.empty((indices.size, heads), dtype)
        p_out = make((n, heads, channels))
        att_part = np.full((blocks, heads, channels), np.nan, dtype)
        bias_part = make((blocks, heads, channels))
        we_part = np.full((blocks, heads, dims, channels), np.nan, dtype)
        grad_u = np.full((indices.size, dims), np.nan, dtype)
        records = np.full(
            (indices.size, record_bytes(heads, channels, np.dtype(dtype).itemsize)), 0xA5, np.uint8
        )
        gatv2_backward_target_edge_blocks(
            0, blocks, indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], PREFETCH_DISTANCE, u,
            weights, edge_scale, alpha, grad, upstream, delta, p_out, att_part, we_part, grad_u, records.view(dtype), records, bias_part,
        )  # fmt: skip
        results.append(
            [
                np.ascontiguousarray(a)
                for a in (upstream, delta, p_out, att_part, we_part, grad_u, bias_part, records)
            ]
        )
    assert results[0][-2].tobytes() == _block_sums(grad, blocks).tobytes()
    names = ("upstream", "delta", "p_out", "att_part", "we_part", "grad_u", "bias_part", "records")
    for name, fast, plain in zip(names, *results):
        assert not np.isnan(fast).any(), name
        assert fast.tobytes() == plain.tobytes(), name
    # the records hold z > 0 of edge.edge_z's z, formed here in NumPy with the same operations in order
    z = xr[targets] + xl[indices]
    for d in range(dims):
        z = z + weT[None, :, d, :] * u[:, d, None, None]
    assert exact.size and not (z[exact] > 0).any()  # z exactly 0 is the slope side
    want = records_of(z, alpha, edge_scale, results[0][1])
    itemsize = np.dtype(dtype).itemsize
    assert (
        written_part(results[0][-1], heads, channels, itemsize).tobytes()
        == written_part(want, heads, channels, itemsize).tobytes()
    )
    # without records (None): a specialisation of its own, the other outputs the same bits
    upstream, delta = np.empty((indices.size, heads), dtype), np.empty((indices.size, heads), dtype)
    outputs = [np.empty((n, heads, channels), dtype), np.empty((blocks, heads, channels), dtype),
               np.empty((blocks, heads, dims, channels), dtype), np.empty((indices.size, dims), dtype)]  # fmt: skip
    gatv2_backward_target_edge_blocks(
        0, blocks, indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], WINDOW, u, weT,
        edge_scale, alpha, grad, upstream, delta, *outputs, None, None, np.empty((0, heads, channels), dtype),
    )  # fmt: skip
    for name, value, fast in zip(names, (upstream, delta, *outputs), results[0]):
        assert value.tobytes() == fast.tobytes(), name
    # the source pass reading the kernel's records gives the bits of the one forming z
    from gatfast.kernels import gatv2_backward_source_edge_rows

    slope, leaky = dtype(0.2), ACTIVATIONS["leaky_relu"]
    formed, read = np.empty((n, heads, channels), dtype), np.empty((n, heads, channels), dtype)
    gatv2_backward_source_edge_rows(
        0, n, src_indptr, src_edges, src_targets, xl, xr, att, slope, leaky, 16, u, weT, edge_scale, alpha, delta,
        grad, formed,
    )  # fmt: skip
    records = results[0][-1]
    gatv2_backward_source_record_rows(
        0, n, src_indptr, src_edges, src_targets, att, slope, 16, records.view(dtype), records, grad, read
    )
    assert read.tobytes() == formed.tobytes()


def test_the_target_passes_refuse_records_they_would_not_write_whole():
    from gatfast.kernels import gatv2_backward_target_blocks, gatv2_backward_target_edge_blocks

    n, heads, channels, dims, dtype = 12, 2, 9, 3, np.float32
    indptr, indices, *_ = _graph(5, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(6, n, indices.size, heads, channels, dtype, False)
    u = np.ones((indices.size, dims), dtype)
    weT = np.ones((heads, dims, channels), dtype)
    blocks = num_att_blocks(n, 16)
    common = (np.empty((indices.size, heads), dtype), np.empty((indices.size, heads), dtype),
              np.empty((n, heads, channels), dtype), np.empty((blocks, heads, channels), dtype))  # fmt: skip

    def run(kind, records, edge):
        head = (0, blocks, indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS[kind], PREFETCH_DISTANCE)
        if edge:
            gatv2_backward_target_edge_blocks(
                *head, u, weT, edge_scale, alpha, grad, *common, np.empty((blocks, heads, dims, channels), dtype),
                np.empty((indices.size, dims), dtype), records.view(dtype), records,
                np.empty((0, heads, channels), dtype),
            )  # fmt: skip
        else:
            gatv2_backward_target_blocks(
                *head,
                edge_scale,
                alpha,
                grad,
                *common,
                np.empty((0, heads, channels), dtype),
                records.view(dtype),
                records,
                NO_CUTS,
                np.empty((n, heads, channels), dtype),
            )

    width = record_bytes(heads, channels, 4)  # 2 heads x (2 floats + 2 bytes of signs): 20 bytes
    assert width == 20
    for edge in (False, True):
        with pytest.raises(ValueError, match="records"):
            run("leaky_relu", np.empty((indices.size, width - 4), np.uint8), edge)
        with pytest.raises(ValueError, match="records"):
            run("leaky_relu", np.empty((indices.size - 1, width), np.uint8), edge)
        with pytest.raises(ValueError, match="LeakyReLU"):
            run("softplus", np.empty((indices.size, width), np.uint8), edge)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dims", [1, 4, 9, 14])  # attributes in blocks of 8, then 4, then one at a time
def test_source_pass_reading_the_records_gives_the_bits_of_forming_z(dtype, heads, channels, dims):
    """``gatv2_backward_source_record_rows`` against the edge source pass that forms ``z`` (both prefetch)."""
    from gatfast.kernels import gatv2_backward_source_edge_rows

    n = 40
    indptr, indices, src_indptr, src_edges, src_targets = _graph(channels * 10 + heads + dims, n)
    dropout = dims == 4
    xl, xr, grad, att, alpha, edge_scale = _inputs(
        channels + 5, n, indices.size, heads, channels, dtype, dropout
    )
    rng = np.random.default_rng(channels + dims + 1)
    delta = rng.standard_normal((indices.size, heads)).astype(dtype)
    u = rng.standard_normal((indices.size, dims)).astype(dtype)
    weT = rng.standard_normal((heads, dims, channels)).astype(dtype)
    targets = np.repeat(np.arange(n), np.diff(indptr))
    u[0] = 0
    xr[targets[0]] = -xl[indices[0]]  # edge 0: z exactly 0, the slope side
    z = np.empty((indices.size, heads, channels), dtype)
    zb = np.empty((1, heads, channels), dtype)
    for e in range(indices.size):
        edge_z(zb, xr, targets[e], xl, indices[e], u, weT, e)
        z[e] = zb[0]
    assert (z[0] == 0).all()
    records = records_of(z, alpha, edge_scale, delta)
    slope, leaky = dtype(0.2), ACTIVATIONS["leaky_relu"]
    formed = np.full((n, heads, channels), np.nan, dtype)
    gatv2_backward_source_edge_rows(
        0, n, src_indptr, src_edges, src_targets, xl, xr, att, slope, leaky, 16, u, weT, edge_scale, alpha, delta,
        grad, formed,
    )  # fmt: skip
    for ahead, q_out in (
        (16, np.full((n, heads, channels), np.nan, dtype)),
        (None, _strided((n, heads, channels), dtype)),
    ):
        gatv2_backward_source_record_rows(
            0,
            n,
            src_indptr,
            src_edges,
            src_targets,
            att,
            slope,
            ahead,
            records.view(dtype),
            records,
            grad,
            q_out,
        )  # a strided q_out: every channel in the plain loop
        assert not np.isnan(q_out).any()
        assert np.ascontiguousarray(q_out).tobytes() == formed.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dims", [1, 4, 9, 14])  # attributes in blocks of 8, then 4, then one at a time
def test_forward_edge_scores_formed_in_registers_give_the_scratch_rows_bits(dtype, heads, channels, dims):
    """``simd.leaky_edge_score`` (contiguous rows) against ``edge_z`` + ``leaky_dot`` (strided ``xl``)."""
    from gatfast.kernels import gatv2_forward_edge_rows

    n = 40
    indptr, indices, *_ = _graph(channels * 10 + heads, n)
    xl, xr, _, att, _, edge_scale = _inputs(channels + 4, n, indices.size, heads, channels, dtype, dims == 4)
    rng = np.random.default_rng(channels + dims)
    u = rng.standard_normal((indices.size, dims)).astype(dtype)
    weT = rng.standard_normal((heads, dims, channels)).astype(dtype)
    strided_xl = _strided(xl.shape, dtype)
    strided_xl[...] = xl
    results = []
    for source_rows in (xl, strided_xl):
        alpha = np.full((indices.size, heads), np.nan, dtype)
        out = np.full((n, heads, channels), np.nan, dtype)
        gatv2_forward_edge_rows(
            0, n, indptr, indices, source_rows, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], WINDOW, u, weT,
            edge_scale, np.zeros(0, dtype), False, alpha, out,
        )  # fmt: skip
        results.append((alpha, out))
    (alpha, out), (alpha_s, out_s) = results
    assert not np.isnan(alpha).any() and not np.isnan(out).any()
    assert alpha.tobytes() == alpha_s.tobytes()
    np.testing.assert_array_equal(out, out_s)  # the aggregation reads xl in two layouts: same values


def test_target_edge_pass_refuses_edge_arrays_of_other_shapes():
    """``grad_u`` and ``weT`` are read and written without bounds checks: their shapes are checked first."""
    from gatfast.kernels import gatv2_backward_target_edge_blocks

    n, heads, channels, dims, dtype = 12, 1, 8, 3, np.float64
    indptr, indices, *_ = _graph(1, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(2, n, indices.size, heads, channels, dtype, False)
    u = np.ones((indices.size, dims), dtype)

    def run(weT, grad_u):
        gatv2_backward_target_edge_blocks(
            0, 1, indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], WINDOW, u, weT,
            edge_scale, alpha, grad, np.empty((indices.size, heads)), np.empty((indices.size, heads)),
            np.empty((n, heads, channels)), np.empty((1, heads, channels)), np.empty((1, heads, dims, channels)),
            grad_u, None, None, np.empty((0, heads, channels)),
        )  # fmt: skip

    good_weT, good_grad_u = np.ones((heads, dims, channels)), np.empty((indices.size, dims))
    run(good_weT, good_grad_u)
    run(good_weT, good_grad_u[:0])  # no attribute gradient asked for
    for weT in (
        np.ones((heads, dims + 1, channels)),
        np.ones((heads, dims, channels - 1)),
        np.ones((2, dims, channels)),
    ):
        with pytest.raises(ValueError, match="weT must have shape"):
            run(weT, good_grad_u)
    for grad_u in (np.empty((indices.size, dims + 1)), np.empty((indices.size - 1, dims))):
        with pytest.raises(ValueError, match="grad_u must have one row per edge"):
            run(good_weT, grad_u)
    with pytest.raises(ValueError, match="weT must have contiguous channels"):
        run(np.ones((heads, dims, 2 * channels))[:, :, ::2], good_grad_u)


def test_forward_and_source_edge_kernels_refuse_edge_arrays_of_other_shapes():
    from gatfast.kernels import gatv2_backward_source_edge_rows, gatv2_forward_edge_rows

    n, heads, channels, dims, dtype = 12, 1, 8, 3, np.float64
    indptr, indices, src_indptr, src_edges, src_targets = _graph(4, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(5, n, indices.size, heads, channels, dtype, False)
    leaky = ACTIVATIONS["leaky_relu"]

    def forward(u, weT):
        out = np.empty((n, heads, channels))
        gatv2_forward_edge_rows(
            0, n, indptr, indices, xl, xr, att, dtype(0.2), leaky, PREFETCH_DISTANCE, u, weT, edge_scale,
            np.zeros(0), False, alpha.copy(), out,
        )  # fmt: skip

    def source(u, weT):
        q = np.empty((n, heads, channels))
        gatv2_backward_source_edge_rows(
            0, n, src_indptr, src_edges, src_targets, xl, xr, att, dtype(0.2), leaky, None, u, weT,
            edge_scale, alpha, alpha, grad, q,
        )  # fmt: skip

    u, weT = np.ones((indices.size, dims)), np.ones((heads, dims, channels))
    for run in (forward, source):
        run(u, weT)
        for bad_u, bad_weT in (
            (u[:-1], weT),
            (u, np.ones((heads, dims + 1, channels))),
            (u, np.ones((heads, dims, channels + 1))),
            (u, np.ones((heads + 1, dims, channels))),
        ):
            with pytest.raises(ValueError, match="u must have one row per edge and weT shape"):
                run(bad_u, bad_weT)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["leaky_relu", "softplus"])
@pytest.mark.parametrize(("heads", "channels", "dims"), [(1, 64, 8), (3, 17, 5), (2, 1, 1), (1, 33, 9)])
def test_target_edge_pass_sums_the_attribute_weight_gradient_over_buffers_of_edges(
    dtype, kind, heads, channels, dims
):
    """``∂L/∂W_E``'s block partials, ``Σ q_ij ⊗ u_ij``, added per buffer of ``Q_EDGES`` edges: blocks of
    none, fewer than one buffer, exactly one and several buffers and a remainder, against float64 NumPy
    from the pass's own ``δ``."""
    from gatfast.kernels import gatv2_backward_target_edge_blocks
    from gatfast.kernels.activations import act_slope
    from gatfast.kernels.backward_edge import Q_EDGES

    degree = np.array([0, 0, 5, Q_EDGES - 5, Q_EDGES, 0, 2 * Q_EDGES + 7, 3, 0, 1, 150, 40])
    n = degree.size
    blocks = n // 2  # two rows a block: 0, 64, 64, 138, 1 and 190 edges
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    rng = np.random.default_rng(channels + dims + heads)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int64)
    xl, xr, grad, att, alpha, edge_scale = _inputs(dims, n, indices.size, heads, channels, dtype, False)
    u = rng.standard_normal((indices.size, dims)).astype(dtype)
    weT = rng.standard_normal((heads, dims, channels)).astype(dtype)
    slope, code = dtype(0.2), ACTIVATIONS[kind]
    upstream, delta = np.empty((indices.size, heads), dtype), np.empty((indices.size, heads), dtype)
    we_part = np.full((blocks, heads, dims, channels), np.nan, dtype)
    gatv2_backward_target_edge_blocks(
        0, blocks, indptr, indices, xl, xr, att, slope, code, PREFETCH_DISTANCE, u, weT, edge_scale, alpha, grad,
        upstream, delta,
        np.empty((n, heads, channels), dtype), np.empty((blocks, heads, channels), dtype), we_part,
        np.empty((0, dims), dtype), None, None, np.empty((0, heads, channels), dtype),
    )  # fmt: skip
    targets = np.repeat(np.arange(n), degree)
    z = xr[targets] + xl[indices]
    for d in range(dims):
        z = z + weT[None, :, d, :] * u[:, d, None, None]
    s = np.vectorize(lambda v: float(act_slope(v, code, slope)))(z.astype(np.float64))
    q = delta[:, :, None].astype(np.float64) * att[None].astype(np.float64) * s
    scale = np.zeros((blocks, heads, dims, channels))
    for b in range(blocks):
        edges = slice(indptr[2 * b], indptr[2 * b + 2])
        want = np.einsum("ehc,ed->hdc", q[edges], u[edges].astype(np.float64))
        scale[b] = np.einsum("ehc,ed->hdc", np.abs(q[edges]), np.abs(u[edges].astype(np.float64)))
        tol = (1e-5 if dtype == np.float32 else 1e-13) * (scale[b] + 1e-30)
        assert np.all(np.abs(we_part[b] - want) <= tol), b
    assert not we_part[0].any() and all(scale[b].any() for b in range(1, blocks))  # the empty block is zero


def test_target_edge_pass_gives_one_set_of_bits_for_any_split_of_its_blocks_when_q_overflows():
    """Blocks called one at a time or together give the same bits, with an infinite ``q_ij`` in the
    graph: the padding of a block's last group of edges does not read an earlier group's ``q``."""
    from gatfast.kernels import gatv2_backward_target_edge_blocks

    dtype, heads, channels, dims = np.float32, 1, 8, 2
    degree = np.array([3, 0, 1, 0, 70, 2])  # the first block's q overflow; the later ones are finite
    n, blocks = degree.size, 3
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    rng = np.random.default_rng(5)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int64)
    xl, xr = (rng.standard_normal((n, heads, channels)).astype(dtype) for _ in range(2))
    grad = rng.standard_normal((n, heads, channels)).astype(dtype)
    grad[0] *= 1e8
    att = np.full((heads, channels), 1e33, dtype)
    alpha = rng.random((indices.size, heads)).astype(dtype)
    u = (np.abs(rng.standard_normal((indices.size, dims))) + 0.5).astype(dtype)
    weT = rng.standard_normal((heads, dims, channels)).astype(dtype)

    def run(ranges):
        delta, we_part = (
            np.empty((indices.size, heads), dtype),
            np.full((blocks, heads, dims, channels), 7, dtype),
        )
        for b0, b1 in ranges:
            gatv2_backward_target_edge_blocks(
                b0, b1, indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], WINDOW, u, weT,
                np.zeros((0, heads), dtype), alpha, grad, np.empty((indices.size, heads), dtype), delta,
                np.empty((n, heads, channels), dtype), np.empty((blocks, heads, channels), dtype), we_part,
                np.empty((0, dims), dtype), None, None, np.empty((0, heads, channels), dtype),
            )  # fmt: skip
        return we_part

    together, apart = run([(0, blocks)]), run([(b, b + 1) for b in range(blocks)])
    assert together.tobytes() == apart.tobytes()
    assert not np.isfinite(together[0]).all() and np.isfinite(together[1:]).all()
