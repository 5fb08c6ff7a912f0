"""gatfast against PyTorch Geometric's and DGL's GATv2Conv, side by side, in one run.

Every (workload, library) pair runs in its own fresh subprocess, one after
the other (never in parallel), with Numba, BLAS, OpenMP and torch limited to
the same number of threads and ``OMP_WAIT_POLICY=PASSIVE`` in every worker's
environment. DGL 2.1 runs under the python of its own environment
(``bench/setup_dgl_env.sh``, ``--dgl-python``); it is left out, with one line
on stderr, when that environment is not found, and on the edge-feature
workloads (its ``GATv2Conv`` has no edge features).

The gatfast worker of a workload saves gatfast's outputs and gradients; each
PyG or DGL worker, which loads gatfast's weights, checks before timing that it
computes the same on the full workload (``bench/agreement.py``) and fails the
run otherwise. Then each worker warms up and times the forward pass and the
forward + backward pass (the full step for the training workloads): the
median of ``--reps`` samples; for ``scene`` (per-call overhead) each sample
is a tight loop of many calls. Peak memory: see ``comparelib/worker.py``.

At the start a few seconds of machine probes (``bench/rooflib``) give the
rates of the roofline columns: the bound of each modelled workload's whole
step and gatfast's measured time over it.

Outputs (written atomically into ``--out``, default ``runs/bench/compare/``,
untracked; into ``bench/results/`` only with ``--update-results``):
``compare.md`` (the tables), ``compare.json`` (raw numbers) and, if
matplotlib is installed, ``degree_sweep.png`` (time against in-degree,
log-log, with the fitted slopes). A ``--size tiny`` run is titled as a smoke
run. On a terminal a progress bar counts the runs.

Usage::

    python bench/compare.py                      # all workloads, full size -> runs/bench/compare/
    python bench/compare.py --size tiny --reps 3 # seconds, e.g. for CI
    python bench/compare.py --jemalloc           # LD_PRELOAD Debian's libjemalloc2 (every side)
    python bench/compare.py --libs gatfast,dgl --dgl-python /path/to/dgl-venv/bin/python
    python bench/compare.py --jemalloc --malloc-conf dirty_decay_ms:-1,muzzy_decay_ms:-1 --update-results
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import outdirs  # noqa: E402
from comparelib.report import degree_curves, fit_slope  # noqa: E402, F401  (re-exported for tests and users)
from comparelib.report import markdown as _markdown  # noqa: E402
from comparelib.runs import (  # noqa: E402
    JEMALLOC_PATHS,
    LIBS,
    add_roofline,
    default_dgl_python,
    make_meta,
    roofline_probe,
    run_all,
    write_outputs,
)
from comparelib.targets import TARGETS, summarize  # noqa: E402, F401


def markdown(rows, curves, meta):
    """The report of ``rows`` (``summarize``), the per-call workloads in their own table."""
    import workloads

    return _markdown(rows, curves, meta, micro_names=workloads.MICRO_WORKLOADS)


def parse_args(argv):
    import workloads

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=workloads.SIZES, default="full")
    parser.add_argument("--reps", type=int, default=20, help="timed samples per measurement (median)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each (workload, library), alternating the libraries' order within each "
                             "workload; each reports the median of its rounds (default 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(workloads.WORKLOADS),
                        help="comma-separated names (default: all)")
    parser.add_argument("--libs", default="gatfast,pyg,dgl",
                        help="comma-separated, from gatfast, pyg, dgl (default: all three; pyg and dgl are "
                             "left out, with a line on stderr, when not installed)")
    parser.add_argument("--dgl-python", default=None, metavar="PATH",
                        help="python of the DGL 2.1 environment (bench/setup_dgl_env.sh); default: "
                             "$GATFAST_DGL_ENV/bin/python, else ~/.cache/gatfast/dgl-venv/bin/python, if it exists")
    outdirs.add_options(parser, "compare")
    parser.add_argument("--jemalloc", action="store_true",
                        help="LD_PRELOAD libjemalloc.so.2 (Debian package libjemalloc2) in every worker")
    parser.add_argument("--malloc-conf", default=None,
                        help="MALLOC_CONF for jemalloc in every worker, e.g. 'dirty_decay_ms:-1,muzzy_decay_ms:-1' "
                             "(keep freed pages: PyG then stops re-faulting its E x C tensors)")
    parser.add_argument("--no-roofline", action="store_true",
                        help="skip the machine probe and the roofline columns")
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite compare.md and the plot from a compare.json of an earlier run")
    parser.add_argument("--worker", nargs=2, metavar=("LIB", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--reference", help=argparse.SUPPRESS)  # a peer worker: gatfast's outputs to check
    parser.add_argument("--save-reference", help=argparse.SUPPRESS)  # the gatfast worker: where to save them
    parser.add_argument("--reference-only", action="store_true", help=argparse.SUPPRESS)  # save, time nothing
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.worker:
        return parser, args
    args.out = outdirs.resolve_out(parser, args, "compare", args.size)
    return parser, args


def _check_dgl_python(parser, python):
    """Refuse, before anything runs, a DGL environment whose python cannot import what the DGL worker
    imports (an environment made by hand without ``bench/setup_dgl_env.sh`` lacks numba, for one)."""
    import subprocess

    env = dict(os.environ, DGLBACKEND="pytorch")
    try:
        probe = subprocess.run([python, "-c", "import dgl, numba, numpy, scipy, threadpoolctl, torch"],
                               env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        parser.error(f"--dgl-python: {python} could not be run ({err})")
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        parser.error(f"--dgl-python: {python} cannot import the DGL worker's modules ({why}); "
                     "make the environment with bash bench/setup_dgl_env.sh, or leave DGL out (--libs gatfast,pyg)")


def _choose_libs(parser, args):
    from reference import pyg_available

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
    if "dgl" in libs:
        _check_dgl_python(parser, args.dgl_python)
    return libs


def main(argv=None):
    import workloads

    parser, args = parse_args(argv)
    if args.worker:
        from comparelib import worker

        lib, name = args.worker
        if args.reference_only:  # gatfast's outputs for the peers, nothing timed
            worker.save_reference(name, args.size, args.save_reference)
            return 0
        print(json.dumps(worker.run_worker(lib, name, args.size, args.reps, args.threads,
                                           reference=args.reference, save_to=args.save_reference)))
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
    libs = _choose_libs(parser, args)
    jemalloc = None
    if args.jemalloc:
        jemalloc = next((p for p in JEMALLOC_PATHS if os.path.exists(p)), None)
        if jemalloc is None:
            parser.error("--jemalloc: libjemalloc.so.2 not found (apt-get install libjemalloc2)")
    elif args.malloc_conf:
        parser.error("--malloc-conf needs --jemalloc")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    rates = None if args.no_roofline else roofline_probe(args.threads, args.size, log)
    results = run_all(Path(__file__).resolve(), names, libs, args, jemalloc, REPO)
    if rates is not None:
        add_roofline(results, rates)
    write_outputs(results, names, make_meta(args, argv, jemalloc, results, rates), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
