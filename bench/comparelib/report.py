"""The comparison table (markdown), the degree sweep's slopes and its plot."""

from __future__ import annotations

import agreement
import workloads

from .targets import target_text

LIB_NAMES = {"gatfast": "gatfast", "pyg": "PyG", "dgl": "DGL"}
SMOKE_TITLE = "smoke run (tiny sizes): not the published results"
NO_DGL = {name: "no edge features" for name in workloads.EDGE_WORKLOADS}  # DGL's GATv2Conv has none
CURVES = (("gatfast linear", "gatfast", "linear"), ("gatfast pairwise", "gatfast", "pairwise"),
          ("PyG GATv2Conv", "pyg", "linear"), ("DGL GATv2Conv", "dgl", "linear"))


def fit_slope(degrees, times):
    """Least-squares slope of log(time) against log(degree)."""
    import numpy as np

    return float(np.polyfit(np.log(degrees), np.log(times), 1)[0])


def degree_curves(results):
    """(degrees, times in ms) of fwd+bwd for gatfast linear, gatfast pairwise, PyG and DGL."""
    curves = {}
    for label, lib, form in CURVES:
        pts = sorted(
            (int(r["workload"].split("-")[1]), r["forward_backward_median_ms"]) for r in results
            if r["lib"] == lib and r["workload"].startswith("degree-") and r["workload"].endswith(form)
        )
        if len(pts) >= 2:
            curves[label] = ([d for d, _ in pts], [t for _, t in pts])
    return curves


def pairwise_extra(curves):
    """(degrees, ms) of the pairwise form's extra time over the linear form, where positive."""
    lin, pair = curves.get("gatfast linear"), curves.get("gatfast pairwise")
    if not lin or not pair or lin[0] != pair[0]:
        return None
    pts = [(d, p - q) for d, p, q in zip(lin[0], pair[1], lin[1]) if p > q]
    if len(pts) < 2:
        return None
    return [d for d, _ in pts], [t for _, t in pts]


def slopes(curves):
    """Fitted log-log slopes of every curve (all points, last two points)."""
    out = {label: {"all": fit_slope(d, t), "last_two": fit_slope(d[-2:], t[-2:])} for label, (d, t) in curves.items()}
    extra = pairwise_extra(curves)
    if extra:
        out["pairwise minus linear"] = {"all": fit_slope(*extra), "last_two": fit_slope(extra[0][-2:], extra[1][-2:])}
    return out


def _fmt(v, spec=".1f", scale=1.0):
    return "—" if v is None else format(v * scale, spec)


def _met(row):
    met = row.get("target_met")
    if met is None and row.get("target"):
        return "— (not evaluated)"
    return {True: "yes", False: "**no**"}.get(met, "")


def _header(meta, refs, rows):
    names = " and ".join(LIB_NAMES[r] for r in refs)
    title = f"# gatfast vs {names} GATv2Conv"
    if meta.get("size") == "tiny":
        title += f" — {SMOKE_TITLE}"
    simd = f", {meta['simd']}" if meta.get("simd") else ""
    omp = f", OMP_WAIT_POLICY={meta['omp_wait_policy']} in every worker" if meta.get("omp_wait_policy") else ""
    lines = [
        title, "",
        f"{meta['date']}, {meta['cpu']}{simd}, {meta['threads']} threads (Numba = BLAS = torch"
        f"{' = DGL OpenMP' if 'dgl' in refs else ''}){omp}, "
        f"float32, median of {meta['reps']} repetitions after warm-up, allocator: {meta['allocator']}, "
        f"size: {meta['size']}. Each (workload, library) ran in its own fresh process"
        + (f", {meta['rounds']} times (rounds, the libraries of a workload in alternating order), and reports "
           "the median of its rounds. " if meta.get("rounds", 1) > 1 else ". ")
        + f"1-minute load average during the run: {meta['load']}."
        + (f" Command: `{meta['command']}`." if meta.get("command") else ""),
        "",
        "Forward + backward for the single-layer workloads; the full training step "
        "(forward, loss, backward, Adam) for the `-train` workloads. Peak = highest RSS during the checked and "
        "timed calls minus the RSS just before them.",
    ]
    errs = {r: [row[r].get("max_rel_err_vs_gatfast") for row in rows if row.get(r)] for r in refs}
    checked = {r: [e for e in v if e is not None] for r, v in errs.items()}
    if any(checked.values()):
        worst = ", ".join(f"{LIB_NAMES[r]} {max(v):.1e}" for r, v in checked.items() if v)
        lines += ["", "Same weights, same function: before timing, every peer worker loaded gatfast's weights and "
                  "checked its output and every gradient on the very workload it timed against gatfast's (norm-wise "
                  f"relative difference at most {agreement.FLOAT32_TOL:g}, else the run fails; largest: {worst})."]
    if "dgl" in refs:
        lines += ["", f"DGL {meta.get('dgl', '')} runs in its own environment, with gatfast's output bias added "
                  "(DGL's layer lacks it), on the same edges. DGL's `GATv2Conv` has no edge features: the "
                  "edge-feature workloads have no DGL run. Speed-up, memory ratio and targets without a suffix "
                  "are against PyG (the issue's targets); speed-ups against DGL have no targets."]
    if meta.get("roofline"):
        lines += ["", "Roofline columns: the bound of the whole forward + backward step from `bench/rooflib` "
                  "(each kernel's streams, gathers and flops at this machine's rates, probed once at the start "
                  f"of the run: {meta['roofline']['summary']}) and gatfast's measured time over it."]
    return lines


