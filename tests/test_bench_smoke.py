"""The benchmark harness runs (tiny sizes, no timing assertions).

The pytest-benchmark suites in ``bench/`` are also collected by a plain
``pytest`` run at their tiny size; these tests cover the pieces around them:
the workload builders, the runners of the libraries and their agreement with
gatfast, and ``compare.py`` and ``compile_time.py``'s reporting, targets and
output directories. DGL runs in an environment of its own: its end-to-end
checks run only where ``compare.py`` finds it (``GATFAST_DGL_ENV``).
"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import agreement  # noqa: E402
import compare  # noqa: E402
import compile_time  # noqa: E402
import outdirs  # noqa: E402
import workloads  # noqa: E402
from comparelib import runs, worker  # noqa: E402

SMOKE = "smoke run (tiny sizes): not the published results"


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_tiny_workload_runs(name):
    w = workloads.make_workload(name, "tiny")
    g = w.graph
    # self loops are in the graph: one per node
    assert np.count_nonzero(g.indices == g.targets()) == g.num_nodes
    runner = workloads.GatfastRunner(w)
    out = runner.forward()
    assert out.shape == (w.num_nodes, w.out_dim) and np.all(np.isfinite(out))
    result = runner.forward_backward()
    if w.kind == "layer":
        assert set(result) >= {"W_l", "W_r", "att"}
        flat = workloads.flat_grads(result)
        assert all(np.all(np.isfinite(v)) for v in flat.values())
        if w.edge_dim:
            assert "W_e" in result and result["edge_attr"].shape == w.edge_attr.shape
        assert isinstance(result["x"], tuple) == w.bipartite
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


def test_new_workloads_are_built_as_specified():
    scene = workloads.make_workload("scene", "full")  # one scene of 10 vehicles: every pair, plus loops
    assert (scene.num_nodes, scene.graph.nnz, scene.x.shape, scene.out_dim) == (10, 100, (10, 16), 32)
    assert np.all(scene.graph.in_degree() == 10) and scene.micro and scene.heads == 1
    batch = workloads.make_workload("scene-batch-train", "full")
    assert batch.extra["scenes"] == 64 and 64 * 3 <= batch.num_nodes <= 64 * 12
    assert batch.y.shape == (batch.num_nodes, 2) and batch.out_dim == 2 and batch.kind == "train"
    assert batch.extra["net"] == {"num_layers": 3, "heads": 4, "out_heads": 1, "dropout": 0.0,
                                  "attention_dropout": 0.0}
    assert np.count_nonzero(batch.graph.indices == batch.graph.targets()) == batch.num_nodes
    large = workloads.make_workload("large", "tiny")
    edge = workloads.make_workload("large-edge", "tiny")
    bip = workloads.make_workload("large-bipartite", "tiny")
    for w in (edge, bip):  # the same edges and features as large
        assert w.graph == large.graph and np.array_equal(w.x, large.x)
    assert edge.edge_attr.shape == (large.graph.nnz, 8) and edge.edge_attr.dtype == np.float32
    assert bip.in_features == (64, 64) and np.array_equal(bip.x_dst, bip.x)
    assert not np.shares_memory(bip.x_dst, bip.x)  # a separate copy
    sb = workloads.make_workload("small-batch-edge", "tiny")
    assert sb.graph == workloads.make_workload("small-batch", "tiny").graph and sb.edge_dim == 4
    assert [n for n in workloads.WORKLOADS if not workloads.dgl_can_run(n)] == ["small-batch-edge", "large-edge"]


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_pyg_runs_and_agrees_with_gatfast(name):
    """PyG holds gatfast's weights: same output and gradients (float32), on every workload."""
    pytest.importorskip("torch_geometric")
    import torch
    from reference import PygRunner

    w = workloads.make_workload(name, "tiny")
    r = PygRunner(w)
    errs = agreement.check(r.outputs(), workloads.GatfastRunner(w).outputs(), "PyG", name)
    assert "out" in errs and max(errs.values()) < agreement.FLOAT32_TOL
    if w.edge_dim:
        assert {"W_e", "edge_attr"} <= set(errs)
    if w.bipartite:
        assert {"x_src", "x_dst"} <= set(errs)
    out = r.forward()
    assert tuple(out.shape) == (w.num_nodes, w.out_dim)
    r.forward_backward()
    if w.kind == "layer":
        r.backward_only(r.forward_cache())
    before = [p.detach().clone() for p in r.model.parameters()]
    r.train_step()
    assert any(not torch.equal(a, b) for a, b in zip(before, r.model.parameters()))  # Adam moved them


