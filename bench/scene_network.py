"""A whole network on one road scene, per call: inference and a training step, one-call paths on and off.

The seed paper's use is a 3-layer network run on one traffic scene at a
time. This times ``scene-batch-train``'s network (``GATv2Network``, 3 layers,
4 heads of 16 channels, ELU) on one scene of 10 vehicles, the calls the
per-scene loop makes:

* ``output``: ``net.output(graph, x)``, inference (no cache kept);
* ``forward``: ``net.forward(graph, x)[0]``, which keeps the backward's cache;
* ``train step``: forward in training mode, MSE, backward, Adam.

Each is timed three ways, in alternating rounds of tight loops: with the
layers' one-call kernels (``gatfast/layers/small.py``); with them for small
products only (``small.FEW_ROWS = 0``: the first layer, 4 -> 64, and the last,
64 -> 2, but not the middle one, 64 -> 64 on 10 rows, whose forward takes the
one-call kernel for a few wide rows otherwise); and with the general path only
(``small.ENABLED = False``). ``output`` and ``forward`` must give the same bits
all three ways (checked before timing; the training step changes the weights
it reads, so it is only timed).

Usage::

    python bench/scene_network.py              # 9 rounds
    python bench/scene_network.py --rounds 3   # quicker

It prints a markdown table (µs per call, median and best of the rounds)
and writes nothing.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
import workloads
from rooflib.cpu import CPU

import gatfast
from gatfast.layers import small
from gatfast.models import mse_loss
from gatfast.optim import Adam


def scene(vehicles=10, seed=0):
    """One scene of ``vehicles`` vehicles with self loops, its features (float32) and targets."""
    scenes = gatfast.data.make_traffic_scenes(num_graphs=1, min_nodes=vehicles, max_nodes=vehicles, seed=seed)
    graph, x, _, y = scenes.batch(np.array([0]))
    return graph.with_self_loops(), x.astype(np.float32), y.astype(np.float32)


def network(seed=0):
    """``scene-batch-train``'s network, as bench/compare.py builds it."""
    return workloads.make_network(workloads.make_workload("scene-batch-train", "tiny"), seed)


def calls(graph, x, y):
    """The timed calls, each on its own network (the training step updates its weights)."""
    nets = {name: network() for name in ("output", "forward", "train step")}
    opt = Adam(nets["train step"].parameters(), lr=0.01, weight_decay=1e-4)

    def step():
        net = nets["train step"]
        out, cache = net.forward(graph, x, training=True)
        _, grad = mse_loss(out, y)
        opt.step(net.backward(cache, grad))
        return out

    return {
        "output": lambda: nets["output"].output(graph, x),
        "forward": lambda: nets["forward"].forward(graph, x)[0],
        "train step": step,
    }


#: (label, small.ENABLED, small.FEW_ROWS) of the three ways
WAYS = (
    ("one-call paths", True, small.FEW_ROWS),
    ("small products only", True, 0),
    ("general path only", False, 0),
)


def _set(way):
    _, small.ENABLED, small.FEW_ROWS = way


def measure(rounds, reps):
    graph, x, y = scene()
    small._decided.update({"forward", "backward"})  # the one-call kernels from the first call
    fns = calls(graph, x, y)
    times = {(name, way[0]): [] for name in fns for way in WAYS}
    try:
        for name, fn in fns.items():
            if name != "train step":  # the same bits every way (the step changes the weights it reads)
                outs = []
                for way in WAYS:
                    _set(way)
                    outs.append(fn().tobytes())
                assert len(set(outs)) == 1, name
        for _ in range(rounds):
            for name, fn in fns.items():
                for way in WAYS:
                    _set(way)
                    for _ in range(10):
                        fn()
                    start = time.perf_counter()
                    for _ in range(reps):
                        fn()
                    times[(name, way[0])].append((time.perf_counter() - start) / reps * 1e6)
    finally:
        _set(WAYS[0])
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds (default 9)")
    parser.add_argument("--reps", type=int, default=1000, help="calls per round and variant (default 1000)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.reps < 1:
        parser.error("--rounds and --reps must be >= 1")
    times = measure(args.rounds, args.reps)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {CPU['model']} ({CPU['simd']}), "
        f"{numba.get_num_threads()} Numba threads, {args.rounds} rounds of {args.reps} calls\n"
    )
    labels = [way[0] for way in WAYS]
    print("| call | " + " | ".join(f"{label} µs (median / best)" for label in labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for name in ("output", "forward", "train step"):
        cells = [
            f"{np.median(times[(name, label)]):.1f} / {min(times[(name, label)]):.1f}" for label in labels
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