def _cells(row, refs, key, scale, spec):
    g = row["gatfast"]
    cells = [_fmt(g.get(key), spec, scale)]
    for r in refs:
        ref = row.get(r)
        if ref is None and r == "dgl" and row["workload"] in NO_DGL:
            cells.append(f"n/a ({NO_DGL[row['workload']]})")
        else:
            cells.append(_fmt(ref and ref.get(key), spec, scale))
    return cells


def _table(rows, refs, micro):
    """The main table (ms, MB) or the per-call table (µs) of ``rows``."""
    unit, scale, spec = ("µs", 1e3, ".1f") if micro else ("ms", 1.0, ".2f")
    dgl = "dgl" in refs
    cols = ["workload", "nodes", "edges"]
    cols += [f"{LIB_NAMES[r]} fwd {unit}" for r in ["gatfast", *refs]]
    cols += [f"{LIB_NAMES[r]} fwd+bwd {unit}" for r in ["gatfast", *refs]]
    cols += ["speed-up"] + (["speed-up vs DGL"] if dgl else [])
    if not micro:
        cols += [f"{LIB_NAMES[r]} peak MB" for r in ["gatfast", *refs]]
        cols += ["memory ratio"] + (["memory ratio vs DGL"] if dgl else [])
    cols += [f"roofline bound {unit}", "gatfast / bound", "target", "met"]
    lines = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 3) + "---|---|"]
    for row in rows:
        g = row["gatfast"]
        cells = [row["workload"], f"{g['nodes']:,}", f"{g['edges']:,}"]
        cells += _cells(row, refs, "forward_median_ms", scale, spec)
        cells += _cells(row, refs, "forward_backward_median_ms", scale, spec)
        cells += [_fmt(row.get("speedup"), ".2f")] + ([_fmt(row.get("speedup_dgl"), ".2f")] if dgl else [])
        if not micro:
            cells += _cells(row, refs, "peak_mb", 1.0, ".0f")
            cells += [_fmt(row.get("memory_ratio"), ".3f")]
            cells += [_fmt(row.get("memory_ratio_dgl"), ".3f")] if dgl else []
        cells += [_fmt(row.get("bound_ms"), ".3f" if not micro else ".2f", scale), _fmt(row.get("bound_ratio"), ".2f")]
        cells += [target_text(row["target"]) if row.get("target") else "", _met(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(rows, curves, meta, micro_names=()):
    """The whole report: header, main table, per-call table (µs), degree-sweep slopes."""
    refs = [r for r in ("pyg", "dgl") if any(row.get(r) for row in rows)] or ["pyg"]
    main = [row for row in rows if row["workload"] not in micro_names]
    micro = [row for row in rows if row["workload"] in micro_names]
    lines = _header(meta, refs, rows)
    if main:
        lines += [""] + _table(main, refs, micro=False)
    if micro:
        lines += ["", "Per-call cost (tight loops of many calls per sample, microseconds per call):", ""]
        lines += _table(micro, refs, micro=True)
    if curves:
        lines += ["", "Degree sweep (2000 nodes, every in-degree N, 32 -> 32), fitted log-log slope of "
                  "fwd+bwd time against N:", "", "| curve | slope (all N) | slope (last two N) |",
                  "|---|---:|---:|"]
        for label, s in slopes(curves).items():
            name = "pairwise minus linear (the O(N²) Θ_R term alone)" if label == "pairwise minus linear" else label
            lines.append(f"| {name} | {s['all']:.2f} | {s['last_two']:.2f} |")
        lines += ["", "Both gatfast curves include a fixed cost per call (Python, kernel launches, the "
                  "node-wise products: about 1 ms here) that flattens them at small N; the difference of "
                  "the two forms isolates the pairwise term."]
    lines.append("")
    return "\n".join(lines)


def plot(curves, path):
    """Log-log plot of fwd+bwd time against degree; returns False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from gatfast._io import atomic_save_figure

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for label, (deg, t) in curves.items():
        ax.loglog(deg, t, "o-", label=f"{label} (slope {fit_slope(deg, t):.2f})")
    extra = pairwise_extra(curves)
    if extra:
        ax.loglog(*extra, "s--", color="gray",
                  label=f"pairwise minus linear (slope {fit_slope(*extra):.2f})")
    ax.set_xlabel("in-degree N (2000 nodes)")
    ax.set_ylabel("forward + backward time (ms)")
    ax.set_title("GATv2 layer, 32 -> 32, float32")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        atomic_save_figure(fig, path)
    finally:
        plt.close(fig)
    return True
