"""``kernels/records.py``: the target pass's source records, and the source pass that reads them, give the
bits of the passes that form ``z`` again (the edge-feature kernels: ``test_edge_sums.py``)."""

import numpy as np
import pytest
from naive import records_of, written_part
from test_edge_sums import CASES, _graph, _inputs, _strided

from gatfast.kernels import (
    gatv2_backward_source_record_rows,
    gatv2_backward_source_rows,
    gatv2_backward_target_blocks,
    num_att_blocks,
    record_bytes,
)
from gatfast.kernels.activations import ACTIVATIONS
from gatfast.kernels.prefetch import PREFETCH_DISTANCE
from gatfast.layers.passes import NO_CUTS

LEAKY = ACTIVATIONS["leaky_relu"]


@pytest.mark.parametrize(
    ("heads", "channels", "itemsize", "size"),
    [
        (1, 64, 4, 16),
        (1, 64, 8, 24),
        (1, 1, 4, 12),
        (3, 17, 4, 24 + 12),
        (8, 8, 4, 64 + 8),
        (2, 9, 8, 32 + 8),
    ],
)
def test_record_bytes(heads, channels, itemsize, size):
    """Two floats a head, then ceil(C / 8) bytes of signs a head, padded to whole floats."""
    assert record_bytes(heads, channels, itemsize) == size


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), CASES)
@pytest.mark.parametrize("dropout", [False, True])
def test_target_pass_records_and_the_source_pass_reading_them(dtype, heads, channels, dropout):
    """The target pass with records gives the plain pass's outputs and the NumPy records (the signs of ``z =
    xr + xl``, exactly +0 on one edge: the slope side), with the vector sums and
    in the plain loops (strided outputs); the source pass reading them gives the bits of the one forming z."""
    n = 40
    indptr, indices, src_indptr, src_edges, src_targets = _graph(channels * 10 + heads + 1, n)
    xl, xr, grad, att, alpha, edge_scale = _inputs(
        channels + 7, n, indices.size, heads, channels, dtype, dropout
    )
    targets = np.repeat(np.arange(n), np.diff(indptr))
    xr[targets[0]] = -xl[indices[0]]  # edge 0: z exactly +0 in every channel, the slope side
    blocks = num_att_blocks(n, 16)
    itemsize = np.dtype(dtype).itemsize
    width = record_bytes(heads, channels, itemsize)
    head = (indptr, indices, xl, xr, att, dtype(0.2), LEAKY, PREFETCH_DISTANCE, edge_scale, alpha, grad)
    q_out = np.empty((n, heads, channels), dtype)  # not written without cuts
    results = []
    for make in (lambda shape: np.full(shape, np.nan, dtype), lambda shape: _strided(shape, dtype)):
        outputs = [make((indices.size, heads)), np.empty((indices.size, heads), dtype), make((n, heads, channels)),
                   make((blocks, heads, channels)), make((blocks, heads, channels))]  # fmt: skip
        records = np.full((indices.size, width), 0xA5, np.uint8)  # the padding is never written
        gatv2_backward_target_blocks(0, blocks, *head, *outputs, records.view(dtype), records, NO_CUTS, q_out)
        results.append([np.ascontiguousarray(a) for a in outputs] + [records])
    plain = [np.empty((indices.size, heads), dtype), np.empty((indices.size, heads), dtype),
             np.empty((n, heads, channels), dtype), np.empty((blocks, heads, channels), dtype),
             np.empty((blocks, heads, channels), dtype)]  # fmt: skip
    gatv2_backward_target_blocks(0, blocks, *head, *plain, None, None, NO_CUTS, q_out)
    names = ("upstream", "delta", "p_out", "att_part", "bias_part")
    for name, fast, loops, want in zip(names, *results, plain):
        assert not np.isnan(fast).any(), name
        assert fast.tobytes() == want.tobytes() == loops.tobytes(), name
    z = xr[targets] + xl[indices]
    assert (z == 0).any() and (z > 0).any() and (z < 0).any()
    want = written_part(records_of(z, alpha, edge_scale, plain[1]), heads, channels, itemsize)
    for records in (results[0][-1], results[1][-1]):
        assert written_part(records, heads, channels, itemsize).tobytes() == want.tobytes()
        assert (records[:, want.shape[1] :] == 0xA5).all()

    formed = np.empty((n, heads, channels), dtype)
    gatv2_backward_source_rows(0, n, src_indptr, src_edges, src_targets, xl, xr, att, dtype(0.2), LEAKY, 16,
                               edge_scale, alpha, plain[1], grad, formed)  # fmt: skip
    records = results[0][-1]
    for ahead, q_out in ((16, np.full((n, heads, channels), np.nan, dtype)),
                         (None, _strided((n, heads, channels), dtype))):  # fmt: skip
        gatv2_backward_source_record_rows(0, n, src_indptr, src_edges, src_targets, att, dtype(0.2), ahead,
                                          records.view(dtype), records, grad, q_out)  # fmt: skip
        assert not np.isnan(q_out).any()
        assert np.ascontiguousarray(q_out).tobytes() == formed.tobytes()


def test_the_source_pass_refuses_records_of_another_shape():
    n, heads, channels, dtype = 12, 2, 9, np.float32
    _, indices, src_indptr, src_edges, src_targets = _graph(3, n)
    _, _, grad, att, *_ = _inputs(4, n, indices.size, heads, channels, dtype, False)
    width = record_bytes(heads, channels, 4)

    def run(records, grad=grad, targets=src_targets):
        gatv2_backward_source_record_rows(
            0,
            n,
            src_indptr,
            src_edges,
            targets,
            att,
            dtype(0.2),
            16,
            records.view(dtype),
            records,
            grad,
            np.empty((n, heads, channels), dtype),
        )

    run(np.zeros((indices.size, width), np.uint8))
    with pytest.raises(ValueError, match="records"):
        run(np.zeros((indices.size, width - 4), np.uint8))
    with pytest.raises(ValueError, match="records"):
        run(np.zeros((indices.size + 1, width), np.uint8))
    with pytest.raises(ValueError, match="records"):  # a float view of another buffer's width
        records = np.zeros((indices.size, width), np.uint8)
        gatv2_backward_source_record_rows(0, n, src_indptr, src_edges, src_targets, att, dtype(0.2), 16,
                                          np.zeros((indices.size, width // 4 + 1), dtype), records, grad,
                                          np.empty((n, heads, channels), dtype))  # fmt: skip
    with pytest.raises(ValueError, match="layer's floats"):  # float64 records for float32 data
        records = np.zeros((indices.size, 40), np.uint8)
        gatv2_backward_source_record_rows(0, n, src_indptr, src_edges, src_targets, att, dtype(0.2), 16,
                                          records.view(np.float64), records, grad,
                                          np.empty((n, heads, channels), dtype))  # fmt: skip
    with pytest.raises(ValueError, match="q_out"):
        gatv2_backward_source_record_rows(0, n, src_indptr, src_edges, src_targets, att, dtype(0.2), 16,
                                          np.zeros((indices.size, width), np.uint8).view(dtype),
                                          np.zeros((indices.size, width), np.uint8), grad,
                                          np.empty((n, heads + 1, channels), dtype))  # fmt: skip
    with pytest.raises(ValueError, match="grad"):
        run(np.zeros((indices.size, width), np.uint8), grad=np.zeros((n, heads, channels + 1), dtype))
    with pytest.raises(ValueError, match="src_targets"):
        run(np.zeros((indices.size, width), np.uint8), targets=src_targets[:-1])
