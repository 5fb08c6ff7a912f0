"""gatfast against PyTorch Geometric's and DGL's GATv2Conv, side by side, in one run.

Every (workload, library) pair runs in its own fresh subprocess, one after
the other (never in parallel), with Numba, BLAS, OpenMP and torch limited to
the same number of threads. DGL 2.1 runs under the python of its own
environment (``bench/setup_dgl_env.sh``, ``--dgl-python``); it is left out,
with one line on stderr, when that environment is not found. The
subprocess builds the workload, warms up (which also compiles or loads the
Numba kernels), then times the forward pass and
the forward + backward pass (the full step for the training workload):
median of ``--reps`` repetitions. Peak memory is the highest resident set
size during the timed calls minus the resident set size just before them
(after imports, data creation and a warm-up on a tiny copy of the workload;
on Linux the kernel's peak counter VmHWM is reset through
``/proc/self/clear_refs``, elsewhere ``ru_maxrss`` is used), so it counts what
the benchmarked calls themselves allocate, torch's memory as well as NumPy's.

Outputs (written atomically into ``--out``, default ``bench/results``):
``compare.md`` (the table), ``compare.json`` (raw numbers) and, if
matplotlib is installed, ``degree_sweep.png`` (time against in-degree,
log-log, with the fitted slopes).

Usage::

    python bench/compare.py                      # all workloads, full size
    python bench/compare.py --size tiny --reps 3 # seconds, e.g. for CI
    python bench/compare.py --jemalloc           # LD_PRELOAD Debian's libjemalloc2 (every side)
    python bench/compare.py --libs gatfast,dgl --dgl-python /path/to/dgl-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from gatfast._io import atomic_save_figure, atomic_write_text

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
LIBS = ("gatfast", "pyg", "dgl")
LIB_NAMES = {"gatfast": "gatfast", "pyg": "PyG", "dgl": "DGL"}

JEMALLOC_PATHS = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2")

# the performance issue's targets: forward + backward speed-up (and memory for "large")
TARGETS = {
    "large": {"speedup": 8.0, "memory_ratio": 0.2},
    "small-batch": {"speedup": 4.0},
    "cora": {"speedup": 5.0},
    "cora-train": {"speedup": 5.0},
    "degree-256-linear": {"speedup": 5.0},
}


# ---------------------------------------------------------------------- worker (one subprocess)
def _maxrss_mb():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def _status_mb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # kB
    raise OSError(f"{field} not in /proc/self/status")


def _start_peak():
    """Start a peak-memory measurement; returns (baseline MB, function giving the peak MB).

    On Linux the kernel's peak-RSS counter (VmHWM) is reset to the current
    RSS through /proc/self/clear_refs, so the peak covers exactly what follows.
    Elsewhere ru_maxrss (the peak since the process started) is the fallback.
    """
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_mb("VmRSS"), lambda: _status_mb("VmHWM")
    except OSError:
        return _maxrss_mb(), _maxrss_mb


def _loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _time_calls(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def run_worker(lib, name, size, reps, threads):
    """Time one workload with one library in this process; return a dict of raw numbers."""
    import numba
    import numpy as np
    import workloads

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    extra = {}
    if lib == "pyg":
        import torch
        from reference import PygRunner as Runner

        torch.set_num_threads(threads)
    elif lib == "dgl":
        import dgl
        import reference_dgl
        import torch
        from reference_dgl import DglRunner as Runner

        torch.set_num_threads(threads)
        dgl.utils.set_num_threads(threads)  # DGL's own OpenMP kernels (message passing, edge softmax)
        extra = {"versions": {"dgl": dgl.__version__, "torch": torch.__version__, "numpy": np.__version__,
                              "numba": numba.__version__, "python": platform.python_version()},
                 "dgl_omp_threads": int(dgl.utils.get_num_threads())}
        # fail fast, before minutes of timing, if DGL does not compute gatfast's function
        reference_dgl.check_agreement(workloads.make_workload(name, "tiny"))
    else:
        Runner = workloads.GatfastRunner

    t0 = time.perf_counter()
    w = workloads.make_workload(name, size)
    build_s = time.perf_counter() - t0
    # warm the code paths (JIT compile or cache load, torch's lazy init) on a tiny copy,
    # so that the baseline holds the code and only the benchmarked arrays count as peak
    tiny = Runner(workloads.make_workload(name, "tiny"))
    tiny.forward()
    tiny.forward_backward()
    del tiny
    runner = Runner(w)
    load_before = _loadavg()
    baseline, peak_now = _start_peak()
    fwd = _time_calls(runner.forward, reps) if w.kind == "layer" else []
    both = _time_calls(runner.forward_backward, reps)
    peak = peak_now() - baseline
    if lib == "dgl":
        # Full-size check that DGL computed gatfast's function (same weights: outputs and gradients).
        # After the timed calls, so that the gatfast buffers it allocates and frees cannot be reused
        # by DGL's allocations inside the measured peak. A failure fails the run: no timing is kept.
        del runner
        extra["max_rel_err_vs_gatfast"] = reference_dgl.check_agreement(w)
    return {
        "lib": lib,
        "workload": name,
        "size": size,
        "nodes": int(w.num_nodes),
        "edges": int(w.graph.nnz),
        "threads": threads,
        "numba_threads": int(numba.get_num_threads()),
        "build_s": build_s,
        "forward_s": fwd,
        "forward_backward_s": both,
        "forward_median_ms": float(np.median(fwd) * 1e3) if fwd else None,
        "forward_backward_median_ms": float(np.median(both) * 1e3),
        "baseline_rss_mb": baseline,
        "peak_mb": peak,
        "allocator": "jemalloc" if "jemalloc" in os.environ.get("LD_PRELOAD", "") else "system",
        # gatfast's import sets PASSIVE unless the caller chose otherwise (every worker imports it)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        # 1-minute load average before and after (other processes compete for the 2 cores)
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
        **extra,
    }


# ---------------------------------------------------------------------- parent
def default_dgl_python():
    """The python of the environment ``bench/setup_dgl_env.sh`` makes by default, if it exists."""
    env_dir = os.environ.get("GATFAST_DGL_ENV") or str(Path.home() / ".cache" / "gatfast" / "dgl-venv")
    python = Path(env_dir) / "bin" / "python"
    return str(python) if python.exists() else None


def _spawn(lib, name, args, jemalloc):
    env = dict(os.environ)
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    if jemalloc:
        env["LD_PRELOAD"] = jemalloc
        if args.malloc_conf:
            env["MALLOC_CONF"] = args.malloc_conf
    python = sys.executable
    if lib == "dgl":
        # gatfast is not installed in the DGL environment: import it from this checkout
        python = args.dgl_python
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        env["DGLBACKEND"] = "pytorch"
    cmd = [python, str(Path(__file__).resolve()), "--worker", lib, name,
           "--size", args.size, "--reps", str(args.reps), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"worker {lib} {name} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fit_slope(degrees, times):
    """Least-squares slope of log(time) against log(degree)."""
    import numpy as np

    return float(np.polyfit(np.log(degrees), np.log(times), 1)[0])


def _ratios(g, ref):
    """gatfast's speed-ups and memory ratio against one reference library's result."""
    out = {"speedup": ref["forward_backward_median_ms"] / g["forward_backward_median_ms"]}
    if g["forward_median_ms"] and ref["forward_median_ms"]:
        out["forward_speedup"] = ref["forward_median_ms"] / g["forward_median_ms"]
    out["memory_ratio"] = g["peak_mb"] / ref["peak_mb"] if ref["peak_mb"] > 0 else None
    return out


def summarize(results, workload_names):
    """Rows of the table: one per workload, with ratios and target checks.

    ``speedup``, ``forward_speedup`` and ``memory_ratio`` are against PyG (the
    issue's targets are); the same against DGL carry a ``_dgl`` suffix.
    """
    by = {(r["workload"], r["lib"]): r for r in results}
    rows = []
    for name in workload_names:
        g = by.get((name, "gatfast"))
        ref_name = name.replace("-pairwise", "-linear")  # PyG and DGL have one backward
        p = by.get((ref_name, "pyg"))
        d = by.get((ref_name, "dgl"))
        if g is None:
            continue
        row = {"workload": name, "gatfast": g, "pyg": p, "dgl": d}
        if p is not None:
            row.update(_ratios(g, p))
            target = TARGETS.get(name)
            if target:
                met = row["speedup"] >= target["speedup"]
                if "memory_ratio" in target:
                    met = met and row["memory_ratio"] is not None and row["memory_ratio"] <= target["memory_ratio"]
                row["target"] = target
                row["target_met"] = met
        if d is not None:
            row.update({f"{k}_dgl": v for k, v in _ratios(g, d).items()})
        rows.append(row)
    return rows


CURVES = (("gatfast linear", "gatfast", "linear"), ("gatfast pairwise", "gatfast", "pairwise"),
          ("PyG GATv2Conv", "pyg", "linear"), ("DGL GATv2Conv", "dgl", "linear"))


def degree_curves(results):
    """(degrees, times in ms) of fwd+bwd for gatfast linear, gatfast pairwise, PyG and DGL."""
    curves = {}
    for label, lib, form in CURVES:
        pts = sorted(
            (r["workload"], r) for r in results
            if r["lib"] == lib and r["workload"].startswith("degree-") and r["workload"].endswith(form)
        )
        pts = sorted((int(n.split("-")[1]), r["forward_backward_median_ms"]) for n, r in pts)
        if len(pts) >= 2:
            curves[label] = ([d for d, _ in pts], [t for _, t in pts])
    return curves


def pairwise_extra(curves):
    """(degrees, ms) of the pairwise form's extra time over the linear form, where positive."""
    lin, pair = curves.get("gatfast linear"), curves.get("gatfast pairwise")
    if not lin or not pair or lin[0] != pair[0]:
        return None
    pts = [(d, p - q) for d, p, q in zip(lin[0], pair[1], lin[1]) if p > q]
    if len(pts) < 2:
        return None
    return [d for d, _ in pts], [t for _, t in pts]


def _fmt(v, spec=".1f"):
    return "—" if v is None else format(v, spec)


def markdown(rows, curves, meta):
    # DGL's columns only when the run has DGL results (older runs render as they did)
    refs = ["pyg"] + (["dgl"] if any(row.get("dgl") for row in rows) else [])
    names = " and ".join(LIB_NAMES[r] for r in refs)
    lines = [
        f"# gatfast vs {names} GATv2Conv",
        "",
        f"{meta['date']}, {meta['cpu']}, {meta['threads']} threads (Numba = BLAS = torch"
        f"{' = DGL OpenMP' if 'dgl' in refs else ''}), "
        f"float32, median of {meta['reps']} repetitions after warm-up, allocator: {meta['allocator']}, "
        f"size: {meta['size']}. Each (workload, library) ran in its own fresh process. "
        f"1-minute load average during the run: {meta['load']}.",
        "",
        "Forward + backward for the single-layer workloads; the full training step "
        "(forward, loss, backward, Adam) for `cora-train`. Peak = highest RSS during the timed calls minus "
        "the RSS just before them.",
    ]
    if "dgl" in refs:
        errs = [row["dgl"].get("max_rel_err_vs_gatfast") for row in rows if row.get("dgl")]
        errs = [e for e in errs if e is not None]
        lines += [
            "",
            f"DGL {meta.get('dgl', '')} runs in its own environment with gatfast's weights loaded into "
            "`dgl.nn.GATv2Conv` (plus gatfast's output bias, which DGL's layer lacks), on the same edges; "
            "after timing, its output and gradients were checked against gatfast's"
            + (f" (largest norm-wise relative difference {max(errs):.1e})" if errs else "")
            + ". Speed-up, memory ratio and targets without a suffix are against PyG (the issue's targets).",
        ]
    cols = ["workload", "nodes", "edges"]
    cols += ["gatfast fwd ms"] + [f"{LIB_NAMES[r]} fwd ms" for r in refs]
    cols += ["gatfast fwd+bwd ms"] + [f"{LIB_NAMES[r]} fwd+bwd ms" for r in refs]
    cols += ["speed-up"] + (["speed-up vs DGL"] if "dgl" in refs else [])
    cols += ["gatfast peak MB"] + [f"{LIB_NAMES[r]} peak MB" for r in refs]
    cols += ["memory ratio"] + (["memory ratio vs DGL"] if "dgl" in refs else [])
    cols += ["target", "met"]
    lines += ["", "| " + " | ".join(cols) + " |",
              "|---|" + "---:|" * (len(cols) - 3) + "---|---|"]
    for row in rows:
        g = row["gatfast"]
        ref = [row.get(r) for r in refs]
        target = row.get("target")
        target_s = ""
        if target:
            target_s = f">= {target['speedup']:g}x" + (
                f", mem <= {target['memory_ratio']:g}" if "memory_ratio" in target else ""
            )
        met = {True: "yes", False: "**no**"}.get(row.get("target_met"), "")
        cells = [row["workload"], f"{g['nodes']:,}", f"{g['edges']:,}"]
        cells += [_fmt(g["forward_median_ms"], ".2f")] + [_fmt(r and r["forward_median_ms"], ".2f") for r in ref]
        cells += [f"{g['forward_backward_median_ms']:.2f}"]
        cells += [_fmt(r and r["forward_backward_median_ms"], ".2f") for r in ref]
        cells += [_fmt(row.get("speedup"), ".2f")] + ([_fmt(row.get("speedup_dgl"), ".2f")] if "dgl" in refs else [])
        cells += [f"{g['peak_mb']:.0f}"] + [_fmt(r and r["peak_mb"], ".0f") for r in ref]
        cells += [_fmt(row.get("memory_ratio"), ".3f")]
        cells += [_fmt(row.get("memory_ratio_dgl"), ".3f")] if "dgl" in refs else []
        cells += [target_s, met]
        lines.append("| " + " | ".join(cells) + " |")
    if curves:
        lines += ["", "Degree sweep (2000 nodes, every in-degree N, 32 -> 32), fitted log-log slope of "
                  "fwd+bwd time against N:", "", "| curve | slope (all N) | slope (last two N) |",
                  "|---|---:|---:|"]
        for label, (deg, t) in curves.items():
            last = fit_slope(deg[-2:], t[-2:])
            lines.append(f"| {label} | {fit_slope(deg, t):.2f} | {last:.2f} |")
        extra = pairwise_extra(curves)
        if extra:
            deg, t = extra
            lines.append(f"| pairwise minus linear (the O(N²) Θ_R term alone) | {fit_slope(deg, t):.2f} "
                         f"| {fit_slope(deg[-2:], t[-2:]):.2f} |")
        lines += ["", "Both gatfast curves include a fixed cost per call (Python, kernel launches, the "
                  "node-wise products: about 1 ms here) that flattens them at small N; the difference of "
                  "the two forms isolates the pairwise term."]
    lines.append("")
    return "\n".join(lines)


def plot(curves, path):
    """Log-log plot of fwd+bwd time against degree; returns False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for label, (deg, t) in curves.items():
        ax.loglog(deg, t, "o-", label=f"{label} (slope {fit_slope(deg, t):.2f})")
    extra = pairwise_extra(curves)
    if extra:
        ax.loglog(*extra, "s--", color="gray",
                  label=f"pairwise minus linear (slope {fit_slope(*extra):.2f})")
    ax.set_xlabel("in-degree N (2000 nodes)")
    ax.set_ylabel("forward + backward time (ms)")
    ax.set_title("GATv2 layer, 32 -> 32, float32")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        atomic_save_figure(fig, path)
    finally:
        plt.close(fig)
    return True


def main(argv=None):
    import workloads
    from reference import pyg_available

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=workloads.SIZES, default="full")
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per measurement (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(workloads.WORKLOADS),
                        help="comma-separated names (default: all)")
    parser.add_argument("--libs", default="gatfast,pyg,dgl",
                        help="comma-separated, from gatfast, pyg, dgl (default: all three; pyg and dgl are "
                             "left out, with a line on stderr, when not installed)")
    parser.add_argument("--dgl-python", default=None, metavar="PATH",
                        help="python of the DGL 2.1 environment (bench/setup_dgl_env.sh); default: "
                             "$GATFAST_DGL_ENV/bin/python, else ~/.cache/gatfast/dgl-venv/bin/python, if it exists")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--jemalloc", action="store_true",
                        help="LD_PRELOAD libjemalloc.so.2 (Debian package libjemalloc2) in every worker")
    parser.add_argument("--malloc-conf", default=None,
                        help="MALLOC_CONF for jemalloc in every worker, e.g. 'dirty_decay_ms:-1,muzzy_decay_ms:-1' "
                             "(keep freed pages: PyG then stops re-faulting its E x C tensors)")
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite compare.md and the plot from a compare.json of an earlier run")
    parser.add_argument("--worker", nargs=2, metavar=("LIB", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")

    if args.worker:
        lib, name = args.worker
        print(json.dumps(run_worker(lib, name, args.size, args.reps, args.threads)))
        return 0

    if args.render:
        raw = json.loads(Path(args.render).read_text())
        names = list(dict.fromkeys(r["workload"] for r in raw["results"]))
        write_outputs(raw["results"], names, raw["meta"], Path(args.out))
        return 0

    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in workloads.WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {list(workloads.WORKLOADS)}")
    libs = [lib for lib in args.libs.split(",") if lib]
    bad = [lib for lib in libs if lib not in LIBS]
    if bad:
        parser.error(f"unknown libraries {bad}; choose from {list(LIBS)}")
    if "pyg" in libs and not pyg_available():
        print("torch_geometric is not installed: no PyG columns", file=sys.stderr)
        libs = [lib for lib in libs if lib != "pyg"]
    if args.dgl_python is not None:
        if not os.access(args.dgl_python, os.X_OK):
            parser.error(f"--dgl-python: {args.dgl_python} is not an executable")
    elif "dgl" in libs:
        args.dgl_python = default_dgl_python()
        if args.dgl_python is None:
            print("no DGL environment found (bash bench/setup_dgl_env.sh, or --dgl-python): no DGL columns",
                  file=sys.stderr)
            libs = [lib for lib in libs if lib != "dgl"]
    jemalloc = None
    if args.jemalloc:
        jemalloc = next((p for p in JEMALLOC_PATHS if os.path.exists(p)), None)
        if jemalloc is None:
            parser.error("--jemalloc: libjemalloc.so.2 not found (apt-get install libjemalloc2)")
    elif args.malloc_conf:
        parser.error("--malloc-conf needs --jemalloc")

    results = []
    for name in names:
        for lib in libs:
            if lib in ("pyg", "dgl") and name.endswith("-pairwise"):
                continue  # identical to the linear run for PyG and DGL
            r = _spawn(lib, name, args, jemalloc)
            results.append(r)
            fwd = r["forward_median_ms"]
            print(f"{name:22s} {lib:8s} fwd {_fmt(fwd, '9.2f')} ms  fwd+bwd "
                  f"{r['forward_backward_median_ms']:9.2f} ms  peak {r['peak_mb']:8.1f} MB", flush=True)

    import numba
    import numpy as np

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": _cpu_name(),
        "threads": args.threads,
        "reps": args.reps,
        "size": args.size,
        "allocator": (f"jemalloc (LD_PRELOAD, both sides{', MALLOC_CONF=' + args.malloc_conf if args.malloc_conf else ''})"
                      if jemalloc else "system malloc"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "command": " ".join([Path(sys.executable).name, "bench/compare.py", *(argv or sys.argv[1:])]),
    }
    try:
        import torch
        import torch_geometric

        meta["torch"] = torch.__version__
        meta["torch_geometric"] = torch_geometric.__version__
    except ImportError:
        pass
    dgl_runs = [r for r in results if r["lib"] == "dgl"]
    if dgl_runs:
        v = dgl_runs[0]["versions"]
        meta["dgl"] = (f"{v['dgl']} (torch {v['torch']}, numpy {v['numpy']}, numba {v['numba']}, "
                       f"python {v['python']})")
        meta["dgl_python"] = args.dgl_python
    loads = [v for r in results for v in (r.get("loadavg_before"), r.get("loadavg_after")) if v is not None]
    meta["load"] = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "unknown"
    write_outputs(results, names, meta, Path(args.out))
    return 0


def write_outputs(results, names, meta, out):
    """compare.md, compare.json and degree_sweep.png in ``out``; prints the table."""
    rows = summarize(results, names)
    curves = degree_curves(results)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, curves, meta)
    atomic_write_text(out / "compare.md", table)
    slopes = {label: {"all": fit_slope(d, t), "last_two": fit_slope(d[-2:], t[-2:])}
              for label, (d, t) in curves.items()}
    extra = pairwise_extra(curves)
    if extra:
        slopes["pairwise minus linear"] = {"all": fit_slope(*extra), "last_two": fit_slope(extra[0][-2:], extra[1][-2:])}
    raw = {"meta": meta, "results": results, "slopes": slopes,
           "summary": [{k: v for k, v in row.items() if k not in LIBS} for row in rows]}
    atomic_write_text(out / "compare.json", json.dumps(raw, indent=1))
    if curves and not plot(curves, out / "degree_sweep.png"):
        print("matplotlib is not installed: no degree_sweep.png", file=sys.stderr)
    print()
    print(table)


def _cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
