"""Data-parallel training on Dask, measured: where a step's time goes, and 2 workers against 1.

    python bench/scaling.py                       # full sizes -> runs/bench/scaling/
    python bench/scaling.py --update-results      # -> bench/results/scaling.{json,md} (docs/SCALING.md)
    python bench/scaling.py --size tiny           # smoke run

Parts (``--parts``, all by default):

* ``transfer``: scatter to every worker and gather back of payloads of
  growing size (the per-byte costs of the client's broadcast and reduce);
* ``steps``: training steps on MUTAG (graph batches) and on a sampled
  CSBM graph (200,000 nodes, fanout 10,10) with 1 and 2 workers, each step
  split into compute (inside the task), serialisation (pickling the payload
  and unpickling the results, timed here), the client's sum of the shards,
  and the rest of the round trip (scheduling and communication); and the
  same epoch in one process;
* ``folds``: MUTAG 10-fold cross-validation, folds as tasks, 1 and 2
  workers, and in one process.

Before each part, a probe measures how many cores are free (two processes
of a pure-Python loop against one): on a shared machine that bounds every
2-worker speed-up. ``bench/scaling_model.py`` turns the JSON into the
projection of ``docs/SCALING.md``. A run of some parts keeps the other
parts of an existing ``scaling.json``.

Needs ``pip install -e ".[distributed]"``. Every timed run starts its own
``LocalCluster`` (loopback; Numba threads per worker = cores / workers).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import outdirs  # noqa: E402
from distributed import Client, wait  # noqa: E402

import gatfast  # noqa: E402
from gatfast._runtime import threads as numba_threads  # noqa: E402
from gatfast.data import load_dataset, make_csbm  # noqa: E402
from gatfast.distributed import ShardExecutor, local_cluster, threads_per_worker  # noqa: E402
from gatfast.distributed.tasks import StepPayload  # noqa: E402
from gatfast.optim import make_optimizer  # noqa: E402
from gatfast.training import TrainConfig, build_model  # noqa: E402
from gatfast.training.steps import add_shards, apply_step, epoch_plans, shard_gradients, split_shards  # noqa: E402

SIZES = {
    "full": dict(
        csbm_nodes=200_000,
        csbm_batch=2048,
        csbm_epochs=2,
        mutag_epochs=4,
        fold_epochs=30,
        transfer=(10**4, 10**5, 10**6, 10**7, 4 * 10**7),
    ),
    "tiny": dict(
        csbm_nodes=3_000,
        csbm_batch=512,
        csbm_epochs=2,
        mutag_epochs=2,
        fold_epochs=2,
        transfer=(10**4, 10**6),
    ),
}


def _cluster(workers, threads=None):
    cluster = local_cluster(workers, threads=threads)
    return cluster, Client(cluster)


def _optimizer(model, cfg):
    return make_optimizer(
        cfg.optimizer, model.parameters(), cfg.lr, cfg.weight_decay, cfg.momentum, cfg.nesterov
    )


def _splits(ds, cfg):
    return gatfast.training.splits.default_graph_splits(ds, cfg.seed) if hasattr(ds, "graphs") else None


def _spin(n):
    t = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - t


def free_cores(n=3_000_000):
    """How many cores two CPU-bound processes get now: 2 x (time alone) / (time of the slower of two at once)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, [10, 10])
        alone = min(pool.map(_spin, [n]) for _ in range(2))[0]
        both = max(pool.map(_spin, [n, n]))
    return round(2 * alone / both, 2)


def _scaled(payload, i):
    return {"g": payload["w"] * i}


