"""The benchmark harness runs (tiny sizes, no timing assertions).

The pytest-benchmark suites in ``bench/`` are also collected by a plain
``pytest`` run at their tiny size; these tests cover the pieces around them:
the workload builders, the runners of the libraries, and ``compare.py`` and
``compile_time.py``'s reporting. DGL runs in an environment of its own: its
end-to-end checks run only where ``compare.py`` finds it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import compare  # noqa: E402
import compile_time  # noqa: E402
import workloads  # noqa: E402


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_tiny_workload_runs(name):
    w = workloads.make_workload(name, "tiny")
    g = w.graph
    # self loops are in the graph: one per node
    assert np.count_nonzero(g.indices == g.targets()) == g.num_nodes
    runner = workloads.GatfastRunner(w)
    out = runner.forward()
    assert out.shape[0] == w.num_nodes and np.all(np.isfinite(out))
    result = runner.forward_backward()
    if w.kind == "layer":
        assert set(result) >= {"W_l", "W_r", "att"}
        assert all(v is None or np.all(np.isfinite(v)) for v in result.values())
        before = runner.layer.params["att"].copy()
        runner.train_step()
        assert not np.array_equal(before, runner.layer.params["att"])  # Adam moved the parameters
    else:
        assert np.isfinite(result)


def test_workload_shapes_match_the_issue():
    # full sizes are only checked on the cheap ones (the large graph takes seconds to build)
    cora = workloads.make_workload("cora", "full")
    assert (cora.num_nodes, cora.graph.nnz, cora.x.shape[1], cora.out_dim) == (2708, 13264, 1433, 64)
    deg = workloads.make_workload("degree-16-linear", "full")
    assert deg.num_nodes == 2000 and np.all(deg.graph.in_degree() == 16)
    with pytest.raises(ValueError, match="name must be one of"):
        workloads.make_workload("nope")
    with pytest.raises(ValueError, match="size must be one of"):
        workloads.make_workload("cora", "huge")


def test_pyg_runner_matches_shapes():
    pytest.importorskip("torch_geometric")
    from reference import PygRunner

    for name in ("cora", "small-batch", "cora-train"):
        w = workloads.make_workload(name, "tiny")
        r = PygRunner(w)
        out = r.forward()
        assert tuple(out.shape) == (w.num_nodes, w.out_dim if w.kind == "layer" else w.extra["num_classes"])
        r.forward_backward()
        r.train_step()


def test_compare_end_to_end(tmp_path):
    names = "degree-4-linear,degree-16-linear,degree-4-pairwise,degree-16-pairwise"
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast", "--workloads", names,
                         "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "compare.json").read_text())
    assert {r["workload"] for r in raw["results"]} == set(names.split(","))
    assert all(r["forward_backward_median_ms"] > 0 for r in raw["results"])
    # the "pairwise minus linear" curve appears only where the pairwise run was the slower one
    assert {"gatfast linear", "gatfast pairwise"} <= set(raw["slopes"]) <= {
        "gatfast linear", "gatfast pairwise", "pairwise minus linear"}
    table = (tmp_path / "compare.md").read_text()
    assert "| degree-16-pairwise |" in table
    pytest.importorskip("matplotlib")
    assert (tmp_path / "degree_sweep.png").stat().st_size > 0


def _fake(lib, name, fwd, both, peak, **kw):
    return {"lib": lib, "workload": name, "nodes": 10, "edges": 20, "forward_median_ms": fwd,
            "forward_backward_median_ms": both, "peak_mb": peak, **kw}


META = {"date": "d", "cpu": "c", "threads": 2, "reps": 20, "allocator": "a", "size": "full", "load": "0.1"}


def test_compare_summary_ratios_and_targets():
    results = [
        _fake("gatfast", "large", 10.0, 100.0, 50.0), _fake("pyg", "large", 90.0, 900.0, 400.0),
        _fake("gatfast", "cora", 1.0, 2.0, 1.0), _fake("pyg", "cora", 4.0, 8.0, 2.0),
    ]
    for d, t in ((4, 1.0), (16, 4.0), (64, 16.0)):
        results.append(_fake("gatfast", f"degree-{d}-linear", t, t, 1.0))
        results.append(_fake("gatfast", f"degree-{d}-pairwise", t, t * t, 1.0))
    rows = {r["workload"]: r for r in compare.summarize(results, ["large", "cora"])}
    assert rows["large"]["speedup"] == pytest.approx(9.0)
    assert rows["large"]["memory_ratio"] == pytest.approx(0.125)
    assert rows["large"]["target_met"] is True  # 9x >= 8x and 0.125 <= 0.2
    assert rows["cora"]["speedup"] == pytest.approx(4.0)
    assert rows["cora"]["target_met"] is False  # 4x < 5x
    curves = compare.degree_curves(results)
    assert compare.fit_slope(*curves["gatfast linear"]) == pytest.approx(1.0)
    assert compare.fit_slope(*curves["gatfast pairwise"]) == pytest.approx(2.0)
    text = compare.markdown(list(rows.values()), curves, META)
    assert "| large |" in text and "**no**" in text
    assert "DGL" not in text  # no DGL results, no DGL columns (older runs render as they did)


def test_compare_summary_with_dgl():
    results = [
        _fake("gatfast", "large", 10.0, 100.0, 50.0), _fake("pyg", "large", 90.0, 900.0, 400.0),
        _fake("dgl", "large", 40.0, 300.0, 200.0, max_rel_err_vs_gatfast=2e-6),
        _fake("gatfast", "cora", 1.0, 2.0, 1.0), _fake("pyg", "cora", 4.0, 8.0, 2.0),  # no DGL run
    ]
    for d, t in ((4, 1.0), (16, 4.0), (64, 16.0)):
        results.append(_fake("gatfast", f"degree-{d}-linear", t, t, 1.0))
        results.append(_fake("gatfast", f"degree-{d}-pairwise", t, 2 * t, 1.0))
        results.append(_fake("dgl", f"degree-{d}-linear", t, 8 * t ** 1.5, 1.0))
    names = ["large", "cora", "degree-4-linear", "degree-4-pairwise"]
    rows = {r["workload"]: r for r in compare.summarize(results, names)}
    assert rows["large"]["speedup"] == pytest.approx(9.0)  # unsuffixed: against PyG (the issue's targets)
    assert rows["large"]["speedup_dgl"] == pytest.approx(3.0)
    assert rows["large"]["forward_speedup_dgl"] == pytest.approx(4.0)
    assert rows["large"]["memory_ratio_dgl"] == pytest.approx(0.25)
    assert "speedup_dgl" not in rows["cora"]
    # the pairwise form is compared with DGL's (only) linear run
    assert rows["degree-4-pairwise"]["speedup_dgl"] == pytest.approx(4.0)
    curves = compare.degree_curves(results)
    assert compare.fit_slope(*curves["DGL GATv2Conv"]) == pytest.approx(1.5)
    text = compare.markdown(list(rows.values()), curves, {**META, "dgl": "2.1.0"})
    header = next(line for line in text.splitlines() if line.startswith("| workload"))
    assert "| DGL fwd+bwd ms |" in header and "| speed-up vs DGL |" in header
    assert "| large | 10 | 20 | 10.00 | 90.00 | 40.00 | 100.00 | 900.00 | 300.00 | 9.00 | 3.00 |" in text
    assert "largest norm-wise relative difference 2.0e-06" in text
    cora = next(line for line in text.splitlines() if line.startswith("| cora |"))
    assert cora.count("|") == header.count("|") and "| — |" in cora
    assert "| DGL GATv2Conv | 1.50 |" in text


def test_compare_render_keeps_old_json_working(tmp_path):
    # a compare.json written before DGL was a peer: the table and JSON come out without DGL
    old = Path(compare.__file__).parent / "results" / "compare.json"
    assert compare.main(["--render", str(old), "--out", str(tmp_path)]) == 0
    table = (tmp_path / "compare.md").read_text()
    assert table.startswith("# gatfast vs PyG GATv2Conv\n") and "DGL" not in table
    raw = json.loads((tmp_path / "compare.json").read_text())
    assert raw["results"] == json.loads(old.read_text())["results"]
    assert all("speedup_dgl" not in row for row in raw["summary"])


def test_compare_skips_dgl_without_its_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GATFAST_DGL_ENV", str(tmp_path / "no-such-env"))
    assert compare.default_dgl_python() is None
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast,dgl", "--workloads",
                         "degree-4-linear", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "no DGL environment found" in err and len([line for line in err.splitlines() if "DGL" in line]) == 1
    raw = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert [r["lib"] for r in raw["results"]] == ["gatfast"]
    # the default finds the environment where setup_dgl_env.sh puts it
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setenv("GATFAST_DGL_ENV", str(tmp_path / "env"))
    assert compare.default_dgl_python() == str(python)


@pytest.mark.parametrize("argv, message", [
    (["--libs", "gatfast,tf"], "unknown libraries"),
    (["--dgl-python", "/no/such/python"], "is not an executable"),
])
def test_compare_rejects_bad_library_options(argv, message, capsys):
    with pytest.raises(SystemExit):
        compare.main(["--size", "tiny", "--reps", "1", *argv])
    assert message in capsys.readouterr().err


def test_compare_with_dgl_end_to_end(tmp_path):
    python = compare.default_dgl_python()
    if python is None:
        pytest.skip("no DGL environment (bash bench/setup_dgl_env.sh)")
    names = "degree-4-linear,degree-16-linear,degree-4-pairwise"
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast,dgl", "--workloads", names,
                         "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "compare.json").read_text())
    dgl_runs = [r for r in raw["results"] if r["lib"] == "dgl"]
    assert {r["workload"] for r in dgl_runs} == {"degree-4-linear", "degree-16-linear"}  # no pairwise
    assert all(r["max_rel_err_vs_gatfast"] < 1e-4 and r["dgl_omp_threads"] == 2 for r in dgl_runs)
    assert raw["meta"]["dgl"].startswith("2.1")
    assert "DGL GATv2Conv" in raw["slopes"]
    assert "| speed-up vs DGL |" in (tmp_path / "compare.md").read_text()


def test_compile_time_report():
    res = {state: {"import_s": 0.5, "first_layer_fwd_bwd_s": 9.0 if state == "cold" else 0.3,
                   "second_layer_fwd_bwd_s": 0.01, "first_train_step_s": 1.0, "second_train_step_s": 0.05,
                   "process_wall_s": 12.0} for state in ("cold", "warm")}
    text = compile_time.markdown(res, {"date": "d", "threads": 2, "numba": "0"})
    assert "| 9.000 | 0.300 |" in text


def test_reused_buffers_never_overwrite_held_results():
    """The layer reuses its big arrays across calls for speed, but only arrays nobody holds."""
    import gatfast

    rng = np.random.default_rng(0)
    n = 200
    graph = gatfast.CSRGraph.from_edge_index(rng.integers(0, n, (2, 1200)), n)
    layer = gatfast.GATv2Layer(5, 3, heads=2, seed=0, dropout=0.3)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    held = []
    for step in range(4):  # a training loop that keeps every output, cache and gradient
        out, cache = layer.forward(graph, x * (step + 1), training=True, rng=np.random.default_rng(step))
        grads = layer.backward(cache, np.ones_like(out))
        held.append((out, cache, grads, out.copy(), cache.alpha.copy(), grads["x"].copy()))
    for out, cache, grads, out_copy, alpha_copy, gx_copy in held:
        np.testing.assert_array_equal(out, out_copy)
        np.testing.assert_array_equal(cache.alpha, alpha_copy)
        np.testing.assert_array_equal(grads["x"], gx_copy)
    # and once nothing is held, a new call gives the same numbers as a fresh layer
    fresh = gatfast.GATv2Layer(5, 3, heads=2, seed=0, dropout=0.3)
    del held, out, cache, grads
    a = layer.forward(graph, x)[0]
    np.testing.assert_array_equal(a, fresh.forward(graph, x)[0])


def test_dgl_sampling_report_and_options():
    import dgl_sampling

    args = dgl_sampling.parse_args(["--nodes", "1000", "--fanouts", "5,3"])
    assert args.fanouts == [5, 3] and args.batch_size == 256 and args.out.startswith("/tmp/")
    assert dgl_sampling.parse_args([]).nodes == 2_000_000  # the issue's size by default
    with pytest.raises(SystemExit):
        dgl_sampling.parse_args(["--nodes", "2"])
    res = {
        "meta": {"date": "d", "cpu": "c", "threads": 2, "omp_wait_policy": "PASSIVE", "dgl": "2.1.0",
                 "torch": "2.2.1", "load": "0.1", "csbm": "num_nodes=1000"},
        "graph": {"nodes": 1000, "edges": 11000, "self_loops": True, "train_nodes": 600,
                  "generate_s": 0.1, "to_dgl_s": 0.01},
        "sampling": {"batches": 3, "batch_size": 256, "fanouts": [10, 10], "sampled_edges": 60000,
                     "sample_neighbors_s": 0.01, "sample_neighbors_edges_per_s": 6e6,
                     "sample_neighbors_to_block_s": 0.02, "sample_neighbors_to_block_edges_per_s": 3e6,
                     "neighbor_sampler_s": 0.015, "neighbor_sampler_edges": 60000,
                     "neighbor_sampler_edges_per_s": 4e6, "neighbor_sampler_fused": True},
        "training": None,
    }
    text = dgl_sampling.markdown(res)
    assert "| `dgl.sampling.sample_neighbors` alone | 0.010 | 60,000 | 6.00 |" in text
    assert "(fused)" in text and "training epoch" not in text


def test_dgl_sampling_runs_small(tmp_path):
    python = compare.default_dgl_python()
    if python is None:
        pytest.skip("no DGL environment (bash bench/setup_dgl_env.sh)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds gatfast itself
    subprocess.run([python, str(BENCH / "dgl_sampling.py"), "--nodes", "3000", "--out", str(tmp_path)],
                   check=True, env=env, capture_output=True, text=True)
    res = json.loads((tmp_path / "dgl_sampling.json").read_text())
    assert res["graph"]["nodes"] == 3000 and res["graph"]["train_nodes"] == 1800
    assert res["graph"]["edges"] > 3000 * 10  # about 10 in-edges per node, plus its loop
    s = res["sampling"]
    assert s["batches"] == 8 and s["sampled_edges"] > 0 and s["sample_neighbors_edges_per_s"] > 0
    # at most fanout in-edges per seed and hop: 256 seeds, then at most 256 * 11 of them
    assert s["sampled_edges_per_batch"] <= 256 * 10 + 256 * 11 * 10
    t = res["training"]
    assert t["batches"] == 8 and t["epoch_s"] > 0 and t["peak_rss_mb"] >= t["rss_before_mb"]
    assert (tmp_path / "dgl_sampling.md").read_text().startswith("# DGL 2.1 neighbour-sampling anchor")