def test_agreement_catches_a_wrong_mapping():
    pytest.importorskip("torch_geometric")
    import torch
    from reference import PygRunner

    w = workloads.make_workload("large-edge", "tiny")
    want = workloads.GatfastRunner(w).outputs()
    r = PygRunner(w)
    with torch.no_grad():  # source and target projections swapped
        w_l = r.model.lin_l.weight.clone()
        r.model.lin_l.weight.copy_(r.model.lin_r.weight)
        r.model.lin_r.weight.copy_(w_l)
    with pytest.raises(agreement.Disagreement, match="PyG and gatfast differ on large-edge"):
        agreement.check(r.outputs(), want, "PyG", "large-edge")
    got = PygRunner(w).outputs()
    del got["edge_attr"]
    with pytest.raises(agreement.Disagreement, match="lack \\['edge_attr'\\]"):
        agreement.check(got, want, "PyG", "large-edge")


def test_agreement_floor_for_gradients_that_vanish_in_exact_arithmetic():
    rng = np.random.default_rng(0)
    want = {"out": rng.standard_normal(50), "W_l": rng.standard_normal(100), "W_r": np.zeros(8)}
    noise = dict(want, W_r=1e-9 * rng.standard_normal(8))  # float32 rounding noise on a zero gradient
    assert max(agreement.errors(noise, want).values()) < 1e-6
    wrong = dict(want, W_r=0.5 * np.ones(8))  # a gradient of the order of the others: a real mismatch
    assert agreement.errors(wrong, want)["W_r"] > 1e-2
    off = dict(want, out=want["out"] * (1 + 1e-3))  # the output has no floor
    assert agreement.errors(off, want)["out"] == pytest.approx(1e-3 / (1 + 1e-3), rel=1e-6)


def test_agreement_norms_are_accumulated_in_chunks(monkeypatch):
    monkeypatch.setattr(agreement, "CHUNK", 7)
    a = np.arange(100, dtype=np.float32).reshape(10, 10)
    b = a + np.float32(0.5)
    expect = np.linalg.norm(a - b) / max(np.linalg.norm(a), np.linalg.norm(b))
    assert agreement.rel_err(a, b) == pytest.approx(expect, rel=1e-12)
    with pytest.raises(agreement.Disagreement, match="shapes differ"):
        agreement.rel_err(a, a[:5])


def test_worker_fails_before_timing_when_the_peer_disagrees(tmp_path, monkeypatch):
    pytest.importorskip("torch_geometric")
    ref = tmp_path / "scene.npz"
    worker.save_reference("scene", "tiny", ref)
    bad = agreement.load(ref)
    bad["out"] = bad["out"] + 1.0
    agreement.save(ref, bad)
    timed = []
    real = worker.time_calls
    monkeypatch.setattr(worker, "time_calls", lambda *a, **k: timed.append(1) or real(*a, **k))
    with pytest.raises(agreement.Disagreement, match="PyG and gatfast differ on scene"):
        worker.run_worker("pyg", "scene", "tiny", 1, 2, reference=str(ref))
    assert not timed
    worker.save_reference("scene", "tiny", ref)
    r = worker.run_worker("pyg", "scene", "tiny", 2, 2, reference=str(ref))
    assert r["max_rel_err_vs_gatfast"] < agreement.FLOAT32_TOL and timed
    assert r["calls_per_sample"]["forward"] >= 1 and r["calls_per_sample"]["forward_backward"] >= 1


def test_per_call_timing_loops_many_calls():
    calls = []
    assert worker.calls_per_sample(lambda: None, target_s=1e-3) > 10
    times = worker.time_calls(lambda: calls.append(1), reps=3, calls=10, warmup=2)
    assert len(times) == 3 and len(calls) == 2 + 30


def test_plan_runs_gatfast_first_and_leaves_out_impossible_peers():
    assert runs.plan(["large-edge", "degree-4-pairwise", "scene"], ["dgl", "pyg", "gatfast"]) == [
        ("large-edge", ["gatfast", "pyg"]), ("degree-4-pairwise", ["gatfast"]), ("scene", ["gatfast", "pyg", "dgl"])]