def transfer(sizes, workers=2):
    """Seconds to scatter ``n`` bytes to every worker, and to gather ``workers`` results of ``n`` bytes."""
    rows = []
    cluster, client = _cluster(workers)
    with cluster, client:
        for n in sizes:
            payload = {"w": np.ones(n // 8)}
            send, back = [], []
            for _ in range(5):
                t = time.perf_counter()
                [f] = client.scatter([payload], broadcast=True, hash=False)
                send.append(time.perf_counter() - t)
                fs = [client.submit(_scaled, f, i, pure=False) for i in range(workers)]
                wait(fs)
                t = time.perf_counter()
                client.gather(fs)
                back.append(time.perf_counter() - t)
                del f, fs
            rows.append(
                {
                    "bytes": n,
                    "workers": workers,
                    "scatter_s": float(np.median(send[1:])),
                    "gather_s": float(np.median(back[1:])),
                }
            )
            print(
                f"transfer {n:>10d} B: scatter to {workers} {rows[-1]['scatter_s'] * 1e3:8.2f} ms, "
                f"gather {workers} results {rows[-1]['gather_s'] * 1e3:8.2f} ms",
                flush=True,
            )
    return rows


def _epochs(ds, cfg, epochs, run_step):
    """Train ``epochs`` epochs step by step (no evaluation); seconds of each epoch."""
    model = build_model(ds, cfg, cfg.seed)
    opt = _optimizer(model, cfg)
    splits = _splits(ds, cfg)
    times = []
    for epoch in range(1, epochs + 1):
        t = time.perf_counter()
        for plan in epoch_plans(ds, cfg, splits, epoch):
            total = run_step(model, plan)
            apply_step(opt, total, cfg, epoch)
        times.append(time.perf_counter() - t)
    return times, model


def one_process(ds, cfg, epochs):
    def step(model, plan):
        return add_shards([shard_gradients(model, ds, plan, plan.items, cfg)])

    times, _ = _epochs(ds, cfg, epochs, step)
    return {"epoch_s": float(np.median(times[1:])), "epochs": times}


def on_cluster(ds, cfg, epochs, workers, threads=None):
    """Epoch times and the per-step split with ``workers`` workers (first epoch = warm-up, left out)."""
    threads = threads_per_worker(workers) if threads is None else threads
    cluster, client = _cluster(workers, threads)
    with cluster, client:
        client.wait_for_workers(workers)
        executor = ShardExecutor(client, ds, profile=True)
        adds, ser = [], []

        def step(model, plan):
            results = executor(model, plan, split_shards(plan.items, workers), cfg)
            t = time.perf_counter()
            total = add_shards(results)
            adds.append(time.perf_counter() - t)
            return total

        times, model = _epochs(ds, cfg, epochs, step)
        # serialisation, timed here on the same objects: the payload out, the results back in
        plan = epoch_plans(ds, cfg, _splits(ds, cfg), 1)[0]
        results = executor(model, plan, split_shards(plan.items, workers), cfg)
        payload = StepPayload(model.parameters(), model.get_config(), cfg)
        for _ in range(5):
            t = time.perf_counter()
            blobs = [pickle.dumps(r, protocol=5) for r in results]
            pickle.loads(pickle.dumps(payload, protocol=5))
            [pickle.loads(b) for b in blobs]
            ser.append(time.perf_counter() - t)
        per_epoch = len(epoch_plans(ds, cfg, _splits(ds, cfg), 1))
        warm = executor.stats[per_epoch : per_epoch * epochs]  # the steps after the first epoch (warm-up)
        dataset_s, dataset_bytes = executor.dataset_seconds, len(pickle.dumps(ds, protocol=5))
    steps = {
        "wall_s": float(np.median([s.wall for s in warm])),
        "compute_s": float(np.median([max(s.compute) for s in warm])),
        "compute_sum_s": float(np.median([sum(s.compute) for s in warm])),
        "send_s": float(np.median([s.send for s in warm])),
        "wait_s": float(np.median([s.wait for s in warm])),
        "gather_s": float(np.median([s.gather for s in warm])),
        "add_s": float(np.median(adds[per_epoch:])),
        "serialise_s": float(np.median(ser)),
        "payload_bytes": warm[0].payload_bytes,
        "result_bytes": warm[0].result_bytes,
    }
    steps["round_trip_overhead_s"] = steps["wall_s"] - steps["compute_s"]
    return {
        "workers": workers,
        "threads_per_worker": threads,
        "epoch_s": float(np.median(times[1:])),
        "epochs": times,
        "steps_per_epoch": per_epoch,
        "step": steps,
        "dataset_scatter_s": dataset_s,
        "dataset_bytes": dataset_bytes,
    }


def steps_part(size):
    out = {}
    mutag = load_dataset("mutag", normalize_features=True)
    csbm = make_csbm(num_nodes=size["csbm_nodes"], seed=0)
    cases = {
        "mutag": (mutag, TrainConfig.preset("tu"), size["mutag_epochs"]),
        f"csbm-{size['csbm_nodes']}-sampled": (
            csbm,
            TrainConfig(fanout=(10, 10), batch_size=size["csbm_batch"]),
            size["csbm_epochs"] + 1,
        ),
    }
    for name, (ds, cfg, epochs) in cases.items():
        row = {"free_cores": free_cores(), "one_process": one_process(ds, cfg, epochs)}
        if ds is csbm:  # evaluation runs on the client, after every epoch: one full-graph inference
            model = build_model(ds, cfg, cfg.seed)
            t = time.perf_counter()
            gatfast.evaluate(model, ds)
            row["evaluate_s"] = time.perf_counter() - t
        with numba_threads(1):
            row["one_process_1_thread"] = one_process(ds, cfg, epochs)
        # 1 worker with all cores, 1 worker with one core, 2 workers with one core each
        for label, workers, threads in (
            ("workers_1", 1, None),
            ("workers_1_thread_1", 1, 1),
            ("workers_2", 2, None),
        ):
            row[label] = s = on_cluster(ds, cfg, epochs, workers, threads)
            print(
                f"{name}: {workers} worker(s) x {s['threads_per_worker']} thread(s): epoch {s['epoch_s']:.3f} s "
                f"({s['steps_per_epoch']} steps), step {s['step']['wall_s'] * 1e3:.1f} ms = compute "
                f"{s['step']['compute_s'] * 1e3:.1f} + rest {s['step']['round_trip_overhead_s'] * 1e3:.1f}",
                flush=True,
            )
        row["speedup_2_vs_1_same_cores"] = row["workers_1"]["epoch_s"] / row["workers_2"]["epoch_s"]
        row["speedup_2_vs_1_core_each"] = row["workers_1_thread_1"]["epoch_s"] / row["workers_2"]["epoch_s"]
        row["speedup_2_vs_one_process"] = row["one_process"]["epoch_s"] / row["workers_2"]["epoch_s"]
        print(
            f"{name}: one process {row['one_process']['epoch_s']:.3f} s/epoch (1 thread "
            f"{row['one_process_1_thread']['epoch_s']:.3f}); 2 workers vs 1: {row['speedup_2_vs_1_same_cores']:.2f}x "
            f"(same cores), {row['speedup_2_vs_1_core_each']:.2f}x (one core each)",
            flush=True,
        )
        out[name] = row
    return out


def folds_part(size):
    out = {"free_cores": free_cores()}
    opts = dict(folds=10, epochs=size["fold_epochs"], patience=None, quiet=True)
    t = time.perf_counter()
    local = gatfast.train("mutag", **opts)
    out["one_process_s"] = time.perf_counter() - t
    for workers in (1, 2):
        t = time.perf_counter()
        remote = gatfast.train("mutag", workers=workers, **opts)
        out[f"workers_{workers}_s"] = time.perf_counter() - t
        same = {k: v for k, v in remote.metrics.items() if "seconds" not in k} == {
            k: v for k, v in local.metrics.items() if "seconds" not in k
        }
        out[f"workers_{workers}_same_metrics"] = same
        print(
            f"mutag 10 folds x {opts['epochs']} epochs: {workers} worker(s) {out[f'workers_{workers}_s']:.1f} s "
            f"(cluster start included), same metrics as one process: {same}",
            flush=True,
        )
    out["one_process_test_accuracy"] = local.metrics["test_accuracy"]
    out["speedup_2_vs_1"] = out["workers_1_s"] / out["workers_2_s"]
    print(
        f"one process {out['one_process_s']:.1f} s; 2 vs 1 workers {out['speedup_2_vs_1']:.2f}x", flush=True
    )
    return out


def machine():
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        model = next(
            (ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?"
        )
    except (OSError, subprocess.SubprocessError):
        model = platform.processor() or "?"
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    import dask

    return {
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "dask": dask.__version__,
        "load_average_at_start": load,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument(
        "--parts", default="transfer,steps,folds", help="comma-separated: transfer, steps, folds"
    )
    parser.add_argument(
        "--csbm-nodes",
        type=int,
        default=None,
        help="nodes of the sampled CSBM graph (default: 200,000; 3,000 with --size tiny)",
    )
    outdirs.add_options(parser, "scaling")
    args = parser.parse_args(argv)
    out = outdirs.resolve_out(parser, args, "scaling", args.size)
    size = dict(SIZES[args.size])
    if args.csbm_nodes:
        size["csbm_nodes"] = args.csbm_nodes
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    path = out / "scaling.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    report.update({"machine": machine(), "size": args.size})
    if "transfer" in parts:
        report["transfer_free_cores"] = free_cores()
        report["transfer"] = transfer(size["transfer"])
    if "steps" in parts:
        report.setdefault("steps", {}).update(steps_part(size))
    if "folds" in parts:
        report["folds"] = folds_part(size)
    report["machine"]["load_average_at_end"] = os.getloadavg()
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
