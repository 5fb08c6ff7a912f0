"""gatfast's neighbour sampling and one sampled training epoch, on the graph of ``dgl_sampling.py``.

The gatfast side of the DGL anchor (``bench/dgl_sampling.py``, run in the DGL
environment): the same CSBM graph (``gatfast.data.make_csbm``, the same
parameters and seed), fanouts ``[10, 10]``, batches of 256 shuffled
training nodes, 2 threads.

1. Sampling throughput: ``gatfast.sampling.NeighborSampler`` over one pass
   of the training nodes (``--max-sample-batches`` caps it), in sampled
   edges per second (every block's edges; the layers add the self loops, so
   they are not sampled edges here, while the DGL anchor samples from a
   graph that holds them), two ways: ``batch()`` one batch at a time (each
   hop's picking shared among the threads), and the ``epoch()`` iterator
   training uses, which samples as many batches at once as there are
   threads (at most 4), each on one thread.
2. One epoch of sampled training, exactly the steps ``gatfast train
   --fanout 10,10 --batch-size 256`` runs (the GAT recipe: 8 heads x 8,
   ELU, dropout 0.6 on features and attention, Adam lr 0.005, weight decay
   5e-4; the sampler prefetches the next batch), after 3 warm-up batches
   and without the end-of-epoch evaluation: epoch seconds and the peak RSS
   during the epoch (VmHWM reset through /proc/self/clear_refs just before
   it), also as the increase over the RSS before it and over the dataset.

Results: ``sampling.json`` and ``sampling.md`` in ``--out`` (default
``runs/bench/sampling/``, untracked).

Usage::

    python bench/sampling.py --nodes 20000                   # a quick check
    python bench/sampling.py                                 # 2,000,000 nodes, degree 10, 64 features
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

WARMUP_BATCHES = 3


def parse_args(argv=None):
    from outdirs import add_options, resolve_out

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = p.add_argument_group("graph (gatfast.data.make_csbm)")
    g.add_argument("--nodes", type=int, default=2_000_000)
    g.add_argument("--avg-degree", type=float, default=10.0)
    g.add_argument("--features", type=int, default=64)
    g.add_argument("--classes", type=int, default=2)
    g.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--fanouts", default="10,10", help="per layer, first layer first (default 10,10)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--max-sample-batches",
        type=int,
        default=None,
        help="cap the batches of the sampling measurement (default: one pass over the training nodes)",
    )
    p.add_argument("--skip-training", action="store_true", help="measure sampling only")
    add_options(p, "sampling")
    args = p.parse_args(argv)
    args.fanouts = tuple(int(f) for f in args.fanouts.split(",") if f)
    if args.nodes < 4 or args.batch_size < 1 or args.threads < 1 or not args.fanouts:
        p.error("--nodes >= 4, --batch-size >= 1, --threads >= 1 and at least one fanout are required")
    args.out = resolve_out(p, args, "sampling")
    return args


def dataset_mb(ds):
    """Bytes of the dataset's arrays (graph, features, labels, masks), in MB."""
    arrays = [ds.graph.indptr, ds.graph.indices, ds.x, ds.y, ds.train_mask, ds.val_mask, ds.test_mask]
    return sum(a.nbytes for a in arrays) / 2**20


def measure_sampling(ds, args):
    import numpy as np

    from gatfast.sampling import NeighborSampler

    sampler = NeighborSampler(
        ds.graph, args.fanouts, ds.train_mask, args.batch_size, seed=args.seed, prefetch=False
    )
    n = len(sampler) if args.max_sample_batches is None else min(len(sampler), args.max_sample_batches)
    order = sampler.epoch_order(1)
    for b in range(WARMUP_BATCHES):  # compile, outside the timing
        sampler.batch(0, b % len(sampler))
    edges, t0 = 0, time.perf_counter()
    for b in range(n):
        edges += sampler.batch(1, b, order).num_sampled_edges
    seconds = time.perf_counter() - t0
    # the iterator training uses: whole batches sampled ahead on the threads, one batch a thread
    ahead = NeighborSampler(ds.graph, args.fanouts, ds.train_mask, args.batch_size, seed=args.seed)
    epoch_edges, t0 = 0, time.perf_counter()
    batches = ahead.epoch(1)
    for _, batch in zip(range(n), batches):
        epoch_edges += batch.num_sampled_edges
    batches.close()  # a capped run: wait for the batches still being sampled
    epoch_seconds = time.perf_counter() - t0
    assert epoch_edges == edges, "the iterator sampled other blocks than batch()"
    return {
        "fanouts": list(args.fanouts),
        "batch_size": args.batch_size,
        "batches": n,
        "seconds": seconds,
        "sampled_edges": int(edges),
        "edges_per_s": edges / seconds,
        "epoch_seconds": epoch_seconds,
        "epoch_edges_per_s": edges / epoch_seconds,
        "seeds": int(np.count_nonzero(ds.train_mask)),
    }