def test_every_worker_gets_passive_openmp(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    args = compare.parse_args(["--size", "tiny", "--threads", "2"])[1]
    args.malloc_conf = None
    for lib in ("gatfast", "pyg", "dgl"):
        env = runs.worker_env(lib, args, None, REPO)
        assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["NUMBA_NUM_THREADS"] == "2"
    assert str(REPO) in runs.worker_env("dgl", args, None, REPO)["PYTHONPATH"].split(os.pathsep)


def test_progress_bar_on_a_terminal_plain_lines_otherwise(capsys):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    bar = runs.Progress(2, stream=term)
    assert bar.bar is not None
    bar.start("scene", "pyg")
    bar.done("scene pyg done")
    bar.close()
    assert "scene PyG" in term.getvalue() and "1/2" in term.getvalue()  # the bar, on the terminal
    assert capsys.readouterr().out == "scene pyg done\n"  # the result lines on stdout, in both modes
    plain = runs.Progress(2, stream=io.StringIO())
    assert plain.bar is None
    plain.start("scene", "pyg")
    plain.done("a plain line")
    plain.close()
    assert capsys.readouterr().out == "a plain line\n"


def test_default_outputs_are_untracked_and_results_need_the_flag(tmp_path):
    for tool in ("compare", "roofline", "compile_time", "threads"):
        path = outdirs.default_out(tool)
        assert not outdirs.is_tracked_results(path)
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path / "compare.md")], cwd=REPO)
        assert ignored.returncode == 0, f"{path} is not git-ignored"
    assert compare.parse_args(["--size", "tiny"])[1].out == outdirs.default_out("compare")
    assert compare.parse_args(["--update-results"])[1].out == outdirs.RESULTS
    for argv in (["--out", str(outdirs.RESULTS)], ["--out", str(outdirs.RESULTS / "jemalloc-default")],
                 ["--update-results", "--size", "tiny"], ["--update-results", "--out", str(tmp_path)]):
        with pytest.raises(SystemExit):
            compare.parse_args(argv)
    with pytest.raises(SystemExit):  # refused before anything runs
        compile_time.main(["--out", str(outdirs.RESULTS)])


def test_compare_end_to_end(tmp_path):
    names = "degree-4-linear,degree-16-linear,degree-4-pairwise,degree-16-pairwise,scene"
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast", "--workloads", names,
                         "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "compare.json").read_text())
    assert {r["workload"] for r in raw["results"]} == set(names.split(","))
    assert all(r["forward_backward_median_ms"] > 0 for r in raw["results"])
    assert all(r["omp_wait_policy"] == "PASSIVE" for r in raw["results"]) and raw["meta"]["omp_wait_policy"]
    scene = next(r for r in raw["results"] if r["workload"] == "scene")
    assert scene["calls_per_sample"]["forward"] >= 1
    # roofline: a bound for every layer workload, from the probe at the start
    assert all(r["roofline"]["bound_ms"] > 0 for r in raw["results"])
    assert raw["meta"]["roofline"]["rates"]["read_bps"] > 0
    assert all(row["bound_ratio"] > 0 for row in raw["summary"])
    # the "pairwise minus linear" curve appears only where the pairwise run was the slower one
    assert {"gatfast linear", "gatfast pairwise"} <= set(raw["slopes"]) <= {
        "gatfast linear", "gatfast pairwise", "pairwise minus linear"}
    table = (tmp_path / "compare.md").read_text()
    assert table.splitlines()[0].endswith(SMOKE)
    assert "| degree-16-pairwise |" in table and "| gatfast / bound |" in table
    assert "Per-call cost" in table and "| scene | 10 | 100 |" in table.split("Per-call cost")[1]
    for word in (raw["meta"]["simd"], "2 threads", "OMP_WAIT_POLICY=PASSIVE", "allocator", "bench/compare.py"):
        assert word in table.split("\n\n")[1]
    pytest.importorskip("matplotlib")
    assert (tmp_path / "degree_sweep.png").stat().st_size > 0


