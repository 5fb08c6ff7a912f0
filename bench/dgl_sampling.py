"""DGL 2.1 anchor for neighbour-sampled GATv2 training (run with the DGL environment's python).

What it measures, on a CSBM graph built by gatfast's own generator
(``gatfast.data.make_csbm``, every parameter on the command line) with one
self loop per node added (gatfast's default attention graph):

1. Sampling throughput, fanouts ``[10, 10]`` (the last layer's first, as
   DGL's ``NeighborSampler``), seed batches of 256 shuffled training nodes,
   in sampled edges per second, four ways:

   - ``sample_neighbors``: only the time inside ``dgl.sampling.sample_neighbors``
     (in-edges, without replacement), the 2 hops of every batch;
   - ``sample_neighbors + to_block``: the whole unfused 2-hop step, as
     ``NeighborSampler(fused=False)`` builds its blocks;
   - ``NeighborSampler``: ``NeighborSampler([10, 10]).sample_blocks``
     with its defaults, which on the CPU with more than one thread is DGL's
     fused sampler (``sample_neighbors_fused``), what a DataLoader runs;
   - ``sample_neighbors`` alone, ``--threads`` batches at a time, each on a
     thread of its own with one OpenMP thread (the way gatfast's
     ``NeighborSampler.epoch`` samples ahead).

2. One epoch of sampled training: a 2-layer GATv2 (``dgl.nn.GATv2Conv``,
   8 heads x 8 concatenated, ELU, then 1 head x classes, each layer with
   gatfast's output bias; dropout ``--dropout`` on features and attention),
   cross-entropy, Adam (lr 0.005, weight decay 5e-4), over all training nodes
   in batches of 256 from ``dgl.dataloading.DataLoader`` with
   ``NeighborSampler([10, 10])`` (in-process, ``num_workers=0``). A few
   warm-up batches run first. Reports the epoch's seconds (and the part spent
   waiting for the sampler) and the peak resident set size during the epoch
   (Linux VmHWM, reset just before it through /proc/self/clear_refs), also as
   the increase over the resident set size just before.

torch, DGL's OpenMP kernels, Numba and BLAS use ``--threads`` threads (2), with
``OMP_WAIT_POLICY=PASSIVE`` as in every compare.py worker (see ``_limit_threads``).
Results go to ``dgl_sampling.json`` and ``dgl_sampling.md`` in ``--out``
(default ``/tmp/gatfast-dgl-sampling``; never a tracked path unless given).

Usage (a quick check at a small size, then the full size, about 2 M nodes)::

    PY=~/.cache/gatfast/dgl-venv/bin/python      # bash bench/setup_dgl_env.sh
    PYTHONPATH=. $PY bench/dgl_sampling.py --nodes 20000
    PYTHONPATH=. $PY bench/dgl_sampling.py --out /tmp/dgl-sampling-full
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# gatfast is not installed in the DGL environment: import it from this checkout
sys.path.insert(1, str(HERE.parent))

FANOUTS = [10, 10]
BATCH_SIZE = 256
WARMUP_BATCHES = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = p.add_argument_group("graph (gatfast.data.make_csbm)")
    g.add_argument("--nodes", type=int, default=2_000_000)
    g.add_argument("--avg-degree", type=float, default=10.0,
                   help="average degree: nodes * avg_degree / 2 undirected edges, stored both ways")
    g.add_argument("--features", type=int, default=64)
    g.add_argument("--classes", type=int, default=2)
    g.add_argument("--homophily", type=float, default=0.8)
    g.add_argument("--feature-signal", type=float, default=1.0)
    g.add_argument("--train-frac", type=float, default=0.6)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-self-loops", action="store_true",
                   help="sample the CSBM graph as generated (by default one self loop per node is added)")
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    p.add_argument("--fanouts", default=",".join(map(str, FANOUTS)),
                   help="per layer, first layer first (default 10,10)")
    p.add_argument("--dropout", type=float, default=0.6,
                   help="feature and attention dropout of both layers (gatfast's GATv2Network default)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-sample-batches", type=int, default=None,
                   help="cap the batches of the sampling measurement (default: one pass over the training nodes)")
    p.add_argument("--skip-training", action="store_true", help="measure sampling only")
    p.add_argument("--out", default="/tmp/gatfast-dgl-sampling")
    args = p.parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",") if f]
    if args.nodes < 4 or args.batch_size < 1 or args.threads < 1 or not args.fanouts:
        p.error("--nodes >= 4, --batch-size >= 1, --threads >= 1 and at least one fanout are required")
    return args


def _limit_threads(threads):
    """Before torch, DGL, Numba or BLAS load: their thread pools read these once.

    ``OMP_WAIT_POLICY=PASSIVE`` (a user's setting wins) is what every
    compare.py worker runs with (compare.py puts it into each worker's
    environment; ``import gatfast`` no longer sets it). It must be set before
    any OpenMP runtime starts: here torch and DGL load first. It matters for DGL: the process holds two OpenMP runtimes
    (DGL's libgomp and the copy bundled with torch's wheel), and with
    libgomp's default spin-waiting the idle threads of one take the cores the
    other's work needs; on 2 cores ``sample_neighbors`` ran 10-20x slower.
    """
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("DGLBACKEND", "pytorch")


def build_graph(args):
    """gatfast's CSBM dataset and the DGL graph of its (looped) CSR-by-target graph."""
    import dgl
    import numpy as np
    import torch

    from gatfast.data import make_csbm

    t0 = time.perf_counter()
    data = make_csbm(num_nodes=args.nodes, num_classes=args.classes, num_features=args.features,
                     avg_degree=args.avg_degree, homophily=args.homophily,
                     feature_signal=args.feature_signal, seed=args.seed, train_frac=args.train_frac,
                     val_frac=min(0.2, 1.0 - args.train_frac))
    graph = data.graph if args.no_self_loops else data.graph.with_self_loops()
    generate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # gatfast's CSR by target (row i = the sources j of the edges j -> i) is DGL's CSC
    g = dgl.graph(("csc", (torch.from_numpy(graph.indptr.astype(np.int64)),
                           torch.from_numpy(graph.indices.astype(np.int64)), [])),
                  num_nodes=graph.num_nodes)
    g.create_formats_()  # the CSC that in-edge sampling reads, and the others, once, outside the timings
    convert_s = time.perf_counter() - t0
    if not np.array_equal(g.in_degrees().numpy(), graph.in_degree()):
        raise AssertionError("DGL graph's in-degrees differ from gatfast's: wrong edge direction")
    x = torch.from_numpy(np.ascontiguousarray(data.x, dtype=np.float32))
    y = torch.from_numpy(np.asarray(data.y, dtype=np.int64))
    train = torch.from_numpy(np.flatnonzero(data.train_mask).astype(np.int64))
    info = {"nodes": int(graph.num_nodes), "edges": int(graph.nnz), "self_loops": not args.no_self_loops,
            "train_nodes": int(train.numel()), "generate_s": generate_s, "to_dgl_s": convert_s}
    return g, x, y, train, info


def _batches(train, batch_size, seed, limit=None):
    import torch

    gen = torch.Generator().manual_seed(seed)
    perm = train[torch.randperm(train.numel(), generator=gen)]
    batches = list(perm.split(batch_size))
    return batches if limit is None else batches[:limit]


def measure_sampling(g, train, args):
    """Sampled edges per second of the four ways of sampling [fanouts] around seed batches."""
    import dgl
    from dgl.dataloading import NeighborSampler
    from dgl_concurrent import concurrent_sample_neighbors

    fanouts = args.fanouts
    batches = _batches(train, args.batch_size, args.seed, args.max_sample_batches)

    hop_nodes = {}  # each batch's targets per hop, for the concurrent measurement below

    def unfused(seeds, clock):
        nodes, edges, inside = seeds, 0, 0.0
        hop_nodes[id(seeds)] = hops = []
        for fanout in reversed(fanouts):
            hops.append((nodes, fanout))
            t0 = clock()
            frontier = dgl.sampling.sample_neighbors(g, nodes, fanout, edge_dir="in", replace=False)
            inside += clock() - t0
            block = dgl.to_block(frontier, nodes)
            edges += block.num_edges()
            nodes = block.srcdata[dgl.NID]
        return edges, inside

    sampler = NeighborSampler(fanouts)

    def fused(seeds):
        _, _, blocks = sampler.sample_blocks(g, seeds)
        return sum(b.num_edges() for b in blocks)

    for seeds in batches[:WARMUP_BATCHES]:  # lazy set-up (the fused sampler's node map) outside the timings
        unfused(seeds, time.perf_counter)
        fused(seeds)
    edges_u = inside = 0.0
    t0 = time.perf_counter()
    for seeds in batches:
        e, t = unfused(seeds, time.perf_counter)
        edges_u += e
        inside += t
    unfused_s = time.perf_counter() - t0
    edges_f = 0
    t0 = time.perf_counter()
    for seeds in batches:
        edges_f += fused(seeds)
    fused_s = time.perf_counter() - t0
    concurrent_s, concurrent_edges = concurrent_sample_neighbors(
        g, [hop_nodes[id(s)] for s in batches], args.threads, WARMUP_BATCHES
    )
    return {
        "batches": len(batches),
        "batch_size": args.batch_size,
        "fanouts": fanouts,
        "sampled_edges": int(edges_u),
        "sampled_edges_per_batch": edges_u / len(batches),
        "sample_neighbors_s": inside,
        "sample_neighbors_edges_per_s": edges_u / inside,
        "sample_neighbors_to_block_s": unfused_s,
        "sample_neighbors_to_block_edges_per_s": edges_u / unfused_s,
        "neighbor_sampler_s": fused_s,
        "neighbor_sampler_edges": int(edges_f),
        "neighbor_sampler_edges_per_s": edges_f / fused_s,
        "neighbor_sampler_fused": bool(sampler.fused and dgl.utils.get_num_threads() > 1),
        "concurrent_sample_neighbors_s": concurrent_s,
        "concurrent_sample_neighbors_edges": int(concurrent_edges),
        "concurrent_sample_neighbors_edges_per_s": concurrent_edges / concurrent_s,
    }


def train_epoch(g, x, y, train, num_classes, args):
    """One timed epoch of sampled 2-layer GATv2 training after a few warm-up batches."""
    import dgl
    import torch
    import torch.nn.functional as F
    from comparelib.worker import start_peak as _start_peak
    from reference_dgl import make_layer

    torch.manual_seed(args.seed)
    hidden, heads = 8, 8
    conv1 = make_layer(in_features=x.shape[1], out_features=hidden, heads=heads, concat=True,
                       feat_drop=args.dropout, attn_drop=args.dropout)
    conv2 = make_layer(in_features=hidden * heads, out_features=num_classes, heads=1, concat=False,
                       feat_drop=args.dropout, attn_drop=args.dropout)
    model = torch.nn.ModuleList([conv1, conv2])
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)

    def step(blocks, input_nodes, output_nodes):
        h = F.elu(conv1(blocks[0], x[input_nodes]))
        logits = conv2(blocks[1], h)
        loss = F.cross_entropy(logits, y[output_nodes])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss), sum(b.num_edges() for b in blocks)

    sampler = dgl.dataloading.NeighborSampler(args.fanouts)
    model.train()
    warm = dgl.dataloading.DataLoader(g, train[: WARMUP_BATCHES * args.batch_size], sampler,
                                      batch_size=args.batch_size, shuffle=True, num_workers=0)
    for input_nodes, output_nodes, blocks in warm:
        step(blocks, input_nodes, output_nodes)
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=args.batch_size, shuffle=True,
                                        drop_last=False, num_workers=0)
    baseline, peak_now = _start_peak()
    losses, edges, wait = [], 0, 0.0
    t_start = time.perf_counter()
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            input_nodes, output_nodes, blocks = next(it)
        except StopIteration:
            wait += time.perf_counter() - t0
            break
        wait += time.perf_counter() - t0
        loss, e = step(blocks, input_nodes, output_nodes)
        losses.append(loss)
        edges += e
    epoch_s = time.perf_counter() - t_start
    peak = peak_now()
    n = len(losses)
    return {
        "model": f"GATv2Conv {x.shape[1]} -> {heads} x {hidden} (concat, ELU) -> 1 x {num_classes}, "
                 f"dropout {args.dropout:g}, Adam lr 0.005 wd 5e-4",
        "batches": n,
        "epoch_s": epoch_s,
        "sampling_wait_s": wait,
        "compute_s": epoch_s - wait,
        "sampled_edges": edges,
        "mean_loss_first_tenth": sum(losses[: max(1, n // 10)]) / max(1, n // 10),
        "mean_loss_last_tenth": sum(losses[-max(1, n // 10):]) / max(1, n // 10),
        "rss_before_mb": baseline,
        "peak_rss_mb": peak,
        "peak_rss_increase_mb": peak - baseline,
    }


def markdown(res):
    m, gi, s, t = res["meta"], res["graph"], res["sampling"], res.get("training")
    lines = [
        "# DGL 2.1 neighbour-sampling anchor",
        "",
        f"{m['date']}, {m['cpu']}, {m['threads']} threads (torch = DGL OpenMP, OMP_WAIT_POLICY="
        f"{m['omp_wait_policy']}), DGL {m['dgl']}, "
        f"torch {m['torch']}, 1-minute load average {m['load']}.",
        "",
        f"Graph: gatfast `make_csbm` ({m['csbm']}), {gi['nodes']:,} nodes, {gi['edges']:,} edges"
        f"{' with one self loop per node' if gi['self_loops'] else ''}, {gi['train_nodes']:,} training nodes "
        f"(generated in {gi['generate_s']:.1f} s, to DGL in {gi['to_dgl_s']:.1f} s).",
        "",
        f"## Sampling: fanouts {s['fanouts']}, {s['batches']:,} batches of {s['batch_size']} seeds",
        "",
        "| method | seconds | sampled edges | M edges/s |",
        "|---|---:|---:|---:|",
        f"| `dgl.sampling.sample_neighbors` alone | {s['sample_neighbors_s']:.3f} | {s['sampled_edges']:,} "
        f"| {s['sample_neighbors_edges_per_s'] / 1e6:.2f} |",
        f"| `sample_neighbors` + `to_block` (unfused) | {s['sample_neighbors_to_block_s']:.3f} "
        f"| {s['sampled_edges']:,} | {s['sample_neighbors_to_block_edges_per_s'] / 1e6:.2f} |",
        f"| `NeighborSampler.sample_blocks` ({'fused' if s['neighbor_sampler_fused'] else 'unfused'}) "
        f"| {s['neighbor_sampler_s']:.3f} | {s['neighbor_sampler_edges']:,} "
        f"| {s['neighbor_sampler_edges_per_s'] / 1e6:.2f} |",
        f"| `sample_neighbors` alone, {m['threads']} batches at a time (one a thread, 1 OpenMP thread each) "
        f"| {s['concurrent_sample_neighbors_s']:.3f} | {s['concurrent_sample_neighbors_edges']:,} "
        f"| {s['concurrent_sample_neighbors_edges_per_s'] / 1e6:.2f} |",
    ]
    if t:
        lines += [
            "",
            f"## One training epoch: {t['model']}",
            "",
            "| batches | epoch s | of which waiting for the sampler s | sampled edges | RSS before MB "
            "| peak RSS MB | peak increase MB | mean loss, first / last tenth |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
            f"| {t['batches']:,} | {t['epoch_s']:.2f} | {t['sampling_wait_s']:.2f} | {t['sampled_edges']:,} "
            f"| {t['rss_before_mb']:.0f} | {t['peak_rss_mb']:.0f} | {t['peak_rss_increase_mb']:.0f} "
            f"| {t['mean_loss_first_tenth']:.3f} / {t['mean_loss_last_tenth']:.3f} |",
        ]
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    _limit_threads(args.threads)
    import dgl
    import numba
    import torch
    from comparelib.worker import loadavg as _loadavg
    from outdirs import write_report
    from rooflib.cpu import CPU


    torch.set_num_threads(args.threads)
    dgl.utils.set_num_threads(args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    load = [_loadavg()]
    g, x, y, train, info = build_graph(args)
    print(f"graph: {info['nodes']:,} nodes, {info['edges']:,} edges, {info['train_nodes']:,} training nodes "
          f"({info['generate_s']:.1f} s + {info['to_dgl_s']:.1f} s)", flush=True)
    sampling = measure_sampling(g, train, args)
    print(f"sampling: {sampling['sample_neighbors_edges_per_s'] / 1e6:.2f} M edges/s in sample_neighbors, "
          f"{sampling['neighbor_sampler_edges_per_s'] / 1e6:.2f} M edges/s NeighborSampler", flush=True)
    load.append(_loadavg())
    training = None
    if not args.skip_training:
        training = train_epoch(g, x, y, train, args.classes, args)
        print(f"epoch: {training['epoch_s']:.2f} s, peak RSS {training['peak_rss_mb']:.0f} MB "
              f"(+{training['peak_rss_increase_mb']:.0f})", flush=True)
        load.append(_loadavg())
    load = [v for v in load if v is not None]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": f"{CPU['model']} ({os.cpu_count()} CPUs), {CPU['simd']} ({CPU['simd_bits']}-bit)",
        "threads": args.threads,
        "dgl_omp_threads": int(dgl.utils.get_num_threads()),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "dgl": dgl.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "csbm": (f"num_nodes={args.nodes}, avg_degree={args.avg_degree:g}, num_features={args.features}, "
                 f"num_classes={args.classes}, homophily={args.homophily:g}, "
                 f"feature_signal={args.feature_signal:g}, train_frac={args.train_frac:g}, seed={args.seed}"),
        "load": f"{min(load):.2f}-{max(load):.2f}" if load else "unknown",
        "command": " ".join(["python", "bench/dgl_sampling.py", *(sys.argv[1:] if argv is None else argv)]),
    }
    res = {"meta": meta, "graph": info, "sampling": sampling, "training": training}
    write_report(args.out, "dgl_sampling", res, markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
