"""The parent side of ``compare.py``: the plan of runs, one fresh worker process per run, the machine
probe of the roofline columns, the run's metadata and the output files."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from .report import degree_curves, markdown, plot, slopes
from .targets import summarize
from .worker import LIB_NAMES, thread_env

LIBS = ("gatfast", "pyg", "dgl")
JEMALLOC_PATHS = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2")
OMP_WAIT_POLICY = "PASSIVE"  # in every worker's environment, all libraries alike


def default_dgl_python():
    """The python of the environment ``bench/setup_dgl_env.sh`` makes by default, if it exists."""
    env_dir = os.environ.get("GATFAST_DGL_ENV") or str(Path.home() / ".cache" / "gatfast" / "dgl-venv")
    python = Path(env_dir) / "bin" / "python"
    return str(python) if python.exists() else None


def plan(names, libs):
    """``[(workload, [libraries in order])]``: gatfast first; no peer on the pairwise form (identical to
    the linear run for them), no DGL on edge features (its GATv2Conv has none)."""
    import workloads

    out = []
    for name in names:
        runs = [lib for lib in LIBS if lib in libs]
        if name.endswith("-pairwise"):
            runs = [lib for lib in runs if lib == "gatfast"]
        if not workloads.dgl_can_run(name):
            runs = [lib for lib in runs if lib != "dgl"]
        out.append((name, runs))
    return out


def worker_env(lib, args, jemalloc, repo):
    env = thread_env(args.threads)
    env["OMP_WAIT_POLICY"] = OMP_WAIT_POLICY
    if jemalloc:
        env["LD_PRELOAD"] = jemalloc
        if args.malloc_conf:
            env["MALLOC_CONF"] = args.malloc_conf
    if lib == "dgl":
        # gatfast is not installed in the DGL environment: import it from this checkout
        env["PYTHONPATH"] = os.pathsep.join([str(repo), *filter(None, [env.get("PYTHONPATH")])])
        env["DGLBACKEND"] = "pytorch"
    return env


def spawn(script, lib, name, args, jemalloc, repo, extra=(), result=True):
    """Run one worker of ``script`` in a fresh process; its result is the last line of its stdout (JSON).

    ``result=False``: a worker that prints no result (``--reference-only``); returns None.
    """
    python = args.dgl_python if lib == "dgl" else sys.executable
    cmd = [python, str(script), "--worker", lib, name, "--size", args.size, "--reps", str(args.reps),
           "--threads", str(args.threads), *extra]
    proc = subprocess.run(cmd, env=worker_env(lib, args, jemalloc, repo), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"worker {lib} {name} failed with exit code {proc.returncode}")
    if not result:
        return None
    return parse_result(proc.stdout, f"worker {lib} {name}")


def parse_result(stdout, who):
    """The JSON object on the last line of a worker's ``stdout``; RuntimeError naming ``who`` if there is none
    (a worker that exits 0 without its result must not pass as a run with no figures)."""
    lines = stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        tail = lines[-1][:200] if lines else "nothing"
        raise RuntimeError(f"{who} exited 0 without a JSON result on its last line of output (got {tail!r})")
    return value


class Progress:
    """A tqdm bar over the (workload, library) runs on a terminal; plain lines otherwise."""

    def __init__(self, total, stream=None):
        self.stream = stream or sys.stderr
        self.bar = None
        if self.stream.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="run", file=self.stream, dynamic_ncols=True)
            except ImportError:
                pass

    def start(self, name, lib):
        if self.bar is not None:
            self.bar.set_description(f"{name} {LIB_NAMES[lib]}")

    def done(self, line):
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)  # result lines on stdout, as without the bar
            self.bar.update(1)
        else:
            print(line, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def result_line(r):
    scale, unit = (1e3, "µs") if r["workload"] in _micro() else (1.0, "ms")
    fwd = "—" if r["forward_median_ms"] is None else f"{r['forward_median_ms'] * scale:9.2f}"
    return (f"{r['workload']:20s} {r['lib']:8s} fwd {fwd:>9s} {unit}  fwd+bwd "
            f"{r['forward_backward_median_ms'] * scale:9.2f} {unit}  peak {r['peak_mb']:8.1f} MB")


def _micro():
    import workloads

    return workloads.MICRO_WORKLOADS


def run_all(script, names, libs, args, jemalloc, repo):
    """Every planned run, one at a time; a peer is checked against the reference the gatfast run saved.

    With ``args.rounds`` > 1 each workload's libraries run that many times, every run a fresh process,
    in alternating order (gatfast first, then last, ...), before the next workload: a slow phase of a
    shared machine, which lasts minutes, then falls on every library of the workload rather than on
    one. Each (workload, library) reports the median of its rounds (:func:`combine_rounds`).
    """
    rounds = getattr(args, "rounds", 1)
    runs = plan(names, libs)
    progress = Progress(sum(len(r) for _, r in runs) * rounds)
    refdir = Path(tempfile.mkdtemp(prefix="gatfast-compare-ref-"))
    results = []
    try:
        for name, libs_here in runs:
            peers = [lib for lib in libs_here if lib != "gatfast"]
            ref = refdir / f"{name}.npz"
            if peers and "gatfast" not in libs_here:  # gatfast's outputs without timing gatfast
                spawn(script, "gatfast", name, args, jemalloc, repo, ["--reference-only", "--save-reference", str(ref)],
                      result=False)
            got = {lib: [] for lib in libs_here}
            for k in range(rounds):
                # the first round in plan order: gatfast's run saves the reference the peers check against
                for lib in libs_here if k % 2 == 0 else libs_here[::-1]:
                    progress.start(name, lib)
                    if lib == "gatfast":
                        extra = ["--save-reference", str(ref)] if peers and k == 0 else []
                    else:
                        extra = ["--reference", str(ref)]
                    r = spawn(script, lib, name, args, jemalloc, repo, extra)
                    got[lib].append(r)
                    progress.done(result_line(r))
            results.extend(combine_rounds(got[lib]) for lib in libs_here)
            ref.unlink(missing_ok=True)
    finally:
        progress.close()
        shutil.rmtree(refdir, ignore_errors=True)
    return results


#: A result's fields that are the median of its rounds (the others are the first round's, but for the
#: largest difference from gatfast's outputs, the largest of the rounds').
ROUND_MEDIANS = ("forward_median_ms", "forward_backward_median_ms", "peak_mb")


def combine_rounds(runs):
    """One result from the rounds of a (workload, library): the first round's, with the median of the
    rounds in :data:`ROUND_MEDIANS` (the median of the round medians, not of the pooled samples), every
    round's figures under ``"rounds"``, the timed samples of all rounds, and the load range of all
    rounds. A single run is returned as it is."""
    import numpy as np

    if len(runs) == 1:
        return runs[0]
    out = dict(runs[0])
    for key in ROUND_MEDIANS:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = float(np.median(values)) if values else None
    errs = [r["max_rel_err_vs_gatfast"] for r in runs if r.get("max_rel_err_vs_gatfast") is not None]
    if errs:
        out["max_rel_err_vs_gatfast"] = max(errs)
    for key in ("forward_s", "forward_backward_s"):
        out[key] = None if runs[0].get(key) is None else [v for r in runs for v in r[key]]
    # the load range of all rounds (make_meta reports the lowest "before" and the highest "after")
    before = [r["loadavg_before"] for r in runs if r.get("loadavg_before") is not None]
    after = [r["loadavg_after"] for r in runs if r.get("loadavg_after") is not None]
    out["loadavg_before"] = min(before) if before else None
    out["loadavg_after"] = max(after) if after else None
    out["rounds"] = [{key: r.get(key) for key in ROUND_MEDIANS} for r in runs]
    return out


def roofline_probe(threads, size, log):
    """This machine's rates for the roofline columns: a few seconds of streams, gathers and flops."""
    from rooflib.cpu import CPU
    from rooflib.machine import Machine
    from rooflib.measure import Threads

    cache = CPU["l3_bytes"] or 32 << 20
    with Threads(threads) as th:
        machine = Machine(th.n, "tiny" if size == "tiny" else "quick", 3, cache).measure_quick(log)
    return machine.rates()


