"""DGL's ``sample_neighbors`` run several batches at a time, one a thread (``bench/dgl_sampling.py``).

Runs under the DGL environment's python, as ``dgl_sampling.py`` does.
"""

from __future__ import annotations

import time


def concurrent_sample_neighbors(g, batches, threads, warmup):
    """``sample_neighbors`` alone, ``threads`` batches at a time, each on one thread with one OpenMP thread.

    The counterpart of gatfast's ``NeighborSampler.epoch``, which samples
    whole batches on threads of their own; DGL releases the GIL in its
    kernels, so its calls run side by side the same way. Each batch's hop
    targets come from the sequential pass (``batches``: per batch, its
    ``(targets, fanout)`` per hop), so only the sampling is timed.
    The first ``warmup`` batches run once on every thread first, untimed.
    Returns ``(seconds, sampled edges)``.
    """
    from concurrent.futures import ThreadPoolExecutor

    import dgl

    def run(part):
        edges = 0
        for hops in part:
            for nodes, fanout in hops:
                edges += dgl.sampling.sample_neighbors(
                    g, nodes, fanout, edge_dir="in", replace=False
                ).num_edges()
        return edges

    # omp_set_num_threads holds for the thread that calls it
    with ThreadPoolExecutor(threads, initializer=dgl.utils.set_num_threads, initargs=(1,)) as pool:
        list(pool.map(run, [batches[:warmup]] * threads))
        t0 = time.perf_counter()
        edges = sum(pool.map(run, [batches[k::threads] for k in range(threads)]))
        return time.perf_counter() - t0, edges
