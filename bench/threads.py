"""Thread scaling: gatfast and PyG on the same workloads at 1, 2, 4, ... threads, in one run.

For each thread count, every (workload, library) pair runs in a fresh
worker process of ``compare.py`` (``--rounds`` fresh processes, the cell's
time the median of theirs; the same worker: the PyG side is checked
against gatfast's outputs before it is timed; Numba, BLAS, OpenMP and torch
at that many threads; ``OMP_WAIT_POLICY=PASSIVE``), and the roofline probe
measures the machine's rates at that many threads, so each gatfast time is
also stated as a multiple of its bound at that thread count. The report
gives, per workload, each library's time, its speed-up over its own
1-thread time, and gatfast's lead over PyG at every count.

Why ``--rounds``: on a lent 16-core machine, fresh 1-thread processes of
``large`` took 479-889 ms (medians of 16 processes, whichever core they
were pinned to), while 16-thread processes took 51-58 ms; one process per
cell then makes the speed-up anything from 9× to 15×. The table gives the
range of the rounds' medians beside their median.

The goal of issue 14 it checks: ``large`` forward + backward at least 12x
faster on 16 threads than on 1, on a 16-core machine.

Usage::

    python bench/threads.py                                  # 1, 2, 4, ... up to the usable cores
    python bench/threads.py --threads 1,2,4,8,16 --workloads large,small-batch --reps 7
    python bench/threads.py --threads 1,16 --workloads large --libs gatfast --rounds 5
    python bench/threads.py --size tiny --reps 2             # a smoke run (seconds)
    python bench/threads.py --update-results                 # -> bench/results/threads.{json,md}

Output (atomically, into ``--out``, default ``runs/bench/threads/``, untracked):
``threads.md`` and ``threads.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import outdirs  # noqa: E402
from comparelib.runs import JEMALLOC_PATHS, add_roofline, roofline_probe, run_all  # noqa: E402

from gatfast._cpus import usable_cpus  # noqa: E402

COMPARE = HERE / "compare.py"
LIBS = ("gatfast", "pyg")
DEFAULT_WORKLOADS = "large,small-batch"
#: issue 14: ``large`` forward + backward on 16 threads against 1 thread
GOAL_WORKLOAD, GOAL_THREADS, GOAL_SPEEDUP = "large", 16, 12.0


def default_counts(cpus):
    """1, 2, 4, ... up to ``cpus``, and ``cpus`` itself."""
    counts, n = [], 1
    while n < cpus:
        counts.append(n)
        n *= 2
    return counts + [cpus]


def parse_counts(text):
    try:
        counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected thread counts such as 1,2,4 (each >= 1), got {text!r}")
    return sorted(set(counts))


def parse_args(argv):
    import workloads

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    outdirs.add_options(parser, "threads")
    parser.add_argument(
        "--threads",
        type=parse_counts,
        default=None,
        help="comma-separated thread counts (default: 1, 2, 4, ... up to the usable cores)",
    )
    parser.add_argument(
        "--workloads",
        default=DEFAULT_WORKLOADS,
        help=f"comma-separated, from {', '.join(workloads.WORKLOADS)} (default: {DEFAULT_WORKLOADS})",
    )
    parser.add_argument("--libs", default=",".join(LIBS), help="gatfast and/or pyg (default: both)")
    parser.add_argument("--size", choices=workloads.SIZES, default="full")
    parser.add_argument("--reps", type=int, default=7, help="timed samples per measurement (median)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="fresh processes per cell (the median of their medians)"
    )
    parser.add_argument(
        "--jemalloc", action="store_true", help="LD_PRELOAD Debian's libjemalloc2 in every worker"
    )
    parser.add_argument(
        "--no-roofline", action="store_true", help="skip the machine probes (no bound columns)"
    )
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    cpus = usable_cpus()
    args.threads = args.threads or default_counts(cpus)
    if max(args.threads) > cpus:
        parser.error(f"--threads: at most {cpus} (the usable CPUs), got {max(args.threads)}")
    args.names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in args.names if n not in workloads.WORKLOADS or n in workloads.MICRO_WORKLOADS]
    if unknown or not args.names:
        parser.error(
            f"--workloads: unknown or per-call workloads {unknown}; choose from "
            f"{[n for n in workloads.WORKLOADS if n not in workloads.MICRO_WORKLOADS]}"
        )
    args.lib_list = [lib for lib in args.libs.split(",") if lib]
    if not args.lib_list or any(lib not in LIBS for lib in args.lib_list):
        parser.error(f"--libs: choose from {list(LIBS)}, got {args.libs!r}")
    args.jemalloc_path = None
    if args.jemalloc:
        args.jemalloc_path = next((p for p in JEMALLOC_PATHS if os.path.exists(p)), None)
        if args.jemalloc_path is None:
            parser.error("--jemalloc: libjemalloc.so.2 not found (apt-get install libjemalloc2)")
    args.out = outdirs.resolve_out(parser, args, "threads", args.size)
    return args


def measure(args, log):
    """Yields ``(threads, results, rates)``: compare.py's workers at each thread count, with that count's probe."""
    from reference import pyg_available

    libs = list(args.lib_list)
    if "pyg" in libs and not pyg_available():
        log("torch_geometric is not installed: no PyG columns")
        libs.remove("pyg")
    for n in args.threads:
        worker_args = argparse.Namespace(
            threads=n, size=args.size, reps=args.reps, rounds=args.rounds, dgl_python=None, malloc_conf=None
        )
        log(f"{n} thread{'s' if n > 1 else ''}")
        rates = None if args.no_roofline else roofline_probe(n, args.size, log)
        results = run_all(COMPARE, args.names, libs, worker_args, args.jemalloc_path, REPO)
        if rates is not None:
            add_roofline(results, rates)
        yield n, results, rates


def table_rows(runs, names):
    """One row per (workload, thread count): each library's time, speed-up over 1 thread, and gatfast's lead."""

    def find(results, name, lib):  # None where a worker gave no result
        return next((r for r in results if r and r["workload"] == name and r["lib"] == lib), None)

    rows = []
    first = min(runs)
    for name in names:
        for n, (results, _) in sorted(runs.items()):
            row = {"workload": name, "threads": n}
            for lib in LIBS:
                r, r1 = find(results, name, lib), find(runs[first][0], name, lib)
                if r is None:
                    continue
                ms = r["forward_backward_median_ms"]
                rounds = [x["forward_backward_median_ms"] for x in r.get("rounds", [r])]
                row[lib] = {
                    "ms": ms,
                    "range_ms": [min(rounds), max(rounds)],
                    "speedup": r1["forward_backward_median_ms"] / ms if first == 1 and r1 else None,
                }
                if lib == "gatfast" and r.get("roofline"):
                    row[lib]["over_bound"] = ms / r["roofline"]["bound_ms"]
            if "gatfast" in row and "pyg" in row:
                row["lead"] = row["pyg"]["ms"] / row["gatfast"]["ms"]
            rows.append(row)
    return rows


def _cell(v, fmt):
    return "—" if v is None else format(v, fmt)


def _ms(lib_row, fmt=".2f"):
    """The cell's time, with the range of its rounds where they differ."""
    if not lib_row:
        return "—"
    lo, hi = lib_row.get("range_ms", (None, None))
    spread = f" ({lo:{fmt}}-{hi:{fmt}})" if lo is not None and lo != hi else ""
    return format(lib_row["ms"], fmt) + spread