def test_compare_with_pyg_checks_every_peer_before_timing(tmp_path):
    pytest.importorskip("torch_geometric")
    names = "large,large-bipartite,small-batch-edge"
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast,pyg", "--workloads", names,
                         "--no-roofline", "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "compare.json").read_text())
    pyg = {r["workload"]: r for r in raw["results"] if r["lib"] == "pyg"}
    assert set(pyg) == set(names.split(","))
    assert all(r["max_rel_err_vs_gatfast"] < agreement.FLOAT32_TOL for r in pyg.values())
    assert {"edge_attr", "W_e"} <= set(pyg["small-batch-edge"]["agreement"])
    rows = {row["workload"]: row for row in raw["summary"]}
    assert [c["what"] for c in rows["large-bipartite"]["checks"]] == ["time_vs_large"]
    assert "Same weights, same function" in (tmp_path / "compare.md").read_text()
    # PyG alone: gatfast's outputs are still made (untimed) and every PyG run is checked against them
    out = tmp_path / "pyg-only"
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "pyg", "--workloads", "scene",
                         "--no-roofline", "--out", str(out)]) == 0
    only = json.loads((out / "compare.json").read_text())["results"]
    assert [r["lib"] for r in only] == ["pyg"] and only[0]["max_rel_err_vs_gatfast"] < agreement.FLOAT32_TOL


