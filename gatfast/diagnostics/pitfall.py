"""Packaged experiments.

``run_pitfall`` (``gatfast experiment pitfall``): GATv2 against the GAT+
variants on small, sparse traffic scenes (:func:`gatfast.data.make_traffic_scenes`),
where most nodes have 0 to 2 neighbours and GATv2's Θ_R gets no gradient
from most of them (``docs/VARIANTS.md``). Every variant is trained with the
same seeds (data, split, initialisation and batch order are all derived
from the seed), and the Θ_R gradient flow is recorded on the first training
batch of every epoch.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .. import _paths, _runtime
from .. import _validate as V
from .._io import git_tracked_files
from ..data import make_traffic_scenes, without_edge_features
from ..models import GATv2Network
from ..optim import make_optimizer
from ..training import TrainingDiverged, fit
from ..training.splits import default_graph_splits
from .network import theta_r_flow_network
from .pitfall_report import (
    FAIL_FRACTION,
    TRAINING,
    csv_text,
    markdown_report,
    plot,
    report_title,
    summarise,
    write,
)

__all__ = ["PITFALL_ARCHS", "PITFALL_VARIANTS", "PitfallResult", "pitfall_baselines", "run_pitfall"]

#: The layer variants compared (keyword arguments of GATv2Network).
PITFALL_VARIANTS = {
    "GATv2": {},
    "softplus": {"attention_activation": "softplus"},
    "theta_r": {"root_weight": "theta_r"},
    "theta_n": {"root_weight": "theta_n"},
    "softplus+theta_r": {"attention_activation": "softplus", "root_weight": "theta_r"},
    "softplus+theta_n": {"attention_activation": "softplus", "root_weight": "theta_n"},
}

#: Network shapes: the paper's one-layer GATv2 (2 output channels, one head)
#: and a two-layer network (4 heads of 8 channels, then the output layer).
PITFALL_ARCHS = {
    "1 layer": {"num_layers": 1},
    "2 layers": {"num_layers": 2, "hidden_features": 8, "heads": 4},
}

FULL = {"num_graphs": 300, "epochs": 200}
DEFAULT_OUT = os.path.join("runs", "pitfall")
QUICK = {"num_graphs": 40, "epochs": 5}


@dataclass
class PitfallResult:
    """What :func:`run_pitfall` returns.

    Attributes
    ----------
    table : list of dict
        One row per (architecture, variant): the summary also written to
        ``summary.csv`` and ``summary.md``.
    runs : list of dict
        One row per training run (``runs.csv``).
    curves : dict
        ``(arch, variant) -> dict of arrays (seeds, epochs)``: ``dead``,
        ``attention_dead``, ``grad_theta_r``, ``val_loss``.
    files : dict
        Paths written, by kind (``"runs"``, ``"summary_csv"``, ``"summary_md"``,
        ``"curves"``, ``"plot"``; no ``"plot"`` without matplotlib).
    markdown : str
        The report written to ``summary.md``.
    title : str
        Its heading and the plot's title; a ``quick`` run says it is a
        smoke run, not the published result.
    """

    table: list
    runs: list
    curves: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    markdown: str = ""
    title: str = ""


def pitfall_baselines(dataset, splits):
    """Validation MSE of two graph-free predictors, fitted on the training graphs.

    * ``mean``: every node predicts the mean training target;
    * ``linear``: least squares on the node's own features (with intercept):
      the best a per-node linear model does without the neighbours.

    The MSE is the mean over all target entries, as :func:`gatfast.nn.mse_loss`.
    """
    _, x_tr, _, y_tr = dataset.batch(splits["train"])
    _, x_va, _, y_va = dataset.batch(splits["val"])
    x_tr = x_tr.astype(np.float64)
    x_va = x_va.astype(np.float64)
    y_tr = y_tr.astype(np.float64)
    y_va = y_va.astype(np.float64)
    mean = float(np.mean((y_va - y_tr.mean(axis=0)) ** 2))
    a_tr = np.concatenate([np.ones((len(x_tr), 1)), x_tr], axis=1)
    a_va = np.concatenate([np.ones((len(x_va), 1)), x_va], axis=1)
    coef = np.linalg.lstsq(a_tr, y_tr, rcond=None)[0]
    linear = float(np.mean((a_va @ coef - y_va) ** 2))
    return {"mean": mean, "linear": linear}


def _run_one(arch, variant, seed, dataset, splits, base, sizes, dtype):
    kw = dict(PITFALL_ARCHS[arch])
    model = GATv2Network(
        dataset.num_features,
        kw.pop("hidden_features", 8),
        dataset.num_targets,
        heads=kw.pop("heads", 1),
        activation=TRAINING["activation"],
        dropout=0.0,
        attention_dropout=0.0,
        dtype=dtype,
        seed=seed,
        **kw,
        **PITFALL_VARIANTS[variant],
    )
    optimizer = make_optimizer("adam", model.parameters(), TRAINING["lr"])
    epochs = sizes["epochs"]
    curves = {k: np.full(epochs, np.nan) for k in ("dead", "attention_dead", "grad_theta_r", "val_loss")}

    def callback(epoch, model, grads, row):
        flows = theta_r_flow_network(model, row["graph"], row["x"], grads)
        curves["dead"][epoch - 1] = np.mean([f.dead_fraction for f in flows])
        curves["attention_dead"][epoch - 1] = np.mean([f.attention_mask.mean() for f in flows])
        sq = sum(f.grad_norms.get(k, 0.0) ** 2 for f in flows for k in ("W_r", "b_r"))
        curves["grad_theta_r"][epoch - 1] = math.sqrt(sq)

    t0 = time.perf_counter()
    diverged = False
    try:
        result = fit(
            model,
            dataset,
            optimizer,
            epochs=epochs,
            patience=None,
            batch_size=TRAINING["batch_size"],
            splits=splits,
            seed=seed,
            quiet=True,
            callback=callback,
        )
        history = result.history
        val = float(history[-1]["val_loss"])
        test = float(result.metrics["test_loss"])
        for k, row in enumerate(history):
            curves["val_loss"][k] = row["val_loss"]
    except TrainingDiverged:
        diverged, val, test = True, math.nan, math.nan
    fails = diverged or not val < FAIL_FRACTION * base["mean"]
    no_gain = diverged or not val < base["linear"]
    row = {
        "arch": arch,
        "variant": variant,
        "seed": seed,
        "val_mse": val,
        "test_mse": test,
        "baseline_mean_mse": base["mean"],
        "baseline_linear_mse": base["linear"],
        "fails_to_learn": bool(fails),
        "no_gain_over_linear": bool(no_gain),
        "diverged": diverged,
        "dead_theta_r_first": float(curves["dead"][0]),
        "dead_theta_r_mean": float(np.nanmean(curves["dead"])),
        "dead_theta_r_last": float(curves["dead"][~np.isnan(curves["dead"])][-1])
        if np.any(~np.isnan(curves["dead"]))
        else math.nan,
        "dead_attention_mean": float(np.nanmean(curves["attention_dead"])),
        "grad_theta_r_median": float(np.nanmedian(curves["grad_theta_r"])),
        "seconds": time.perf_counter() - t0,
    }
    return row, curves


def run_pitfall(
    seeds=10,
    quick=False,
    out_dir=DEFAULT_OUT,
    variants=None,
    archs=None,
    threads=1,
    dtype=np.float32,
    quiet=False,
    update_tracked=False,
):
    """Train GATv2 and the GAT+ variants on small sparse scenes, over many seeds.

    Parameters
    ----------
    seeds : int, default 10
        Training runs per (architecture, variant); run ``s`` uses seed ``s``
        for the scenes, the split, the initialisation and the batch order, so
        all variants see the same data.
    quick : bool, default False
        A small version (40 scenes, 5 epochs) for smoke tests; the full one
        has 300 scenes and 200 epochs per run.
    out_dir : str or path-like
        Receives ``runs.csv``, ``summary.csv``, ``summary.md``,
        ``curves.csv`` and ``pitfall.png`` (the plot only with matplotlib),
        each written atomically. Checked before the first run: it is created
        if missing when its parent exists (the default ``runs/pitfall`` with
        its parent), and a directory holding files tracked by git (published
        results such as ``docs/results/pitfall``) is refused unless
        ``update_tracked``.
    variants, archs : sequence of str, optional
        Subsets of :data:`PITFALL_VARIANTS` and :data:`PITFALL_ARCHS` (default: all).
    threads : int or None, default 1
        Numba threads. The scenes are tiny (a batch has ~250 nodes), so one
        thread is fastest; results do not depend on it.
    dtype : numpy.float32 or numpy.float64
    quiet : bool
        No progress output.
    update_tracked : bool, default False
        Allow writing into a directory with files tracked by git (detected
        with ``git ls-files``; without git or outside a repository the check
        is skipped).

    Returns
    -------
    PitfallResult
    """
    seeds = V.check_int(seeds, "seeds", 1)
    variants = list(PITFALL_VARIANTS) if variants is None else list(variants)
    archs = list(PITFALL_ARCHS) if archs is None else list(archs)
    for v in variants:
        V.check_choice(v, "variants", set(PITFALL_VARIANTS))
    for a in archs:
        V.check_choice(a, "archs", set(PITFALL_ARCHS))
    dtype = V.check_dtype(dtype)
    sizes = QUICK if quick else FULL
    out_dir = os.fspath(out_dir)
    tracked = git_tracked_files(out_dir)
    if tracked and not update_tracked:
        raise ValueError(
            f"out_dir {out_dir!r} holds {len(tracked)} file(s) tracked by git (published results): "
            "write elsewhere, or pass update_tracked=True (--update-tracked) to refresh them"
        )
    if _paths.check_output_dir("out_dir", out_dir, create_parents=out_dir == DEFAULT_OUT) and not quiet:
        print(f"created the output directory {out_dir}")
    command = f"gatfast experiment pitfall --seeds {seeds}" + (" --quick" if quick else "")
    title = report_title(quick)

    runs, curves = [], {}
    t0 = time.perf_counter()
    with _runtime.threads(threads):
        for seed in range(seeds):
            dataset = without_edge_features(make_traffic_scenes(num_graphs=sizes["num_graphs"], seed=seed, dtype=dtype))
            splits = default_graph_splits(dataset, seed)
            base = pitfall_baselines(dataset, splits)
            for arch in archs:
                for variant in variants:
                    row, c = _run_one(arch, variant, seed, dataset, splits, base, sizes, dtype)
                    runs.append(row)
                    for k, arr in c.items():
                        curves.setdefault((arch, variant), {}).setdefault(k, []).append(arr)
                    if not quiet:
                        print(
                            f"seed {seed:2d}  {arch:8s}  {variant:17s} val MSE {row['val_mse']:.4f}  "
                            f"dead Θ_R {row['dead_theta_r_mean']:.2f}  ({row['seconds']:.1f} s)",
                            flush=True,
                        )
    curves = {k: {name: np.vstack(arrs) for name, arrs in c.items()} for k, c in curves.items()}
    table = summarise(runs, archs, variants)
    markdown = markdown_report(table, runs, sizes, range(seeds), command, title)

    files = {
        "runs": os.path.join(out_dir, "runs.csv"),
        "summary_csv": os.path.join(out_dir, "summary.csv"),
        "summary_md": os.path.join(out_dir, "summary.md"),
        "curves": os.path.join(out_dir, "curves.csv"),
    }
    write(files["runs"], csv_text(runs, list(runs[0])))
    write(files["summary_csv"], csv_text(table, list(table[0])))
    write(files["summary_md"], markdown)
    curve_rows = []
    for (arch, variant), c in curves.items():
        for e in range(c["dead"].shape[1]):
            curve_rows.append(
                {
                    "arch": arch,
                    "variant": variant,
                    "epoch": e + 1,
                    "dead_theta_r_mean": float(np.nanmean(c["dead"][:, e])),
                    "dead_attention_mean": float(np.nanmean(c["attention_dead"][:, e])),
                    "grad_theta_r_median": float(np.nanmedian(c["grad_theta_r"][:, e])),
                    "val_mse_mean": float(np.nanmean(c["val_loss"][:, e])),
                    "val_mse_std": float(np.nanstd(c["val_loss"][:, e])),
                }
            )
    write(files["curves"], csv_text(curve_rows, list(curve_rows[0])))
    try:
        files["plot"] = os.path.join(out_dir, "pitfall.png")
        plot(curves, archs, variants, runs, files["plot"], title)
    except ImportError:
        files.pop("plot")
        if not quiet:
            print("matplotlib is not installed: no plot (pip install 'gatfast[plot]')")
    if not quiet:
        print()
        print(markdown)
        print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s; written to {out_dir}")
    return PitfallResult(table=table, runs=runs, curves=curves, files=files, markdown=markdown, title=title)