def markdown(rows, meta):
    lines = [
        "# Thread scaling: forward + backward, gatfast and PyG",
        "",
        f"{meta['date']}, {meta['cpu']}, {meta['simd']}, {meta['allocator']}, numba {meta['numba']}"
        + (f", torch {meta['torch']}, torch_geometric {meta['torch_geometric']}" if "torch" in meta else "")
        + f". `{meta['command']}`. Median of {meta['reps']} samples per process; each (thread count, workload, "
        f"library) in {_rounds(meta)}, in brackets the range of their medians where there are several. "
        "*speed-up*: over the same library's 1-thread time; *× bound*: gatfast's time over the roofline "
        "bound at that thread count (the machine's rates measured at that count).",
        "",
        "| workload | threads | gatfast (ms) | speed-up | × bound | PyG (ms) | speed-up | gatfast vs PyG |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        g, p = row.get("gatfast", {}), row.get("pyg", {})
        lines.append(
            f"| {row['workload']} | {row['threads']} | {_ms(g)} | {_cell(g.get('speedup'), '.2f')}"
            f" | {_cell(g.get('over_bound'), '.2f')} | {_ms(p)} | {_cell(p.get('speedup'), '.2f')}"
            f" | {_cell(row.get('lead'), '.2f')} |"
        )
    goal = next(
        (
            r
            for r in rows
            if r["workload"] == GOAL_WORKLOAD
            and r["threads"] == GOAL_THREADS
            and r.get("gatfast", {}).get("speedup") is not None
        ),
        None,
    )
    lines.append("")
    if goal is None:
        lines.append(
            f"Goal ({GOAL_WORKLOAD}, {GOAL_THREADS} threads ≥ {GOAL_SPEEDUP:g}× 1 thread): not measured "
            "in this run."
        )
    else:
        s = goal["gatfast"]["speedup"]
        lines.append(
            f"Goal ({GOAL_WORKLOAD}, {GOAL_THREADS} threads ≥ {GOAL_SPEEDUP:g}× 1 thread): "
            f"{s:.2f}×, {'met' if s >= GOAL_SPEEDUP else 'not met'}." + _goal_context(rows, goal)
        )
    for n, summary in meta["rates"].items():
        lines.append(f"- rates at {n} threads: {summary}")
    lines.append("")
    return "\n".join(lines)


def _goal_context(rows, goal):
    """The speed-up's range over the rounds, and how far the roofline bound itself falls, where known."""
    one = next(r for r in rows if r["workload"] == goal["workload"] and r["threads"] == 1)["gatfast"]
    many = goal["gatfast"]
    text = ""
    spread1, spread = one.get("range_ms"), many.get("range_ms")
    if spread1 and spread and (spread1[0] != spread1[1] or spread[0] != spread[1]):
        text += f" Over the rounds' medians: {spread1[0] / spread[1]:.2f}-{spread1[1] / spread[0]:.2f}×."
    if one.get("over_bound") and many.get("over_bound"):
        fall = (one["ms"] / one["over_bound"]) / (many["ms"] / many["over_bound"])
        text += f" The roofline bound itself falls {fall:.2f}× from 1 to {goal['threads']} threads."
    return text


def _rounds(meta):
    n = meta.get("rounds", 1)
    return "a fresh process" if n == 1 else f"{n} fresh processes (the cell: the median of their medians)"


def make_meta(args, argv, runs):
    import numba
    from comparelib.runs import pyg_versions, rates_summary
    from rooflib.cpu import CPU

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": f"{CPU['model']} ({os.cpu_count()} CPUs, {usable_cpus()} usable)",
        "simd": f"{CPU['simd']} ({CPU['simd_bits']}-bit)",
        "threads": args.threads,
        "reps": args.reps,
        "rounds": args.rounds,
        "size": args.size,
        "allocator": "jemalloc (LD_PRELOAD, every worker)" if args.jemalloc_path else "system malloc",
        "numba": numba.__version__,
        "command": " ".join(["python", "bench/threads.py", *(sys.argv[1:] if argv is None else argv)]),
        "rates": {n: rates_summary(rates) for n, (_, rates) in runs.items() if rates is not None},
        **pyg_versions(),
    }


def main(argv=None):
    args = parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    runs = {}
    for n, results, rates in measure(args, log):
        runs[n] = (results, rates)
        # the report so far, rewritten after each thread count: a run cut short keeps what it measured
        meta = make_meta(args, argv, runs)
        rows = table_rows(runs, args.names)
        text = markdown(rows, meta)
        if args.size == "tiny":
            text = f"**{outdirs.SMOKE_TITLE}**\n\n" + text
        raw = {
            "meta": meta,
            "rows": rows,
            "results": {str(k): res for k, (res, _) in runs.items()},
        }
        outdirs.write_report(args.out, "threads", raw, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