def test_compare_rounds_alternate_the_libraries_and_report_the_median_of_the_rounds(tmp_path, monkeypatch):
    order = []
    spawn = runs.spawn

    def spy(script, lib, name, args, jemalloc, repo, extra=(), **kw):
        order.append((lib, tuple(extra)))
        return spawn(script, lib, name, args, jemalloc, repo, extra, **kw)

    monkeypatch.setattr(runs, "spawn", spy)
    libs = "gatfast,pyg" if _has_pyg() else "gatfast"
    assert compare.main(["--size", "tiny", "--reps", "2", "--rounds", "3", "--libs", libs, "--workloads",
                         "scene-batch-train", "--no-roofline", "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "compare.json").read_text())
    assert raw["meta"]["rounds"] == 3
    assert "3 times (rounds" in (tmp_path / "compare.md").read_text()
    for r in raw["results"]:
        rounds = [x["forward_backward_median_ms"] for x in r["rounds"]]
        assert len(rounds) == 3 and r["forward_backward_median_ms"] == float(np.median(rounds))
        assert len(r["forward_backward_s"]) == 3 * 2  # every round's samples
    if libs == "gatfast,pyg":  # gatfast first (it saves the reference), then last, then first again
        assert [lib for lib, _ in order] == ["gatfast", "pyg", "pyg", "gatfast", "gatfast", "pyg"]
        saves = [any("--save-reference" in e for e in extra) for lib, extra in order if lib == "gatfast"]
        assert saves == [True, False, False]
    single = {"lib": "gatfast", "forward_backward_median_ms": 1.0}
    assert runs.combine_rounds([single]) is single


@pytest.mark.parametrize("stdout", ["", "\n", "compiling...\n", '{"lib": "gatfast"', "[1, 2]\n"])
def test_a_worker_without_its_json_result_is_an_error_that_names_it(stdout):
    with pytest.raises(RuntimeError, match="worker pyg scene exited 0 without a JSON result"):
        runs.parse_result(stdout, "worker pyg scene")


def test_spawn_refuses_a_worker_that_printed_no_result_unless_none_is_expected(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(runs.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0, stdout="", stderr=""))
    args = SimpleNamespace(dgl_python=None, size="tiny", reps=1, threads=1)
    monkeypatch.setattr(runs, "worker_env", lambda *a: {})
    with pytest.raises(RuntimeError, match="worker gatfast scene exited 0 without a JSON result"):
        runs.spawn("compare.py", "gatfast", "scene", args, None, None)
    assert runs.spawn("compare.py", "gatfast", "scene", args, None, None, ["--reference-only"], result=False) is None


def test_a_workers_result_is_its_last_line():
    assert runs.parse_result('notice\n{"lib": "pyg", "x": 1}\n', "w") == {"lib": "pyg", "x": 1}


def _has_pyg():
    from reference import pyg_available

    return pyg_available()


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
    assert SMOKE not in text


def test_compare_targets_in_microseconds_and_the_bipartite_rule():
    def rows(scene_fwd_ms, bip_ms, pyg=True):
        results = [_fake("gatfast", "scene", scene_fwd_ms, 0.030, 0.1),
                   _fake("gatfast", "large", 10.0, 100.0, 50.0),
                   _fake("gatfast", "large-bipartite", 10.0, bip_ms, 50.0)]
        if pyg:
            results += [_fake("pyg", "scene", 0.2, 0.5, 0.2), _fake("pyg", "large", 90.0, 900.0, 400.0)]
        return {r["workload"]: r for r in compare.summarize(results, ["scene", "large", "large-bipartite"])}

    ok = rows(0.010, 104.0)  # 10 µs, 30 µs, 16.7x; bipartite 1.04 x large
    assert ok["scene"]["target_met"] is True and ok["large-bipartite"]["target_met"] is True
    checks = {c["what"]: c for c in ok["scene"]["checks"]}
    assert checks["forward_us"]["value"] == pytest.approx(10.0) and checks["forward_backward_us"]["limit"] == 40.0
    assert checks["speedup"]["value"] == pytest.approx(0.5 / 0.030)
    bad = rows(0.020, 106.0)  # 20 µs > 15 µs; bipartite 1.06 x large
    assert bad["scene"]["target_met"] is False and bad["large-bipartite"]["target_met"] is False
    assert [c["met"] for c in bad["scene"]["checks"]] == [False, True, True]
    alone = rows(0.010, 100.0, pyg=False)  # no PyG: the µs limits pass, the speed-up is not evaluated
    assert alone["scene"]["target_met"] is None and alone["large-bipartite"]["target_met"] is True
    text = compare.markdown(list(ok.values()), {}, {**META, "size": "tiny"})
    assert text.splitlines()[0].endswith(SMOKE)
    micro = text.split("Per-call cost")[1]
    assert "| scene | 10 | 20 | 10.0 | 200.0 | 30.0 | 500.0 | 16.67 |" in micro
    assert "fwd <= 15 µs, fwd+bwd <= 40 µs, >= 10x | yes |" in micro
    assert "| large-bipartite |" in text.split("Per-call cost")[0] and "time <= 1.05 x large | yes |" in text
    assert "— (not evaluated)" in compare.markdown(list(alone.values()), {}, META)


def test_compare_summary_with_dgl():
    results = [
        _fake("gatfast", "large", 10.0, 100.0, 50.0), _fake("pyg", "large", 90.0, 900.0, 400.0),
        _fake("dgl", "large", 40.0, 300.0, 200.0, max_rel_err_vs_gatfast=2e-6),
        _fake("gatfast", "cora", 1.0, 2.0, 1.0), _fake("pyg", "cora", 4.0, 8.0, 2.0),  # no DGL run
        _fake("gatfast", "large-edge", 20.0, 200.0, 60.0), _fake("pyg", "large-edge", 90.0, 900.0, 400.0),
    ]
    for d, t in ((4, 1.0), (16, 4.0), (64, 16.0)):
        results.append(_fake("gatfast", f"degree-{d}-linear", t, t, 1.0))
        results.append(_fake("gatfast", f"degree-{d}-pairwise", t, 2 * t, 1.0))
        results.append(_fake("dgl", f"degree-{d}-linear", t, 8 * t ** 1.5, 1.0))
    names = ["large", "cora", "large-edge", "degree-4-linear", "degree-4-pairwise"]
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
    assert "largest: DGL 2.0e-06" in text and "no edge features" in text
    cora = next(line for line in text.splitlines() if line.startswith("| cora |"))
    assert cora.count("|") == header.count("|") and "| — |" in cora
    edge = next(line for line in text.splitlines() if line.startswith("| large-edge |"))
    assert edge.count("|") == header.count("|") and "| n/a (no edge features) |" in edge
    assert "| DGL GATv2Conv | 1.50 |" in text


def test_compare_render_keeps_old_json_working(tmp_path):
    # a compare.json written before DGL was a peer (the tracked one without its DGL runs): no DGL in the output
    tracked = json.loads((outdirs.RESULTS / "compare.json").read_text())
    tracked["results"] = [r for r in tracked["results"] if r["lib"] != "dgl"]
    tracked["meta"] = {k: v for k, v in tracked["meta"].items() if not k.startswith("dgl")}
    old = tmp_path / "old" / "compare.json"
    old.parent.mkdir()
    old.write_text(json.dumps(tracked))
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
                         "degree-4-linear", "--no-roofline", "--out", str(tmp_path / "out")]) == 0
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
    (["--workloads", "nope"], "unknown workloads"),
])
def test_compare_rejects_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit):
        compare.main(["--size", "tiny", "--reps", "1", *argv])
    assert message in capsys.readouterr().err


