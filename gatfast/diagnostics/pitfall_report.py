"""Tables, CSV and plot of the pitfall experiment (:mod:`gatfast.diagnostics.pitfall`)."""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from .._io import atomic_save_figure, atomic_write_text
from .plotting import pyplot

__all__ = [
    "FAIL_FRACTION",
    "TRAINING",
    "csv_text",
    "markdown_report",
    "plot",
    "report_title",
    "summarise",
    "write",
]

#: Optimisation settings of every run of the experiment.
TRAINING = {"lr": 0.005, "batch_size": 32, "activation": "elu"}

#: A run "fails to learn" if its final validation MSE is not below this
#: fraction of the predict-the-training-mean baseline.
FAIL_FRACTION = 0.9


def summarise(runs, archs, variants):
    table = []
    for arch in archs:
        for variant in variants:
            rows = [r for r in runs if r["arch"] == arch and r["variant"] == variant]
            val = np.array([r["val_mse"] for r in rows])
            test = np.array([r["test_mse"] for r in rows])
            table.append(
                {
                    "arch": arch,
                    "variant": variant,
                    "runs": len(rows),
                    "val_mse_mean": float(np.nanmean(val)) if np.any(~np.isnan(val)) else math.nan,
                    "val_mse_std": float(np.nanstd(val)) if np.any(~np.isnan(val)) else math.nan,
                    "test_mse_mean": float(np.nanmean(test)) if np.any(~np.isnan(test)) else math.nan,
                    "test_mse_std": float(np.nanstd(test)) if np.any(~np.isnan(test)) else math.nan,
                    "fail_rate": float(np.mean([r["fails_to_learn"] for r in rows])),
                    "no_gain_rate": float(np.mean([r["no_gain_over_linear"] for r in rows])),
                    "dead_theta_r": float(np.mean([r["dead_theta_r_mean"] for r in rows])),
                    "dead_attention": float(np.mean([r["dead_attention_mean"] for r in rows])),
                    "grad_theta_r_median": float(np.median([r["grad_theta_r_median"] for r in rows])),
                }
            )
    return table


def report_title(quick):
    """The heading of ``summary.md`` and the plot's title; smoke-sized runs say so."""
    title = "Θ_R pitfall experiment"
    return title + ": quick smoke run, not the published result" if quick else title


def markdown_report(table, runs, sizes, seeds, command, title):
    base = {}
    for r in runs:
        base.setdefault(r["seed"], (r["baseline_mean_mse"], r["baseline_linear_mse"]))
    means = np.array([b[0] for b in base.values()])
    lins = np.array([b[1] for b in base.values()])
    lines = [
        f"# {title}",
        "",
        f"`{command}`: {len(seeds)} seeds per variant, {sizes['num_graphs']} scenes per seed "
        f"(80/10/10 split), {sizes['epochs']} epochs of Adam (lr {TRAINING['lr']}, batch "
        f"{TRAINING['batch_size']}), float32.",
        "",
        "| network | variant | val MSE (mean ± std) | test MSE (mean ± std) | fails to learn | "
        "no gain over node-only linear | dead Θ_R | dead attention path | median ‖∇Θ_R‖ |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in table:
        lines.append(
            f"| {t['arch']} | {t['variant']} | {t['val_mse_mean']:.4f} ± {t['val_mse_std']:.4f} | "
            f"{t['test_mse_mean']:.4f} ± {t['test_mse_std']:.4f} | {t['fail_rate']:.0%} | "
            f"{t['no_gain_rate']:.0%} | {t['dead_theta_r']:.2f} | {t['dead_attention']:.2f} | "
            f"{t['grad_theta_r_median']:.3g} |"
        )
    lines += [
        "",
        f"Baselines on the same validation sets: predict the training mean "
        f"{means.mean():.4f} ± {means.std():.4f}; node-only linear regression (own features, no "
        f"graph) {lins.mean():.4f} ± {lins.std():.4f}.",
        "",
        f"*Fails to learn*: final validation MSE not below {FAIL_FRACTION:g} × the predict-the-mean "
        "baseline (or training diverged). *No gain over node-only linear*: final validation MSE not "
        "below the node-only linear baseline, i.e. nothing was learned from the neighbours. "
        "*Dead Θ_R*: fraction of (node, head, channel) entries whose Θ_R gradient contribution is "
        "structurally zero (`gatfast.diagnostics`), on the first training batch of each epoch, "
        "averaged over layers, epochs and seeds; *dead attention path*: the same for the attention "
        "part alone (differs only for theta_r, whose root term always passes gradient). "
        "‖∇Θ_R‖: norm of the W_r and b_r gradients of all layers on that batch, median over epochs "
        "and seeds.",
    ]
    return "\n".join(lines) + "\n"


def csv_text(rows, columns):
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()


def write(path, text):
    atomic_write_text(path, text)


def plot(curves, archs, variants, runs, path, title):
    plt = pyplot()
    fig, axes = plt.subplots(len(archs), 3, figsize=(15, 4 * len(archs)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for a, arch in enumerate(archs):
        ax_dead, ax_grad, ax_val = axes[a]
        for v, variant in enumerate(variants):
            c = curves[(arch, variant)]
            ep = np.arange(1, c["dead"].shape[1] + 1)
            color = colors[v % len(colors)]
            style = dict(color=color, label=variant, ls="--" if variant.startswith("softplus+") else "-")
            ax_dead.plot(ep, np.nanmean(c["dead"], axis=0), **style)
            ax_grad.plot(ep, np.nanmedian(c["grad_theta_r"], axis=0), **style)
            lo, med, hi = np.nanpercentile(c["val_loss"], [25, 50, 75], axis=0)
            ax_val.plot(ep, med, **style)
            ax_val.fill_between(ep, lo, hi, color=color, alpha=0.12)
        lin = np.mean([r["baseline_linear_mse"] for r in runs if r["arch"] == arch])
        ax_val.axhline(lin, color="k", ls="--", lw=1, label="node-only linear")
        ax_dead.set_title(f"{arch}: dead Θ_R fraction (mean over seeds)")
        ax_dead.set_ylim(-0.02, 1.02)
        ax_grad.set_title(f"{arch}: ‖∇Θ_R‖ (median over seeds)")
        ax_grad.set_yscale("log")
        ax_val.set_title(f"{arch}: validation MSE (median, quartiles)")
        ax_val.set_yscale("log")
        for ax in (ax_dead, ax_grad, ax_val):
            ax.set_xlabel("epoch")
        ax_val.legend(fontsize="small")
    fig.suptitle(title, fontsize="x-large")
    fig.tight_layout()
    atomic_save_figure(fig, path)
    plt.close(fig)