def add_roofline(results, rates):
    """Each gatfast layer result gets the roofline bound of its whole step (from its ``dims``)."""
    from rooflib.kernels import step_bound
    from rooflib.model import Dims

    for r in results:
        if r["lib"] == "gatfast" and r.get("dims"):
            b = step_bound(Dims(**r["dims"]), rates)
            r["roofline"] = {"bound_ms": b["bound_s"] * 1e3, "in_cache": b["in_cache"],
                             "footprint_mb": b["footprint_bytes"] / 2**20,
                             "kernels_ms": {k: v * 1e3 for k, v in b["kernels"].items()}}


def rates_summary(rates):
    return (f"read {rates.read_bps / 1e9:.1f} GB/s, write {rates.write_bps / 1e9:.1f} GB/s, "
            f"{rates.flops_numba / 1e9:.0f} GFLOP/s mul+add and {rates.flops_blas / 1e9:.0f} GFLOP/s FMA at "
            f"{rates.threads} threads, cache {rates.cache_bytes / 2**20:.0f} MiB")


def pyg_versions():
    """``{"torch": ..., "torch_geometric": ...}`` of this environment, or ``{}`` without PyG."""
    try:
        import torch
        import torch_geometric
    except ImportError:
        return {}
    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__}


def make_meta(args, argv, jemalloc, results, rates):
    import numba
    import numpy as np
    from rooflib.cpu import CPU

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": f"{CPU['model']} ({os.cpu_count()} CPUs)",
        "simd": f"{CPU['simd']} ({CPU['simd_bits']}-bit)",
        "threads": args.threads,
        "reps": args.reps,
        "rounds": getattr(args, "rounds", 1),
        "size": args.size,
        "allocator": (f"jemalloc (LD_PRELOAD, every worker{', MALLOC_CONF=' + args.malloc_conf if args.malloc_conf else ''})"
                      if jemalloc else "system malloc"),
        "omp_wait_policy": OMP_WAIT_POLICY,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "command": " ".join(["python", "bench/compare.py", *(sys.argv[1:] if argv is None else argv)]),
    }
    meta.update(pyg_versions())
    dgl_runs = [r for r in results if r["lib"] == "dgl"]
    if dgl_runs:
        v = dgl_runs[0]["versions"]
        meta["dgl"] = (f"{v['dgl']} (torch {v['torch']}, numpy {v['numpy']}, numba {v['numba']}, "
                       f"python {v['python']})")
        meta["dgl_python"] = args.dgl_python
    if rates is not None:
        meta["roofline"] = {"rates": asdict(rates), "summary": rates_summary(rates)}
    loads = [v for r in results for v in (r.get("loadavg_before"), r.get("loadavg_after")) if v is not None]
    meta["load"] = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "unknown"
    return meta


def write_outputs(results, names, meta, out):
    """compare.md, compare.json and degree_sweep.png in ``out``; prints the table."""
    import workloads

    from gatfast._io import atomic_write_text

    rows = summarize(results, names)
    curves = degree_curves(results)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, curves, meta, micro_names=workloads.MICRO_WORKLOADS)
    atomic_write_text(out / "compare.md", table)
    raw = {"meta": meta, "results": results, "slopes": slopes(curves),
           "summary": [{k: v for k, v in row.items() if k not in LIBS} for row in rows]}
    atomic_write_text(out / "compare.json", json.dumps(raw, indent=1))
    if curves and not plot(curves, out / "degree_sweep.png"):
        print("matplotlib is not installed: no degree_sweep.png", file=sys.stderr)
    print()
    print(table)