def test_compare_refuses_a_dgl_environment_that_cannot_import_its_modules(tmp_path, capsys):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numba'\" >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(SystemExit):
        compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast,dgl", "--dgl-python", str(python),
                      "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "cannot import" in err and "No module named 'numba'" in err and "setup_dgl_env.sh" in err
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_compare_with_dgl_end_to_end(tmp_path):
    python = compare.default_dgl_python()
    if python is None:
        pytest.skip("no DGL environment (bash bench/setup_dgl_env.sh, or GATFAST_DGL_ENV)")
    names = "degree-4-linear,degree-4-pairwise,large-bipartite,small-batch-edge,scene-batch-train"
    assert compare.main(["--size", "tiny", "--reps", "1", "--libs", "gatfast,dgl", "--workloads", names,
                         "--no-roofline", "--out", str(tmp_path)]) == 0
    raw = json.loads((tmp_path / "compare.json").read_text())
    dgl_runs = [r for r in raw["results"] if r["lib"] == "dgl"]
    # no pairwise form and no edge features in DGL
    assert {r["workload"] for r in dgl_runs} == {"degree-4-linear", "large-bipartite", "scene-batch-train"}
    assert all(r["max_rel_err_vs_gatfast"] < 1e-4 and r["dgl_omp_threads"] == 2 for r in dgl_runs)
    assert all(r["omp_wait_policy"] == "PASSIVE" for r in dgl_runs)
    assert raw["meta"]["dgl"].startswith("2.1")
    table = (tmp_path / "compare.md").read_text()
    assert "| speed-up vs DGL |" in table and "n/a (no edge features)" in table


def test_compile_time_report():
    res = {state: {"import_s": 0.5, "first_layer_fwd_bwd_s": 9.0 if state == "cold" else 0.3,
                   "second_layer_fwd_bwd_s": 0.01, "first_train_step_s": 1.0, "second_train_step_s": 0.05,
                   "process_wall_s": 12.0} for state in ("cold", "warm")}
    text = compile_time.markdown(res, {"date": "d", "threads": 2, "numba": "0", "command": "python x"})
    assert "| 9.000 | 0.300 |" in text and "`python x`" in text
    train = {"gatfast train": {"cold_helper": [7.25, 8.0], "cold_alone": [12.0, 13.5], "warm": 2.04}}
    assert "| `gatfast train` | 7.2 / 8.0 | 12.0 / 13.5 | 2.0 |" in compile_time.train_markdown(train)


def test_bench_suites_skip_cleanly_without_pytest_benchmark(tmp_path):
    """A pytest_benchmark that cannot be imported (as where it is not installed): every case skips, none errors."""
    fake = tmp_path / "pytest_benchmark"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ImportError("pytest-benchmark is not installed (simulated)")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:benchmark", "-p", "no:cacheprovider",
                           str(BENCH / "test_bench_forward.py"), "-k", "scene"],
                          cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pytest-benchmark is not installed" in proc.stdout and " error" not in proc.stdout
    assert "passed" not in proc.stdout


def test_bench_modules_are_short():
    for path in sorted(BENCH.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 400, f"{path.relative_to(REPO)} has {lines} lines: split it by job"


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
                     "neighbor_sampler_edges_per_s": 4e6, "neighbor_sampler_fused": True,
                     "concurrent_sample_neighbors_s": 0.005, "concurrent_sample_neighbors_edges": 60000,
                     "concurrent_sample_neighbors_edges_per_s": 1.2e7},
        "training": None,
    }
    text = dgl_sampling.markdown(res)
    assert "| `dgl.sampling.sample_neighbors` alone | 0.010 | 60,000 | 6.00 |" in text
    assert "2 batches at a time (one a thread, 1 OpenMP thread each) | 0.005 | 60,000 | 12.00 |" in text
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


