"""The markdown report of a roofline run (every table headed by the machine and the command)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from .measure import stats
from .timing import GOALS

SMOKE_TITLE = "smoke run (tiny sizes): not the published results"


def _ms(s):
    return f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}"


def _mb(b):
    return f"{b / 1e6:.2f}"


def context_line(meta):
    m = meta["cpu"]
    return (f"_{m['model']}, {m['usable_cpus']} cores, {m['simd']} ({m['simd_bits']}-bit), "
            f"{meta['threads']} threads, {meta['date']}, `{meta['command']}`_")


def _rate_text(r, median=False):
    """A probe's rate as text: best of its repetitions, or the median."""
    if r["probe"].startswith("stream"):
        return f"{r['gbps_median' if median else 'gbps']:.1f} GB/s"
    if r["probe"] == "gather":
        rows = r["rows_per_s_median"] if median else r["rows_per_s"]
        return f"{rows * r['row_bytes'] / 1e9:.2f} GB/s, {rows / 1e6:.1f} M rows/s"
    text = f"{r['gflops_median' if median else 'gflops']:.1f} GFLOP/s"
    if not median and r["fraction_of_peak"]:
        text += f" ({r['fraction_of_peak'] * 100:.0f}% of {r['theoretical_gflops']:.0f})"
    return text


def _probe_name(r):
    if r["probe"].startswith("stream"):
        return r["probe"]
    if r["probe"] == "gather":
        return (f"gather {r['row_bytes']} B rows, {'prefetch' if r['prefetch'] else 'no prefetch'} "
                f"(table {r['table_bytes'] / 2**20:.0f} MiB)")
    return f"{r['probe']} float32, {r['lanes']} lanes x {r['chains']} chains ({r['registers']} registers)"


def _rates_text(rates, in_cache=False, per_row=True):
    """One line of the ceilings a set of bounds used (a Rates or its asdict)."""
    r = rates if isinstance(rates, dict) else asdict(rates)
    compute = (f"compute {r['flops_numba'] / 1e9:.0f} GFLOP/s (mul+add, Numba kernels) / "
               f"{r['flops_blas'] / 1e9:.0f} GFLOP/s (FMA, BLAS)")
    if in_cache:
        return compute + "."
    gathers = []
    for size in sorted(r["gather"], key=float):
        g = r["gather"][size]
        gathers.append(f"{float(size) / 2**20:.0f} MiB table {g[64] * 1e9:.1f} / {g[256] * 1e9:.1f} ns")
    text = f"read {r['read_bps'] / 1e9:.1f} GB/s, write {r['write_bps'] / 1e9:.1f} GB/s (derived from scale and read); "
    if per_row:
        text += f"a gathered 64 / 256-byte row: {'; '.join(gathers)}; "
    for key, per_step in r.get("passes", {}).items():
        parts = ", ".join(f"{p.split('@')[0]} rows of {int(p.split('@')[1]) / 2**20:.1f} MiB" for p in key.split(";"))
        text += f"a pass gathering ({parts}): {per_step * 1e9:.1f} ns per step; "
    return text + compute + "."


def _extras(d):
    text = " per side, bipartite (x_src, x_dst)" if d.get("bipartite") else ""
    if d.get("edge_dim"):
        text += f", {d['edge_dim']} edge features"
    return text


