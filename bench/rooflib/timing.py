"""Timing of a workload's real kernels, its whole step and its ceiling probes, in the same rounds."""

from __future__ import annotations

import time
from dataclasses import asdict

import workloads

from .cpu import loadavg
from .kernels import kernels_for
from .measure import record, stats
from .model import Dims, bound, step_footprint
from .state import State

GOALS = {"edge_kernel": 1.3, "large_step": 1.5}


def time_workload(name, size, reps, machine, log=print):
    """Build one workload, then time its kernels, the whole step and the probes of its ceilings in rounds.

    Every round runs each kernel, the step and each probe once, so a
    machine shared with other work slows kernels and ceilings alike. The
    bounds use the probes' medians (the ratio of medians), and separately
    their best samples (for best/bound).
    """
    w = workloads.make_workload(name, size)
    d = Dims.from_workload(w)
    runner = workloads.GatfastRunner(w)
    s = State(w, runner)
    kernels = kernels_for(d, s)
    footprint = step_footprint(kernels)
    in_cache = footprint <= machine.cache_bytes
    probes = machine.workload_probes([k.model for k in kernels], in_cache)
    items = [(k.name, k.run) for k in kernels] + [("step", runner.forward_backward)]
    items += [(f"probe {i}", fn) for i, (_, fn) in enumerate(probes)]
    for _, fn in items:  # warm-up (compilation happened in State already)
        for _ in range(2):
            fn()
    samples = {key: [] for key, _ in items}
    load_before = loadavg()
    for _ in range(reps):
        for key, fn in items:
            t0 = time.perf_counter()
            fn()
            samples[key].append(time.perf_counter() - t0)
    load_after = loadavg()
    machine.release_tables()
    ceilings = [record(tpl, samples[f"probe {i}"]) for i, (tpl, _) in enumerate(probes)]
    rates = machine.rates(ceilings, median=True)
    rates_best = machine.rates(ceilings)
    rows = []
    for k in kernels:
        b = bound(k.model, rates, in_cache)
        best = bound(k.model, rates_best, in_cache)["bound_s"]
        ideal = bound(k.model, rates, in_cache, ideal_cache=True)
        st = stats(samples[k.name])
        rows.append({"kernel": k.name, "label": k.label, "edge": k.edge, "measured": st,
                     "samples_s": samples[k.name],
                     "ratio": st["median"] / b["bound_s"] if b["bound_s"] > 0 else None,
                     "best_bound_s": best,
                     "best_ratio": min(samples[k.name]) / best if best > 0 else None,
                     "model": {"reads": k.model.reads, "writes": k.model.writes,
                               "gathers": [asdict(g) for g in k.model.gathers], "flops": float(k.model.flops),
                               "blas": k.model.blas},
                     "ideal_cache": {key: ideal[key] for key in ("bound_s", "by", "resident_fraction",
                                                                   "gather_rows")}, **b})
    step = stats(samples["step"])
    step_bound = sum(r["bound_s"] for r in rows)
    step_best_bound = sum(r["best_bound_s"] for r in rows)
    kernel_sum = sum(r["measured"]["median"] for r in rows)
    worst = max((r for r in rows if r["edge"]), key=lambda r: r["ratio"])
    result = {
        "workload": name, "description": workloads.WORKLOADS[name][1], "size": size, "dims": asdict(d),
        "footprint_bytes": footprint, "in_cache": in_cache, "kernels": rows,
        "ceilings": ceilings, "rates": asdict(rates), "rates_best": asdict(rates_best),
        "step": {"measured": step, "samples_s": samples["step"], "bound_s": step_bound,
                 "ratio": step["median"] / step_bound if step_bound > 0 else None,
                 "best_bound_s": step_best_bound,
                 "best_ratio": min(samples["step"]) / step_best_bound if step_best_bound > 0 else None,
                 "kernels_measured_s": kernel_sum, "other_s": step["median"] - kernel_sum},
        "goals": {"edge_kernel_limit": GOALS["edge_kernel"], "worst_edge_ratio": worst["ratio"],
                  "worst_edge_kernel": worst["kernel"], "edge_met": worst["ratio"] <= GOALS["edge_kernel"]},
        "loadavg": [load_before, load_after],
    }
    if name == "large":
        result["goals"]["step_limit"] = GOALS["large_step"]
        result["goals"]["step_met"] = result["step"]["ratio"] <= GOALS["large_step"]
    log(f"{name}: step {step['median'] * 1e3:.2f} ms, bound {step_bound * 1e3:.2f} ms")
    return result