def test_sampling_bench_tiny(tmp_path, capsys):
    """bench/sampling.py at a tiny size: both parts run, the report is written, tracked results are refused."""
    import sampling

    assert sampling.main(["--nodes", "3000", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "sampling.json").read_text())
    s, t = res["sampling"], res["training"]
    assert s["sampled_edges"] > 0 and s["edges_per_s"] > 0 and s["batches"] == -(-s["seeds"] // 256)
    assert s["epoch_edges_per_s"] > 0 and s["epoch_seconds"] > 0
    assert t["batches"] == s["batches"] and np.isfinite(t["mean_loss"]) and t["peak_rss_mb"] >= t["rss_before_mb"]
    report = (tmp_path / "sampling.md").read_text()
    assert "NeighborSampler.batch" in report and "NeighborSampler.epoch" in report
    with pytest.raises(SystemExit):
        sampling.main(["--nodes", "3000", "--out", str(outdirs.RESULTS / "x")])


def test_threads_end_to_end(tmp_path):
    import threads

    argv = ["--size", "tiny", "--reps", "1", "--threads", "1,2", "--workloads", "degree-4-linear", "--libs", "gatfast",
            "--rounds", "2", "--out", str(tmp_path)]
    if os.cpu_count() < 2 or threads.usable_cpus() < 2:
        argv[argv.index("1,2")] = "1"
    assert threads.main(argv) == 0
    raw = json.loads((tmp_path / "threads.json").read_text())
    counts = [int(n) for n in raw["results"]]
    assert [row["threads"] for row in raw["rows"]] == counts and counts[0] == 1
    assert raw["rows"][0]["gatfast"]["speedup"] == 1.0
    assert all(row["gatfast"]["over_bound"] > 0 and "pyg" not in row for row in raw["rows"])
    for row, counted in zip(raw["rows"], raw["results"].values()):  # two processes per cell, their median
        rounds = [r["forward_backward_median_ms"] for r in counted[0]["rounds"]]
        assert len(rounds) == 2 and row["gatfast"]["range_ms"] == [min(rounds), max(rounds)]
        assert row["gatfast"]["ms"] == pytest.approx(sum(rounds) / 2)
    text = (tmp_path / "threads.md").read_text()
    assert "in 2 fresh processes" in text
    assert text.startswith(f"**{SMOKE}**") and "| degree-4-linear | 1 |" in text
    assert "Goal (large, 16 threads" in text and "not measured in this run" in text
    for word in (raw["meta"]["simd"], "system malloc", "bench/threads.py"):
        assert word in text


def test_threads_goal_line_gives_the_rounds_range_and_the_bounds_fall():
    import threads

    def row(n, ms, lo, hi, over):
        return {"workload": "large", "threads": n, "gatfast": {"ms": ms, "range_ms": [lo, hi], "over_bound": over,
                                                              "speedup": None}}

    one, many = row(1, 600.0, 480.0, 880.0, 1.2), row(16, 50.0, 48.0, 55.0, 1.25)
    many["gatfast"]["speedup"] = 12.0
    meta = {"date": "d", "cpu": "c", "simd": "s", "allocator": "a", "numba": "0", "command": "x", "reps": 3,
            "rounds": 5, "rates": {}}
    text = threads.markdown([one, many], meta)
    assert "12.00×, met. Over the rounds' medians: 8.73-18.33×." in text  # 480/55 and 880/48
    assert "falls 12.50× from 1 to 16 threads" in text  # bounds 600 / 1.2 = 500 and 50 / 1.25 = 40 ms
    assert "| large | 1 | 600.00 (480.00-880.00) |" in text and "in 5 fresh processes" in text
    one["gatfast"]["range_ms"], many["gatfast"]["range_ms"] = [600.0, 600.0], [50.0, 50.0]
    assert "Over the rounds" not in threads.markdown([one, many], {**meta, "rounds": 1})


@pytest.mark.parametrize("argv, message", [
    (["--threads", "0"], "each >= 1"),
    (["--threads", "a,b"], "expected thread counts"),
    (["--threads", "100000"], "at most"),
    (["--workloads", "scene"], "unknown or per-call workloads"),
    (["--workloads", "nope"], "unknown or per-call workloads"),
    (["--libs", "gatfast,dgl"], "--libs"),
    (["--reps", "0"], "--reps must be >= 1"),
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--update-results", "--size", "tiny"], "smoke run"),
    (["--out", str(outdirs.RESULTS)], "tracked results"),
])
def test_threads_rejects_bad_options(argv, message, capsys):
    import threads

    with pytest.raises(SystemExit):
        threads.main(["--size", "tiny", *argv])
    assert message in capsys.readouterr().err


def test_source_order_prototypes_give_todays_bits(capsys):
    import source_order

    assert source_order.main(["--size", "tiny", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(SMOKE)
    for row in ("| large | `gatv2_backward_source_rows` | both |", "| large-edge | `gatv2_backward_source_edge_rows` | signs |",
                "| large | `gatv2_backward_source_rows` | records |",
                "| large-edge | `gatv2_backward_source_edge_rows` | records |"):
        assert row in out
    with pytest.raises(SystemExit):
        source_order.main(["--workloads", "scene-batch-train"])


def test_source_order_leaves_the_thread_count_alone():
    import numba
    import source_order

    before = numba.get_num_threads()
    source_order.main(["--size", "tiny", "--rounds", "1", "--workloads", "large"])
    assert numba.get_num_threads() == before


def test_scene_network_prints_every_way(capsys, monkeypatch):
    """bench/scene_network.py at one round of two calls: every call three ways, the same bits
    checked inside, the one-call paths and their row limit restored after."""
    import scene_network

    from gatfast.layers import small

    monkeypatch.setattr(small, "_decided", set())
    rows = small.FEW_ROWS
    scene_network.main(["--rounds", "1", "--reps", "2"])
    table = capsys.readouterr().out
    for call in ("| output |", "| forward |", "| train step |"):
        assert call in table
    assert small.ENABLED and small.FEW_ROWS == rows
    assert "small products only µs (median / best)" in table and "general path only" in table
    with pytest.raises(SystemExit):
        scene_network.main(["--rounds", "0"])


def test_row_costs_degree_graph_keeps_each_rows_sources():
    """bench/row_costs.py's graphs: every row at the asked in-degree, its sources its own, in turn."""
    import row_costs

    import gatfast

    g = gatfast.CSRGraph(np.array([0, 2, 3, 6]), np.array([1, 2, 0, 0, 1, 2]), 3)
    for degree in (1, 2, 4):
        d = row_costs.degree_graph(g, degree)
        assert np.array_equal(d.indptr, np.arange(4) * degree)
        for i in range(3):
            own = g.indices[g.indptr[i]:g.indptr[i + 1]]
            got = d.indices[d.indptr[i]:d.indptr[i + 1]]
            assert np.array_equal(got, np.resize(own, degree))
    with pytest.raises(ValueError, match="needs a source"):
        row_costs.degree_graph(gatfast.CSRGraph(np.array([0, 0, 1]), np.array([0]), 2), 2)


def test_row_costs_fit_recovers_per_node_and_per_edge_costs():
    import row_costs

    nodes, edges = 1000, {1: 1000, 2: 2000, 5: 5000}
    # 30 ns per node and 4 ns per edge: ms = (30 * 1000 + 4 * E) / 1e6
    times = {d: {"k": [(30 * nodes + 4 * e) / 1e6] * 3, row_costs.REST: [0.001] * 3} for d, e in edges.items()}
    rows = row_costs.fit(nodes, edges, times)
    node_ns, edge_ns, ms = rows["k"]
    assert node_ns == pytest.approx(30.0) and edge_ns == pytest.approx(4.0)
    assert list(rows) == ["k", row_costs.REST]  # the rest last
    assert "| **step** |" in row_costs.markdown(nodes, edges, rows)
    # a kernel that ran at only some degrees is fitted on those, and shown as "–" at the others
    times[1]["only at 2 and 5"] = []
    for d in (2, 5):
        times[d]["only at 2 and 5"] = [(10 * nodes + 2 * edges[d]) / 1e6]
    node_ns, edge_ns, ms = row_costs.fit(nodes, edges, times)["only at 2 and 5"]
    assert node_ns == pytest.approx(10.0) and edge_ns == pytest.approx(2.0) and set(ms) == {2, 5}
    assert "| only at 2 and 5 | – |" in row_costs.markdown(nodes, edges, row_costs.fit(nodes, edges, times))


def test_row_costs_smoke_prints_the_kernels_and_restores_the_runtime(capsys):
    import numba
    import row_costs

    from gatfast import _runtime

    before = (numba.get_num_threads(), _runtime.run_rows, _runtime.run_chunks)
    row_costs.main(["--size", "tiny", "--rounds", "1", "--reps", "1", "--degrees", "1,3"])
    table = capsys.readouterr().out
    # a batch of small graphs: the target pass does the source pass (gatfast.layers.passes.source_sums_cuts)
    for name in ("gatv2_forward_rows", "gatv2_backward_target_blocks", "matmul_pair_rows",
                 row_costs.REST, "| **step** |", "degree 3 ms"):
        assert name in table
    assert (numba.get_num_threads(), _runtime.run_rows, _runtime.run_chunks) == before
    for bad in (["--degrees", "0,1"], ["--degrees", "a"], ["--degrees", "5"], ["--rounds", "0"]):
        with pytest.raises(SystemExit):
            row_costs.main(bad)
