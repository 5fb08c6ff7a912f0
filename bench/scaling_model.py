"""The projection of ``docs/SCALING.md``: the measured per-step costs of ``scaling.py``, extrapolated.

    python bench/scaling_model.py [bench/results/scaling.json]

A step of data-parallel training through one client, with ``W`` workers
of one core each and a global batch of ``B`` seed nodes::

    T_step(W) = T1 * (B / B0) / W  +  L  +  (W - 1) * (tau0 + P / beta)

* ``T1``: the compute of a batch of ``B0`` seeds on one core (inside the
  task, 1 worker x 1 thread);
* ``L``: the rest of a 1-worker step: scatter of the parameters, task
  scheduling, gather of one gradient, the client's sum;
* ``tau0 + P / beta``: what each further worker adds (measured: the rest
  of a 2-worker step minus ``L``), split into the per-task part ``tau0``
  and the transfer of one more gradient of ``P`` bytes at the gather
  throughput ``beta`` (from the transfer part).

The one-process baseline is a step on one core without Dask. The graph
grows to 100 M nodes with the measured CSBM's shape (16 features, average
degree 5, 60 % training nodes), the model unchanged: a sampled step's
compute depends on the batch, not on the graph (caches and TLBs aside:
the measured constant is a lower bound there), while an epoch has
``N_train / B`` steps, the replicated dataset grows with ``N``, and the
client's evaluation (full-graph inference) grows with ``N``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

N_TARGET = 100_000_000
TRAIN_FRACTION = 0.6
WORKERS = (1, 2, 8, 32, 64)


def constants(report):
    name = next(k for k in report["steps"] if k.startswith("csbm"))
    case = report["steps"][name]
    nodes = int(name.split("-")[1])
    one, two = case["workers_1_thread_1"], case["workers_2"]
    steps = one["steps_per_epoch"]
    big = max(report["transfer"], key=lambda r: r["bytes"])
    beta = big["workers"] * big["bytes"] / big["gather_s"]
    p = two["step"]["result_bytes"] / 2
    tau = max(0.0, two["step"]["round_trip_overhead_s"] - one["step"]["round_trip_overhead_s"])
    return {
        "case": name,
        "nodes": nodes,
        "steps_per_epoch": steps,
        "batch": round(nodes * TRAIN_FRACTION / steps, -1),
        "T1": one["step"]["compute_s"],
        "L": one["step"]["round_trip_overhead_s"],
        "tau": tau,
        "tau0": max(0.0, tau - p / beta),
        "P": p,
        "beta": beta,
        "payload": two["step"]["payload_bytes"],
        "local1": case["one_process_1_thread"]["epoch_s"] / steps,
        "dataset_bytes": one["dataset_bytes"],
        "evaluate_s": case.get("evaluate_s"),
        "free_cores": case.get("free_cores"),
    }


def step_time(c, w, batch_scale=1.0):
    return c["T1"] * batch_scale / w + c["L"] + (w - 1) * (c["tau0"] + c["P"] / c["beta"])


def projection(c):
    steps_100m = N_TARGET * TRAIN_FRACTION / c["batch"]
    rows = []
    for w in WORKERS:
        strong = step_time(c, w)
        weak = step_time(c, w, batch_scale=w)  # the batch grows with W: W x fewer steps per epoch
        rows.append(
            {
                "workers": w,
                "step_ms": strong * 1e3,
                "speedup_fixed_batch": c["local1"] / strong,
                "epoch_h_fixed_batch": steps_100m * strong / 3600,
                "speedup_growing_batch": c["local1"] * w / weak,
                "epoch_h_growing_batch": steps_100m / w * weak / 3600,
                "client_bytes_per_step": w * c["P"] + c["payload"],
                "replicas_gb": w * c["dataset_bytes"] * N_TARGET / c["nodes"] / 1e9,
            }
        )
    return rows


def markdown(c, rows):
    scale = N_TARGET / c["nodes"]
    w_star = (c["T1"] / (c["tau0"] + c["P"] / c["beta"])) ** 0.5 if c["tau"] > 0 else float("inf")
    out = [
        f"Constants ({c['case']}, batch {c['batch']:.0f} seeds, measured with {c['free_cores']} free cores):",
        "",
        "| constant | value |",
        "|---|---|",
        f"| T1, compute of one batch on one core (in a worker) | {c['T1'] * 1e3:.1f} ms |",
        f"| one-process step on one core (baseline) | {c['local1'] * 1e3:.1f} ms |",
        f"| L, rest of a 1-worker step (scatter, schedule, gather, sum) | {c['L'] * 1e3:.1f} ms |",
        f"| tau = tau0 + P/beta, added per further worker | {c['tau'] * 1e3:.1f} ms |",
        f"| P, one shard's gradient (pickled) | {c['P'] / 1e3:.1f} kB |",
        f"| beta, gather throughput into the client | {c['beta'] / 1e6:.0f} MB/s |",
        f"| parameters payload per step | {c['payload'] / 1e3:.1f} kB |",
        f"| dataset (pickled) at {c['nodes']:,} nodes | {c['dataset_bytes'] / 1e6:.1f} MB |",
        f"| client evaluation (full-graph inference) at {c['nodes']:,} nodes | {c['evaluate_s']:.2f} s |",
        "",
        f"T_step(W) = T1/W + L + (W-1)·tau; best W for a fixed batch: sqrt(T1/tau) = {w_star:.1f}.",
        "",
        "| workers | step (fixed batch) | speed-up, fixed batch | epoch at 100 M nodes, fixed batch "
        "| speed-up, batch × W | epoch, batch × W | client bytes in per step | dataset replicas |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['workers']} | {r['step_ms']:.0f} ms | {r['speedup_fixed_batch']:.2f}x "
            f"| {r['epoch_h_fixed_batch']:.1f} h | {r['speedup_growing_batch']:.2f}x "
            f"| {r['epoch_h_growing_batch']:.2f} h | {r['client_bytes_per_step'] / 1e6:.2f} MB "
            f"| {r['replicas_gb']:.0f} GB |"
        )
    out += [
        "",
        f"Client evaluation per epoch at 100 M nodes: about {c['evaluate_s'] * scale / 60:.0f} min "
        f"(linear in nodes, one process).",
    ]
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else Path(__file__).resolve().parent / "results" / "scaling.json"
    c = constants(json.loads(path.read_text()))
    print(markdown(c, projection(c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
