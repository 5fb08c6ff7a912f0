"""The performance issue's targets and the summary rows of the comparison table.

Targets are against PyG (forward + backward speed-up, peak-memory ratio
gatfast / PyG), absolute per-call times for ``scene`` (microseconds), and
for ``large-bipartite`` a bound relative to gatfast's own ``large`` (the
bipartite layer must not cost more than the homogeneous one on the same
edges). Speed-ups over DGL are reported with a ``_dgl`` suffix and have no
targets.
"""

from __future__ import annotations

TARGETS = {
    "large": {"speedup": 8.0, "memory_ratio": 0.2},
    "small-batch": {"speedup": 8.0},
    "large-edge": {"speedup": 4.0, "memory_ratio": 0.3},
    "small-batch-edge": {"speedup": 4.0, "memory_ratio": 0.3},
    "scene": {"forward_us": 15.0, "forward_backward_us": 40.0, "speedup": 10.0},
    "scene-batch-train": {"speedup": 8.0},
    "cora": {"speedup": 5.0},
    "cora-train": {"speedup": 5.0},
    "degree-256-linear": {"speedup": 5.0},
    "large-bipartite": {"time_vs": ["large", 1.05]},
}


def ratios(g, ref):
    """gatfast's speed-ups and memory ratio against one reference library's result."""
    out = {"speedup": ref["forward_backward_median_ms"] / g["forward_backward_median_ms"]}
    if g.get("forward_median_ms") and ref.get("forward_median_ms"):
        out["forward_speedup"] = ref["forward_median_ms"] / g["forward_median_ms"]
    out["memory_ratio"] = g["peak_mb"] / ref["peak_mb"] if ref["peak_mb"] > 0 else None
    return out


def _us(ms):
    return None if ms is None else ms * 1e3


def target_checks(name, target, row, gatfast_by_name):
    """One check per criterion: ``{"what", "limit", "value", "met"}`` (``met`` None where it cannot be evaluated)."""
    g = row["gatfast"]
    checks = []

    def add(what, limit, value, at_most):
        met = None if value is None else (value <= limit if at_most else value >= limit)
        checks.append({"what": what, "limit": limit, "value": value, "met": met})

    if "forward_us" in target:
        add("forward_us", target["forward_us"], _us(g.get("forward_median_ms")), True)
    if "forward_backward_us" in target:
        add("forward_backward_us", target["forward_backward_us"], _us(g["forward_backward_median_ms"]), True)
    if "speedup" in target:
        add("speedup", target["speedup"], row.get("speedup"), False)
    if "memory_ratio" in target:
        add("memory_ratio", target["memory_ratio"], row.get("memory_ratio"), True)
    if "time_vs" in target:
        other, factor = target["time_vs"]
        base = gatfast_by_name.get(other)
        value = None if base is None else g["forward_backward_median_ms"] / base["forward_backward_median_ms"]
        add(f"time_vs_{other}", factor, value, True)
    return checks


def overall(checks):
    """False if any check fails, True if all pass, None if some could not be evaluated (and none failed)."""
    mets = [c["met"] for c in checks]
    if any(m is False for m in mets):
        return False
    return True if mets and all(m is True for m in mets) else None


def target_text(target):
    """The target as the table shows it."""
    parts = []
    if "forward_us" in target:
        parts.append(f"fwd <= {target['forward_us']:g} µs")
    if "forward_backward_us" in target:
        parts.append(f"fwd+bwd <= {target['forward_backward_us']:g} µs")
    if "speedup" in target:
        parts.append(f">= {target['speedup']:g}x")
    if "memory_ratio" in target:
        parts.append(f"mem <= {target['memory_ratio']:g}")
    if "time_vs" in target:
        other, factor = target["time_vs"]
        parts.append(f"time <= {factor:g} x {other}")
    return ", ".join(parts)


def summarize(results, workload_names, targets=None):
    """Rows of the table: one per workload, with ratios, roofline ratio and target checks.

    ``speedup``, ``forward_speedup`` and ``memory_ratio`` are against PyG (the
    issue's targets are); the same against DGL carry a ``_dgl`` suffix.
    ``bound_ms`` / ``bound_ratio``: the roofline bound of the whole step (from
    the gatfast result's ``roofline``) and measured / bound.
    """
    targets = TARGETS if targets is None else targets
    by = {(r["workload"], r["lib"]): r for r in results}
    gatfast_by_name = {r["workload"]: r for r in results if r["lib"] == "gatfast"}
    rows = []
    for name in workload_names:
        g = by.get((name, "gatfast"))
        if g is None:
            continue
        ref_name = name.replace("-pairwise", "-linear")  # PyG and DGL have one backward
        p = by.get((ref_name, "pyg"))
        d = by.get((ref_name, "dgl"))
        row = {"workload": name, "gatfast": g, "pyg": p, "dgl": d}
        if p is not None:
            row.update(ratios(g, p))
        if d is not None:
            row.update({f"{k}_dgl": v for k, v in ratios(g, d).items()})
        roof = g.get("roofline")
        if roof:
            row["bound_ms"] = roof["bound_ms"]
            row["bound_ratio"] = g["forward_backward_median_ms"] / roof["bound_ms"] if roof["bound_ms"] > 0 else None
        target = targets.get(name)
        if target:
            row["target"] = target
            row["checks"] = target_checks(name, target, row, gatfast_by_name)
            row["target_met"] = overall(row["checks"])
        rows.append(row)
    return rows
