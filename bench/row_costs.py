"""Where a batch of small graphs spends its step: a cost per node, or per edge.

``small-batch`` (1024 graphs of 8-32 nodes, 16 -> 1 x 32) is the workload
furthest from its goal on most machines, and its kernels do little work per
edge. This separates each kernel's time into a part per node (rows, sources,
the dense products' rows, each call's fixed cost spread over the nodes) and
a part per edge: on the nodes of ``small-batch`` it builds graphs where every
node has in-degree ``d`` for each ``d`` of ``--degrees``, each row's sources
taken from the same row of ``small-batch``'s graph (repeated in turn where
``d`` is larger), so the edges stay inside the small graphs, and it times the
layer's forward + backward on each, one thread, every kernel that runs
through ``gatfast._runtime``'s ``run_rows`` / ``run_chunks`` on its own line. The graphs alternate
within each round; a kernel's time is the median over the rounds of its mean
per step. A least-squares line through each kernel's times against the edge
count gives its cost per edge (slope) and per node (intercept over the node
count); "the rest" is the step minus those kernels: Python, and the small
kernels the layer calls directly (the sums of the blocks' partials, small
transposes).

Usage::

    python bench/row_costs.py                      # degrees 1, 2, 5, 10; 5 rounds of 40 steps
    python bench/row_costs.py --size tiny --rounds 1 --reps 2   # a smoke run

It prints a markdown table and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # noqa: E402
from rooflib.cpu import CPU  # noqa: E402

import gatfast  # noqa: E402
from gatfast import _runtime  # noqa: E402

REST = "the rest (Python, kernels called directly)"


def degree_graph(graph, degree):
    """``graph``'s nodes with every row's in-degree ``degree``: the row's own sources, repeated in turn."""
    counts = np.diff(graph.indptr)
    if counts.min() < 1:
        raise ValueError("every row of the graph needs a source to repeat")
    # position k of row i takes the row's source k mod (its count)
    k = np.tile(np.arange(degree), graph.num_nodes)
    rows = np.repeat(np.arange(graph.num_nodes), degree)
    indices = graph.indices[graph.indptr[rows] + k % counts[rows]]
    indptr = np.arange(graph.num_nodes + 1, dtype=np.int64) * degree
    return gatfast.CSRGraph(indptr, indices.astype(np.int64), graph.num_nodes)


class KernelClock:
    """Adds up the time of every ``run_rows`` / ``run_chunks`` call by kernel while installed (one thread)."""

    def __init__(self):
        self.totals = defaultdict(float)
        self._saved = None

    def __enter__(self):
        self._saved = (_runtime.run_rows, _runtime.run_chunks)
        run_rows, run_chunks = self._saved

        def timed_rows(kernel, count, args, work):
            t0 = time.perf_counter()
            try:
                return run_rows(kernel, count, args, work)
            finally:
                self.totals[kernel.__name__] += time.perf_counter() - t0

        def timed_chunks(task, chunks, work=None):
            t0 = time.perf_counter()
            try:
                return run_chunks(task, chunks, work)
            finally:
                self.totals[task.__qualname__.split(".")[0]] += time.perf_counter() - t0

        _runtime.run_rows, _runtime.run_chunks = timed_rows, timed_chunks
        return self

    def __exit__(self, *exc):
        _runtime.run_rows, _runtime.run_chunks = self._saved


def measure(degrees, rounds, reps, size="full"):
    """``(nodes, {degree: edges}, {degree: {kernel: [ms per step, one per round]}}, the layer's shape)``."""
    w = workloads.make_workload("small-batch", size)
    graphs = {d: degree_graph(w.graph, d) for d in degrees}
    layer = gatfast.GATv2Layer(
        w.in_features,
        w.out_features,
        heads=w.heads,
        concat=w.concat,
        add_self_loops=False,
        dtype=np.float32,
        seed=0,
    )
    grad = w.grad_out()

    def step(graph):
        out, cache = layer.forward(graph, w.x)
        layer.backward(cache, grad)

    times = {d: defaultdict(list) for d in degrees}
    with _runtime.threads(1):
        for graph in graphs.values():  # compile or load, and warm up
            step(graph)
            step(graph)
        for _ in range(rounds):
            for d, graph in graphs.items():
                with KernelClock() as clock:
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        step(graph)
                    total = time.perf_counter() - t0
                for name, seconds in clock.totals.items():
                    times[d][name].append(seconds / reps * 1e3)
                times[d][REST].append((total - sum(clock.totals.values())) / reps * 1e3)
    shape = f"{w.in_features} -> {w.heads} x {w.out_features}"
    return w.graph.num_nodes, {d: g.nnz for d, g in graphs.items()}, times, shape


def fit(nodes, edges, times):
    """Per kernel ``(ns per node, ns per edge, {degree: median ms})`` from a least-squares line in the edges."""
    degrees = sorted(edges)
    names = sorted({name for d in degrees for name in times[d]}, key=lambda n: (n == REST, n))
    rows = {}
    for name in names:
        ran = [d for d in degrees if times[d].get(name)]  # a kernel may take another path at some degree
        ms = {d: float(np.median(times[d][name])) for d in ran}
        if len(ran) > 1:
            slope, intercept = np.polyfit([edges[d] for d in ran], [ms[d] for d in ran], 1)
        else:
            slope, intercept = 0.0, ms[ran[0]]
        rows[name] = (intercept * 1e6 / nodes, slope * 1e6, ms)
    return rows


def markdown(nodes, edges, rows):
    degrees = sorted(edges)
    head = "| kernel | " + " | ".join(f"degree {d} ms" for d in degrees) + " | ns per node | ns per edge |"
    lines = [head, "|---|" + "---:|" * (len(degrees) + 2)]
    totals = {d: 0.0 for d in degrees}
    per_node = per_edge = 0.0
    for name, (node_ns, edge_ns, ms) in rows.items():
        lines.append(
            f"| {name} | "
            + " | ".join(f"{ms[d]:.3f}" if d in ms else "–" for d in degrees)
            + f" | {node_ns:.1f} | {edge_ns:.2f} |"
        )
        for d in ms:
            totals[d] += ms[d]
        per_node += node_ns
        per_edge += edge_ns
    lines.append(
        "| **step** | "
        + " | ".join(f"**{totals[d]:.3f}**" for d in degrees)
        + f" | **{per_node:.1f}** | **{per_edge:.2f}** |"
    )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degrees", default="1,2,5,10", help="comma-separated in-degrees (default 1,2,5,10)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--reps", type=int, default=40, help="steps per round and graph (default 40)")
    parser.add_argument("--size", choices=workloads.SIZES, default="full")
    args = parser.parse_args(argv)
    try:
        degrees = sorted({int(d) for d in args.degrees.split(",")})
    except ValueError:
        parser.error(f"--degrees must be comma-separated integers, got {args.degrees!r}")
    if len(degrees) < 2 or degrees[0] < 1 or args.rounds < 1 or args.reps < 1:
        parser.error("--degrees needs two different degrees of at least 1, --rounds and --reps at least 1")
    nodes, edges, times, shape = measure(degrees, args.rounds, args.reps, args.size)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {CPU['model']} ({CPU['simd']}), 1 thread, "
        f"{nodes:,} nodes of small-batch ({args.size}), {shape}, {args.rounds} rounds of {args.reps} "
        f"steps per graph, `{' '.join(['python bench/row_costs.py', *(sys.argv[1:] if argv is None else argv)])}`\n"
    )
    print(markdown(nodes, edges, fit(nodes, edges, times)))


if __name__ == "__main__":
    main()