def train_epoch(ds, args):
    """One timed epoch of the training loop's own steps (no evaluation)."""
    from comparelib.worker import start_peak

    from gatfast.training import TrainConfig, loop
    from gatfast.training.progress import Progress
    from gatfast.training.run import _optimizer, build_model

    config = TrainConfig.preset(
        "gat", fanout=args.fanouts, batch_size=args.batch_size, epochs=1, seed=args.seed, quiet=True
    )
    model = build_model(ds, config, config.seed)
    opt = _optimizer(model, config)
    sampler, _ = loop._sampled_setup(model, ds, config)
    quiet = Progress(True, 1)
    # warm-up: the first batches of epoch 0 compile and fault in every kernel and buffer
    for b, plan in enumerate(loop.epoch_plans(ds, config, None, 0)[:WARMUP_BATCHES]):
        sampled = sampler.batch(0, b)
        total = loop.add_shards([loop.shard_gradients(model, ds, plan, plan.items, config, sampled)])
        loop.apply_step(opt, total, config, 0)
    baseline, peak_now = start_peak()
    t0 = time.perf_counter()
    loss, _, _ = loop._run_epoch(model, ds, opt, config, None, 1, None, sampler, quiet, False)
    epoch_s = time.perf_counter() - t0
    peak = peak_now()
    return {
        "model": "GAT recipe: 8 heads x 8 (concat, ELU) -> 1 x classes, dropout 0.6, Adam lr 0.005 wd 5e-4",
        "batches": len(sampler),
        "epoch_s": epoch_s,
        "mean_loss": loss,
        "rss_before_mb": baseline,
        "peak_rss_mb": peak,
        "peak_rss_increase_mb": peak - baseline,
    }


def markdown(res):
    m, g, s, t = res["meta"], res["graph"], res["sampling"], res.get("training")
    lines = [
        "# gatfast neighbour sampling and a sampled epoch",
        "",
        f"{m['date']}, {m['cpu']}, {m['threads']} threads, 1-minute load average {m['load']}.",
        "",
        f"Graph: `make_csbm({m['csbm']})`: {g['nodes']:,} nodes, {g['edges']:,} edges, dataset "
        f"{g['dataset_mb']:.0f} MB (generated in {g['generate_s']:.1f} s).",
        "",
        f"| sampling, fanouts {s['fanouts']}, batch {s['batch_size']} | batches | seconds | sampled edges "
        "| M edges/s |",
        "|---|---:|---:|---:|---:|",
        f"| `NeighborSampler.batch`, one batch at a time (its picking on {m['threads']} threads) "
        f"| {s['batches']:,} | {s['seconds']:.3f} | {s['sampled_edges']:,} | {s['edges_per_s'] / 1e6:.2f} |",
        f"| `NeighborSampler.epoch`, {m['threads']} batches at a time (one a thread) | {s['batches']:,} "
        f"| {s['epoch_seconds']:.3f} | {s['sampled_edges']:,} | {s['epoch_edges_per_s'] / 1e6:.2f} |",
    ]
    if t:
        lines += [
            "",
            f"One training epoch ({t['model']}):",
            "",
            "| batches | epoch s | RSS before MB | peak RSS MB | peak increase MB | peak minus dataset MB "
            "| mean loss |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            f"| {t['batches']:,} | {t['epoch_s']:.2f} | {t['rss_before_mb']:.0f} | {t['peak_rss_mb']:.0f} "
            f"| {t['peak_rss_increase_mb']:.0f} | {t['peak_rss_mb'] - g['dataset_mb']:.0f} "
            f"| {t['mean_loss']:.3f} |",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    for var in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    from comparelib.worker import loadavg
    from outdirs import write_report
    from rooflib.cpu import CPU

    from gatfast.data import make_csbm

    load = [loadavg()]
    t0 = time.perf_counter()
    ds = make_csbm(
        num_nodes=args.nodes,
        num_classes=args.classes,
        num_features=args.features,
        avg_degree=args.avg_degree,
        seed=args.seed,
    )
    graph = {
        "nodes": ds.graph.num_nodes,
        "edges": int(ds.graph.nnz),
        "dataset_mb": dataset_mb(ds),
        "generate_s": time.perf_counter() - t0,
    }
    print(
        f"graph: {graph['nodes']:,} nodes, {graph['edges']:,} edges, {graph['dataset_mb']:.0f} MB", flush=True
    )
    sampling = measure_sampling(ds, args)
    print(
        f"sampling: {sampling['edges_per_s'] / 1e6:.2f} M edges/s one batch at a time, "
        f"{sampling['epoch_edges_per_s'] / 1e6:.2f} M edges/s through the epoch iterator",
        flush=True,
    )
    load.append(loadavg())
    training = None
    if not args.skip_training:
        training = train_epoch(ds, args)
        print(
            f"epoch: {training['epoch_s']:.2f} s, peak RSS {training['peak_rss_mb']:.0f} MB "
            f"(+{training['peak_rss_increase_mb']:.0f})",
            flush=True,
        )
        load.append(loadavg())
    load = [v for v in load if v is not None]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": f"{CPU['model']} ({os.cpu_count()} CPUs), {CPU['simd']} ({CPU['simd_bits']}-bit)",
        "threads": args.threads,
        "python": platform.python_version(),
        "csbm": f"num_nodes={args.nodes}, avg_degree={args.avg_degree:g}, num_features={args.features}, "
        f"num_classes={args.classes}, seed={args.seed}",
        "load": f"{min(load):.2f}-{max(load):.2f}" if load else "unknown",
        "command": " ".join(["python", "bench/sampling.py", *(sys.argv[1:] if argv is None else argv)]),
    }
    res = {"meta": meta, "graph": graph, "sampling": sampling, "training": training}
    write_report(args.out, "sampling", res, markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
