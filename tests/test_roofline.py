"""bench/roofline.py and bench/rooflib/: the byte/flop model on a hand-made graph, the bound arithmetic, and a tiny end-to-end run.

No timing assertions: the end-to-end run only checks that the outputs
exist, are well formed and hold positive, finite bounds.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import roofline  # noqa: E402
from rooflib import cpu, machine, measure, model, probes  # noqa: E402
from rooflib import kernels as K  # noqa: E402
from rooflib.rates import Rates  # noqa: E402

import gatfast  # noqa: E402


@pytest.fixture
def dims():
    """3 nodes, rows by target: 0 <- {1, 0}, 1 <- {0, 2, 1}, 2 <- {2}: 6 edges; 2 heads x 4 channels, 5 features."""
    src = np.array([1, 0, 0, 2, 1, 2])
    dst = np.array([0, 0, 1, 1, 1, 2])
    g = gatfast.CSRGraph.from_edge_index(np.stack([src, dst]), 3)
    x = np.zeros((3, 5), np.float32)
    return model.Dims.from_graph(g, x, heads=2, channels=4)


def test_dims_from_graph(dims):
    assert (dims.n, dims.nnz, dims.heads, dims.channels, dims.in_features) == (3, 6, 2, 4, 5)
    assert (dims.f, dims.i, dims.hc) == (4, 8, 8)
    assert dims.pairs == 1 + 3 + 0  # in-degrees 2, 3, 1
    assert not dims.x_sparse


def test_forward_model_by_hand(dims):
    m = K.k_forward(dims).model
    # indptr 4 x 8 B, indices 6 x 8 B, xr 3 rows x 8 floats, att 8 floats
    assert m.reads == {"indptr": 32, "indices": 48, "xr": 96, "att": 32}
    assert m.writes == {"alpha": 6 * 2 * 4, "out": 96}
    assert m.gathers == [model.Gather("xl", 6, 32, 96)]
    # 6 flops per edge-channel (48 of them), 4 per edge-head (12), 1 per node-head (6), and 3 per output
    # value (24 of them: the bias add and the finiteness mark, done as each row is written)
    assert m.flops == 6 * 48 + 4 * 12 + 6 + 3 * 24
    assert not m.blas


def test_backward_models_by_hand(dims):
    # one small graph: its target pass also sums Q_j (passes.source_sums_cuts), 5 flops per edge-channel
    assert dims.source_sums
    fused = K.k_target(dims).model
    assert fused.writes["q_term"] == 96
    assert [k.name for k in K.kernels_for(dims)][:5] == ["check_x", "projections", "forward", "target",
                                                         "dense_backward"]
    dims.source_sums = False  # as on a big graph: a source pass of its own
    t = K.k_target(dims).model
    assert fused.flops == t.flops + 5 * 48 and "q_term" not in t.writes
    assert t.reads == {"indptr": 32, "indices": 48, "xr": 96, "grad": 96, "alpha": 48, "att": 32}
    # one block of rows; with the bias, the block sums of grad for its gradient (an add per value of grad)
    assert t.writes == {"upstream": 48, "delta": 48, "p_term": 96, "att_part": 1 * 32, "bias_part": 1 * 32}
    assert t.gathers == [model.Gather("xl", 6, 32, 96)]
    assert t.flops == 8 * 48 + 4 * 12 + 3 * 8 + 24
    assert [k.name for k in K.kernels_for(dims)][:5] == ["check_x", "projections", "forward", "target", "source"]
    dims.bias = False  # no block sums: grad_out is checked in a pass of its own
    assert "bias_part" not in K.k_target(dims).model.writes and K.k_target(dims).model.flops == t.flops - 24
    assert "check_grad" in [k.name for k in K.kernels_for(dims)]
    dims.bias = True
    dims.theta_r = "pairwise"
    tp = K.k_target(dims).model
    # 6 + 1 per edge-channel, 3 per pair-head (4 pairs x 2 heads), 3 per pair-channel (4 x 8), then as above
    assert tp.flops == 7 * 48 + 3 * 8 + 3 * 32 + 4 * 12 + 24 + 24
    s = K.k_source(dims).model
    assert s.reads == {"src_indptr": 32, "src_edges": 48, "src_targets": 48, "xl": 96, "att": 32}
    assert s.writes == {"q_term": 96}
    assert s.gathers == [model.Gather("xr", 6, 32, 96), model.Gather("grad", 6, 32, 96),
                         model.Gather("alpha", 6, 8, 48), model.Gather("delta", 6, 8, 48)]
    assert s.flops == 6 * 48
    dims.source_records = True  # big graphs: the target pass writes each edge's record (kernels/records.py)
    assert dims.record == 20  # 2 heads x (weight, δ) in float32, then 2 x 1 byte of signs, padded to a float
    for dims.edge_dim in (0, 3):
        assert K.k_target(dims).model.writes["records"] == 6 * 20
        s = K.k_source(dims).model
        assert s.reads == {"src_indptr": 32, "src_edges": 48, "src_targets": 48, "att": 32}  # neither xl nor W_E
        assert s.gathers == [model.Gather("grad", 6, 32, 96), model.Gather("records", 6, 20, 120)]
        assert s.flops == 5 * 48


def test_dense_and_sparse_products_by_hand(dims):
    p = K.k_projections(dims).model
    assert p.blas and p.reads == {"x": 3 * 5 * 4, "W": 2 * 8 * 5 * 4}
    assert p.writes == {"xl": 96, "xr": 96}
    assert p.flops == 2 * (2 * 3 * 5 * 8 + 3 * 8)
    b = K.k_dense_backward(dims).model
    assert b.writes == {"grad_x": 60, "gW": 2 * 160}
    assert b.flops == 8 * 3 * 8 * 5 + 2 * 3 * 8 + 3 * 5
    sparse = model.Dims(n=3, nnz=6, heads=2, channels=4, in_features=5, x_sparse=True, x_nnz=7, xi=4)
    names = [k.name for k in K.kernels_for(sparse)]
    assert names[-2:] == ["sparse_transpose", "sparse_weight_grads"]
    sp_proj = K.k_projections(sparse).model
    assert sp_proj.reads["x"] == 7 * 4 and sp_proj.reads["x_indices"] == 7 * 4
    assert sp_proj.gathers[0] == model.Gather("W_l_T", 7, 32, 5 * 8 * 4)
    assert sp_proj.flops == 2 * 2 * 7 * 8 + 2 * 3 * 8
    assert "dense_backward" in [k.name for k in K.kernels_for(dims)]


BIG = float(1 << 30)  # the probe table "far larger than the cache"


def _rates(cache_bytes=0.0, small_table=True):
    # gathers cost 1 / 4 ns per 64 / 256-byte row from a 1 KiB table and 10 / 40 ns from the big one
    gather = {BIG: {64: 1e-8, 256: 4e-8}}
    if small_table:
        gather[1024.0] = {64: 1e-9, 256: 4e-9}
    return Rates(read_bps=1e9, write_bps=0.5e9, gather=gather,
                          flops_numba=1e9, flops_blas=2e9, cache_bytes=cache_bytes, threads=1)


def test_row_cost_is_linear_in_cache_lines():
    r = _rates()
    assert r.memory_table == BIG
    assert r.row_seconds(4) == pytest.approx(1e-8)  # a 4-byte alpha still costs a line
    assert r.row_seconds(64) == pytest.approx(1e-8)
    assert r.row_seconds(128) == pytest.approx(2e-8)
    assert r.row_seconds(256) == pytest.approx(4e-8)
    assert r.row_seconds(512) == pytest.approx(8e-8)


def test_row_cost_uses_the_nearest_measured_table_size():
    r = _rates()
    assert r.row_seconds(64, 96) == pytest.approx(1e-9)  # nearest (log scale): the 1 KiB table
    assert r.row_seconds(256, 2000) == pytest.approx(4e-9)
    assert r.row_seconds(128, 1 << 29) == pytest.approx(2e-8)  # nearest: the big table


def test_bound_from_memory_and_ideal_cache(dims):
    m = K.k_forward(dims).model
    b = model.bound(m, _rates(cache_bytes=0.0))
    reads, writes = 32 + 48 + 96 + 32, 48 + 96
    assert b["gathered_tables"] == 96
    assert b["stream_s"] == pytest.approx(reads / 1e9 + writes / 0.5e9)
    # 6 rows of 32 bytes (one line each) at the rate measured for the table nearest 96 bytes
    assert b["gather_s"] == pytest.approx(6 * 1e-9)
    assert b["compute_s"] == pytest.approx((342 + 72) / 1e9)  # 72: the output's bias add and check
    assert b["bound_s"] == pytest.approx(max(b["stream_s"] + b["gather_s"], b["compute_s"]))
    assert b["by"] == "stream"
    # no cache credit: every gather at the far-beyond-cache rate
    none = model.bound(m, _rates(cache_bytes=0.0, small_table=False), ideal_cache=True)
    assert none["resident_fraction"] == 0.0 and none["gather_s"] == pytest.approx(6 * 1e-8)
    # ... unless the rate measured at the pass's own table size is faster: never above the main bound
    assert model.bound(m, _rates(cache_bytes=0.0), ideal_cache=True)["gather_s"] == pytest.approx(6 * 1e-9)
    # an ideal cache of half the table: half the gathers are free after a compulsory read of half of it
    half = model.bound(m, _rates(cache_bytes=48.0, small_table=False), ideal_cache=True)
    assert half["resident_fraction"] == 0.5
    assert half["gather_rows"] == pytest.approx(3)
    assert half["gather_s"] == pytest.approx(3 * 1e-8)
    assert half["read_bytes"] == pytest.approx(reads + 48)
    # the whole step in cache: only compute
    inside = model.bound(m, _rates(cache_bytes=0.0), in_cache=True)
    assert inside["stream_s"] == inside["gather_s"] == 0.0
    assert inside["bound_s"] == pytest.approx((342 + 72) / 1e9) and inside["by"] == "compute"
    # BLAS products run at the FMA rate
    p = K.k_projections(dims).model
    assert model.bound(p, _rates(), in_cache=True)["compute_s"] == pytest.approx(p.flops / 2e9)


def test_gather_bound_source_pass_tables_share_the_cache(dims):
    m = K.k_source(dims).model
    tables = 96 + 96 + 48 + 48
    assert model.gathered_tables(m) == tables
    ideal = model.bound(m, _rates(cache_bytes=tables / 4, small_table=False), ideal_cache=True)
    assert ideal["resident_fraction"] == pytest.approx(0.25)
    assert ideal["gather_s"] == pytest.approx(0.75 * 6 * 4 * 1e-8)
    # measured mode: the four tables together (288 B) pick the rate; every row is one line
    b = model.bound(m, _rates())
    assert b["gather_s"] == pytest.approx(6 * 4 * 1e-9)
    assert b["by"] in ("stream", "gather")


def test_step_footprint_counts_each_array_once(dims):
    ks = K.kernels_for(dims)
    fp = model.step_footprint(ks)
    # xl is written by the projections, gathered by the forward and the target pass, read by the source pass
    arrays = {}
    for k in ks:
        arrays.update({name: max(arrays.get(name, 0), b) for name, b in k.model.arrays().items()})
    assert fp == sum(arrays.values())
    assert arrays["xl"] == 96 and arrays["alpha"] == 48


def test_rates_from_records():
    big = 1 << 28
    recs = [
        {"probe": "stream read", "threads": 2, "gbps": 10.0},
        {"probe": "stream scale", "threads": 2, "gbps": 8.0},
        {"probe": "gather", "threads": 2, "row_bytes": 64, "prefetch": False, "rows_per_s": 50e6, "table_request": big},
        {"probe": "gather", "threads": 2, "row_bytes": 64, "prefetch": True, "rows_per_s": 100e6, "table_request": big},
        {"probe": "gather", "threads": 2, "row_bytes": 256, "prefetch": True, "rows_per_s": 40e6, "table_request": big},
        {"probe": "gather", "threads": 2, "row_bytes": 256, "prefetch": False, "rows_per_s": 20e6, "table_request": big},
        {"probe": "gather", "threads": 1, "row_bytes": 256, "prefetch": False, "rows_per_s": 99e6, "table_request": big},
        {"probe": "gather", "threads": 2, "row_bytes": 64, "prefetch": True, "rows_per_s": 300e6, "table_request": 1000},
        {"probe": "gather", "threads": 2, "row_bytes": 256, "prefetch": True, "rows_per_s": 200e6, "table_request": 1000},
        {"probe": "fma", "threads": 1, "gflops": 100.0},
        {"probe": "mul+add", "threads": 1, "gflops": 60.0},
    ]
    r = Rates.from_records(recs, 2, 1 << 20)
    assert r.read_bps == pytest.approx(10e9)
    # scale: 2 bytes per element pair at 8 GB/s, of which the read costs 1 / 10 GB/s
    assert 1 / r.write_bps == pytest.approx(2 / 8e9 - 1 / 10e9)
    # best of with and without prefetch, less the probe's 8-byte index read
    assert r.memory_table == big
    assert r.row_seconds(64) == pytest.approx(1 / 100e6 - 8 / 10e9)
    assert r.row_seconds(256) == pytest.approx(1 / 40e6 - 8 / 10e9)  # the 1-thread record is not used
    # at most half of a row's time is taken off for the index stream
    assert r.row_seconds(64, 1000) == pytest.approx(max(1 / 300e6 - 8 / 10e9, 0.5 / 300e6))
    assert r.flops_blas == pytest.approx(200e9) and r.flops_numba == pytest.approx(120e9)


def test_size_parsing():
    assert cpu.parse_size("32768K") == 32 << 20
    assert cpu.parse_size(" 32 MiB ") == 32 << 20
    assert cpu.parse_size("1M") == 1 << 20
    assert cpu.parse_size("junk") == 0


def test_rejects_unknown_and_training_workloads(tmp_path):
    for bad in ("nope", "cora-train"):
        with pytest.raises(SystemExit):
            roofline.main(["--size", "tiny", "--workloads", bad, "--out", str(tmp_path)])
    assert not (tmp_path / "roofline.json").exists()


def test_tiny_end_to_end(tmp_path):
    assert roofline.main(["--size", "tiny", "--reps", "1", "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "roofline.json").read_text())
    md = (tmp_path / "roofline.md").read_text()
    meta = raw["meta"]
    assert meta["size"] == "tiny" and meta["threads"] >= 1 and meta["cpu"]["simd_bits"] in (128, 256, 512)
    assert {r["workload"] for r in raw["results"]} == set(roofline.DEFAULT_WORKLOADS)
    probes = {r["probe"] for r in raw["machine"]}
    assert {"stream read", "stream scale", "stream triad", "gather", "fma", "mul+add"} <= probes
    assert {(r["row_bytes"], r["prefetch"]) for r in raw["machine"] if r["probe"] == "gather"} == {
        (64, False), (64, True), (256, False), (256, True)}
    for r in raw["machine"]:
        rate = r.get("gbps", r.get("gflops"))
        assert math.isfinite(rate) and rate > 0
    for res in raw["results"]:
        names = [k["kernel"] for k in res["kernels"]]
        assert {"forward", "target"} <= set(names)
        # batches of small graphs: the target pass does the source pass (gatfast.layers.passes.source_sums_cuts)
        assert ("source" in names) == (res["workload"] != "small-batch")
        assert ("sparse_weight_grads" in names) == (res["workload"] == "cora")
        for k in res["kernels"]:
            assert math.isfinite(k["bound_s"]) and k["bound_s"] >= 0
            assert k["measured"]["median"] > 0
            if k["edge"]:
                assert k["bound_s"] > 0 and k["ratio"] > 0
        assert math.isfinite(res["step"]["bound_s"]) and res["step"]["bound_s"] > 0
        assert res["step"]["measured"]["median"] > 0
        assert isinstance(res["goals"]["edge_met"], bool)
    assert isinstance(next(r for r in raw["results"] if r["workload"] == "large")["goals"]["step_met"], bool)
    # every table states the machine and the command
    for heading in ("## Machine", "## large", "## cora", "## Goals"):
        block = md.split(heading, 1)[1]
        assert meta["cpu"]["model"] in block.split("\n\n")[1]
        assert "bench/roofline.py" in block.split("\n\n")[1]
    assert "| **whole fwd+bwd step** |" in md
    assert md.splitlines()[0].endswith("smoke run (tiny sizes): not the published results")
    by_name = {res["workload"]: res for res in raw["results"]}
    for name in ("large-edge", "small-batch-edge"):
        assert by_name[name]["dims"]["edge_dim"] > 0
        assert "edge_weight_grad" in [k["kernel"] for k in by_name[name]["kernels"]]
    assert by_name["large-bipartite"]["dims"]["bipartite"] is True
    assert raw["meta"]["omp_wait_policy"]


def test_workload_probes_imitate_each_pass_and_give_its_ceiling(dims):
    m = machine.Machine(1, "tiny", 1, 1 << 20)
    fwd, src = K.k_forward(dims).model, K.k_source(dims).model
    assert [tpl["probe"] for tpl, _ in m.workload_probes([fwd, src], in_cache=True)] == ["fma", "mul+add"]
    # the target pass gathers like the forward kernel: one probe for both
    probes = m.workload_probes([fwd, K.k_target(dims).model, src], in_cache=False)
    kinds = [(tpl["probe"], tpl.get("key")) for tpl, _ in probes]
    assert kinds == [("stream read", None), ("stream scale", None), ("pass gathers", "32B@96"),
                     ("pass gathers", "32B@96;32B@96;8B@48;8B@48"), ("fma", None), ("mul+add", None)]
    tables, _, _ = m._arrays[("pass", "32B@96;32B@96;8B@48;8B@48")]
    assert [t.shape for t in tables] == [(3, 8), (3, 8), (6, 2), (6, 2)]  # shaped like xr, grad, alpha, delta
    records = [measure.record(tpl, measure.samples(fn, 2, warmup=1)) for tpl, fn in probes]
    rates = m.rates(records, median=True)
    assert set(rates.passes) == {"32B@96", "32B@96;32B@96;8B@48;8B@48"}
    assert all(v > 0 and math.isfinite(v) for v in rates.passes.values())
    assert rates.read_bps > 0 and rates.write_bps > 0 and rates.flops_blas > 0 and rates.flops_numba > 0
    b = model.bound(src, rates)
    assert b["gather_s"] == pytest.approx(6 * rates.passes["32B@96;32B@96;8B@48;8B@48"])  # 6 steps
    m.release_tables()
    assert not any(isinstance(k, tuple) and k[0] == "pass" for k in m._arrays)


def test_pass_gather_probe_reads_every_table():
    a = np.arange(30, dtype=np.float32).reshape(10, 3)
    b = np.arange(40, dtype=np.float32).reshape(40, 1)
    rng = np.random.default_rng(1)
    ia, ib = rng.integers(0, 10, 200), rng.integers(0, 40, 200)
    acc = np.zeros((probes.CHUNKS, 3), np.float32)
    probes.pass_gather((a, b), (ia, ib), acc)
    expect = a[ia].sum(axis=0)
    expect[0] += b[ib, 0].sum()
    np.testing.assert_allclose(acc.sum(axis=0), expect, rtol=1e-5)


def test_flop_probe_computes_its_chains():
    """The probe's vector code does what the flop count assumes: every chain, every lane, every step."""
    lanes, chains = probes.PROBE_LANES, probes.PROBE_CHAINS
    seed = np.full((chains + 2) * lanes, 0.5, np.float32)
    seed[:lanes] = 1.0  # a
    seed[lanes:2 * lanes] = 1e-3  # b
    steps = 100
    fused = probes.flops_probe(seed, steps, True)  # acc = acc * 1 + b on every chain
    assert fused == pytest.approx(chains * lanes * (0.5 + steps * 1e-3), rel=1e-5)
    mixed = probes.flops_probe(seed, steps, False)  # even chains acc * 1, odd chains acc + b
    assert mixed == pytest.approx(lanes * (chains // 2 * 0.5 + chains // 2 * (0.5 + steps * 1e-3)), rel=1e-5)


def test_stream_and_gather_probes_compute_what_they_time():
    a = np.arange(1000, dtype=np.float32)
    sums = np.zeros(probes.CHUNKS, np.uint64)
    probes.read_sum(a.view(np.uint64), sums)
    assert int(sums.sum(dtype=np.uint64)) == int(a.view(np.uint64).sum(dtype=np.uint64))
    b = np.zeros_like(a)
    probes.scale(a, b, np.float32(2.0), 7)
    np.testing.assert_array_equal(b, 2 * a)
    c = np.ones_like(a)
    probes.triad(c, a, b, np.float32(0.5), 7)
    np.testing.assert_array_equal(c, a + 0.5 * b)
    table = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)
    idx = np.random.default_rng(0).integers(0, 40, 500)
    acc = np.zeros((probes.CHUNKS, 16), np.float32)
    for prefetch in (False, True):
        probes.gather(table, idx, prefetch, acc)
        np.testing.assert_allclose(acc.sum(axis=0), table[idx].sum(axis=0), rtol=1e-5)


def test_edge_feature_model_by_hand(dims):
    """D = 3 edge features: the u stream and the 2 D flops of W_E u per edge and channel, the u gather of the source pass."""
    dims.edge_dim = 3
    dims.source_sums = False  # as Dims.from_graph sets it with edge features: the edge kernels have no Q_j sums
    f = K.k_forward(dims).model
    assert f.reads["u"] == 6 * 3 * 4 and f.reads["weT"] == 8 * 3 * 4
    assert f.flops == (6 + 6) * 48 + 4 * 12 + 6 + 3 * 24
    t = K.k_target(dims).model
    assert t.writes["grad_u"] == 6 * 3 * 4 and t.writes["we_part"] == 1 * 8 * 4 * 3
    # dot 2, z 1 + 2D, ∂a 3, q 2, ∂u 2D, ∂W_E 2D, P 2
    assert t.flops == (2 + 7 + 3 + 2 + 12 + 2) * 48 + 4 * 12 + 3 * 8 + 24  # 24: the bias block sums
    s = K.k_source(dims).model
    assert s.gathers[-1] == model.Gather("u", 6, 12, 6 * 12)
    assert s.flops == (6 + 6) * 48
    names = [k.name for k in K.kernels_for(dims)]
    assert "edge_weight_grad" in names and names[-1] == "dense_backward"
    c = K.k_check_x(dims).model
    assert c.reads["u"] == 6 * 3 * 4 and c.reads["W"] == 8 * (5 + 5 + 3) * 4


def test_bipartite_model_by_hand():
    """x_src (4 sources, 5 features) and x_dst (3 targets, 2 features): two products each way."""
    g = gatfast.CSRGraph([0, 2, 5, 6], [1, 0, 0, 3, 1, 2], num_src=4)
    d = model.Dims.from_graph(g, np.zeros((4, 5), np.float32), heads=2, channels=4,
                              x_dst=np.zeros((3, 2), np.float32))
    assert (d.n, d.ns, d.in_features, d.fd, d.bipartite) == (3, 4, 5, 2, True)
    p = K.k_projections(d).model
    assert p.reads == {"x": 4 * 5 * 4, "x_dst": 3 * 2 * 4, "W": 8 * 7 * 4}
    assert p.writes == {"xl": 4 * 32, "xr": 3 * 32}
    assert p.flops == 2 * 4 * 5 * 8 + 4 * 8 + 2 * 3 * 2 * 8 + 3 * 8
    b = K.k_dense_backward(d).model
    assert b.writes == {"grad_x": 80, "grad_x_dst": 24, "gW": 8 * 7 * 4}
    assert b.flops == 4 * 4 * 8 * 5 + 4 * 3 * 8 * 2 + 4 * 8 + 3 * 8
    assert K.k_forward(d).model.gathers == [model.Gather("xl", 6, 32, 4 * 32)]
    assert K.k_source(d).model.writes == {"q_term": 4 * 32}


def test_step_bound_sums_the_kernel_bounds(dims):
    r = _rates()
    step = K.step_bound(dims, r, cache_bytes=0)
    assert not step["in_cache"] and step["footprint_bytes"] == model.step_footprint(K.kernels_for(dims))
    assert step["bound_s"] == pytest.approx(sum(step["kernels"].values()))
    assert step["kernels"]["forward"] == pytest.approx(model.bound(K.k_forward(dims).model, r)["bound_s"])
    inside = K.step_bound(dims, r, cache_bytes=1 << 30)
    assert inside["in_cache"] and inside["bound_s"] < step["bound_s"]


def test_quick_machine_probe_gives_rates():
    m = machine.Machine(2, "tiny", 1, 1 << 20).measure_quick(log=lambda msg: None)
    kinds = {(r["probe"], r.get("table_request")) for r in m.records}
    assert ("gather", 1 << 18) in kinds  # a table of a quarter of the cache beside the big one
    r = m.rates()
    assert r.read_bps > 0 and r.write_bps > 0 and len(r.gather) == 2 and r.flops_numba > 0
    assert not any(isinstance(k, tuple) for k in m._arrays)  # the probe arrays are freed


def test_default_output_is_untracked_and_results_need_the_flag(tmp_path):
    args = roofline.parse_args(["--size", "tiny"])
    assert args.out == Path(roofline.outdirs.REPO) / "runs" / "bench" / "roofline"
    for argv in (["--out", "bench/results"], ["--out", str(roofline.outdirs.RESULTS / "x")],
                 ["--update-results", "--size", "tiny"], ["--update-results", "--out", str(tmp_path)]):
        with pytest.raises(SystemExit):
            roofline.parse_args(argv)
    assert roofline.parse_args(["--update-results"]).out == roofline.outdirs.RESULTS