def markdown(meta, machine_records, rates, results):
    ctx = context_line(meta)
    cpu = meta["cpu"]
    title = "# Roofline: gatfast kernels against this machine's limits"
    if meta["size"] == "tiny":
        title += f" — {SMOKE_TITLE}"
    lines = [title, "",
             f"{ctx}", "",
             f"L3 {cpu['l3_bytes'] / 2**20:.0f} MiB (cache assumed by the model: {rates.cache_bytes / 2**20:.0f} "
             f"MiB), size `{meta['size']}`, {meta['reps']} repetitions per kernel, Numba {meta['numba']}, NumPy "
             f"{meta['numpy']}, threading layer {meta['threading_layer']}. 1-minute load average before / after: "
             f"{meta['load']}. The machine may be shared with other work: compare ratios, not absolute times.",
             ""]
    if meta["size"] == "tiny":
        lines += ["**Tiny size: a smoke test, the figures mean nothing.**", ""]
    lines += ["## Machine", "", ctx, "",
              "Measured at the start of the run: best and median of the repetitions; time spread = 10th-90th "
              "percentile of one probe call.", "",
              "| probe | threads | best | median | time spread |", "|---|---:|---:|---:|---:|"]
    for r in machine_records:
        st = stats(r["samples_s"])
        lines.append(f"| {_probe_name(r)} | {r['threads']} | {_rate_text(r)} | {_rate_text(r, True)} "
                     f"| {st['p10'] * 1e3:.1f}-{st['p90'] * 1e3:.1f} ms |")
    fma = next((r for r in machine_records if r["probe"] == "fma"), None)
    lines += [""]
    if fma and fma["implied_ghz"]:
        lines += [f"The FMA probe's rate is {fma['implied_ghz']:.2f} GHz x 2 full-width FMAs per cycle; the "
                  f"theoretical figure uses the `cpu MHz` of /proc/cpuinfo ({cpu['mhz']:.0f} MHz, nominal on "
                  "virtual machines, so boost clocks can exceed 100%) and assumes two FMA pipes per core.", ""]
    lines += [f"From these (best samples, {rates.threads} threads): {_rates_text(rates)}",
              f"Check of the stream model: triad predicted from the read and write costs "
              f"{meta['triad_predicted_gbps']:.1f} GB/s, measured {meta['triad_measured_gbps']:.1f} GB/s.", "",
              "The bounds of each workload use the same probes run again in that workload's timing rounds "
              "(medians), so that other work on the machine slows kernels and ceilings alike.", ""]
    for res in results:
        d = res["dims"]
        where = "in cache (only compute counts)" if res["in_cache"] else "from memory"
        lines += [f"## {res['workload']}", "", ctx, "",
                  f"{res['description']}: {d['n']:,} nodes, {d['nnz']:,} edges, {d['heads']} x {d['channels']} "
                  f"channels, {d['in_features']} input features{' (sparse)' if d['x_sparse'] else ''}"
                  f"{_extras(d)}, "
                  f"Θ_R {d['theta_r']}. Step footprint {res['footprint_bytes'] / 2**20:.1f} MiB: {where}. "
                  "Bound: streams at the measured bandwidths, gathers at what the same gathers alone took (a probe "
                  "gathering a random row of every array the pass gathers from, per step); ideal-cache bound: the "
                  "L3 also holds its share of those arrays, whose gathers are then free. Ceilings measured in this "
                  f"workload's rounds (medians): {_rates_text(res['rates'], res['in_cache'], per_row=False)}", "",
                  "| kernel | measured ms, median (p10-p90) | bound ms | measured/bound | best/bound | bound by "
                  "| stream MB | gathered rows (tables MiB) | GFLOP | ideal-cache bound ms |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
        for r in res["kernels"]:
            m = r["measured"]
            ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
            best = "—" if r["best_ratio"] is None else f"{r['best_ratio']:.2f}"
            edge = " (edge)" if r["edge"] else ""
            rows = (f"{sum(g['rows'] for g in r['model']['gathers']):,.0f} ({r['gathered_tables'] / 2**20:.1f})"
                    if r["model"]["gathers"] else "—")
            lines.append(
                f"| {r['label']}{edge} | {_ms(m['median'])} ({_ms(m['p10'])}-{_ms(m['p90'])}) | {_ms(r['bound_s'])} "
                f"| {ratio} | {best} | {r['by']} | {_mb(r['read_bytes'] + r['write_bytes'])} "
                f"| {rows} | {r['flops'] / 1e9:.3f} | {_ms(r['ideal_cache']['bound_s'])} |")
        st = res["step"]
        m = st["measured"]
        lines.append(f"| other (Python, allocations, small ops: step minus kernels) | {_ms(st['other_s'])} | — "
                     "| — | — | — | | | | |")
        lines.append(f"| **whole fwd+bwd step** | {_ms(m['median'])} ({_ms(m['p10'])}-{_ms(m['p90'])}) "
                     f"| {_ms(st['bound_s'])} | {st['ratio']:.2f} | {st['best_ratio']:.2f} | sum of kernels "
                     "| | | | |")
        lines.append("")
    lines += ["## Goals", "", ctx, "",
              f"Every edge kernel within {GOALS['edge_kernel']}x of its bound; the whole `large` step within "
              f"{GOALS['large_step']}x (medians).", "",
              "| workload | worst edge kernel ratio | edge goal met | step ratio | step goal met |",
              "|---|---:|---|---:|---|"]
    for res in results:
        g = res["goals"]
        step_met = {True: "yes", False: "**no**", None: "—"}[g.get("step_met")]
        lines.append(f"| {res['workload']} | {g['worst_edge_ratio']:.2f} ({g['worst_edge_kernel']}) "
                     f"| {'yes' if g['edge_met'] else '**no**'} | {res['step']['ratio']:.2f} | {step_met} |")
    lines += ["", "Model assumptions: the docstring of `bench/roofline.py` and `bench/README.md`.", ""]
    return "\n".join(lines)


def jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
