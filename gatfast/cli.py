"""The ``gatfast`` command line: ``train``, ``evaluate``, ``gradcheck``, ``experiment``."""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A user error: printed without a traceback, exit status 2."""


def _number(kind, accept, expected):
    """An argparse type: parse with ``kind``, keep values for which ``accept`` holds."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not (np.isfinite(value) and accept(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    return parse


_positive_int = _number(int, lambda v: v >= 1, "a whole number >= 1")
_nonneg_int = _number(int, lambda v: v >= 0, "a whole number >= 0")
_rate = _number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
_positive_float = _number(float, lambda v: v > 0.0, "a positive number")
_nonneg_float = _number(float, lambda v: v >= 0.0, "a number >= 0")


def _add_train_options(p):
    p.add_argument("--dataset", default="karate", metavar="PATH",
                   help="'karate' (embedded, the default), a Planetoid/TU .npz file (see data/README.md "
                        "for the formats), a shipped dataset name ('cora', 'mutag') or a generator "
                        "('csbm', 'traffic_scenes')")
    g = p.add_argument_group("model (unset options take the dataset's defaults: the GAT recipe for "
                             "Planetoid files, see README)")
    g.add_argument("--layers", type=_positive_int, help="number of GATv2 layers (recipe: 2)")
    g.add_argument("--hidden", type=_positive_int, help="channels per head in hidden layers (recipe: 8)")
    g.add_argument("--heads", type=_positive_int, help="attention heads in hidden layers (recipe: 8)")
    g.add_argument("--out-heads", type=_positive_int, help="heads of the output layer, averaged (recipe: 1)")
    g.add_argument("--activation", choices=["elu", "relu", "identity"], help="between layers (recipe: elu)")
    g.add_argument("--dropout", type=_rate, help="feature dropout before every layer (recipe: 0.6)")
    g.add_argument("--attention-dropout", type=_rate, help="dropout on attention weights (recipe: 0.6)")
    g.add_argument("--residual", action="store_true", help="add a linear skip connection to every layer")
    g.add_argument("--readout", choices=["mean", "sum", "max"],
                   help="graph-level pooling for graph classification (default: sum)")
    g.add_argument("--attention-activation", choices=["leaky_relu", "softplus"], default="leaky_relu",
                   help="activation inside the attention score (softplus: GAT+)")
    g.add_argument("--root-weight", choices=["theta_r", "theta_n"], default=None,
                   help="GAT+ root weight instead of self loops in the attention")
    g.add_argument("--no-normalize-features", dest="normalize_features", action="store_false",
                   help="do not row-normalise Planetoid features (the recipe normalises)")
    o = p.add_argument_group("optimisation")
    o.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], help="(recipe: adam)")
    o.add_argument("--lr", type=_positive_float, help="learning rate (recipe: 0.005)")
    o.add_argument("--weight-decay", type=_nonneg_float, help="L2 penalty, decoupled for adamw (recipe: 5e-4)")
    o.add_argument("--momentum", type=_nonneg_float, default=0.0, help="SGD momentum (default: 0)")
    o.add_argument("--nesterov", action="store_true", help="Nesterov momentum for SGD")
    o.add_argument("--epochs", type=_positive_int, help="maximum epochs (recipe: 300)")
    o.add_argument("--patience", type=_nonneg_int,
                   help="early stopping patience in epochs, 0 disables (recipe: 100)")
    o.add_argument("--batch-size", type=_positive_int, default=32, help="graphs per batch (graph datasets)")
    o.add_argument("--clip-norm", type=_positive_float, help="clip the global gradient norm")
    o.add_argument("--folds", type=_positive_int,
                   help="k-fold cross-validation for graph classification (e.g. 10 for MUTAG)")
    o.add_argument("--theta-r", choices=["linear", "pairwise"], default="linear",
                   help="form of the Θ_R gradient term: O(N) rearranged or the paper's O(N²) pairwise sum")
    o.add_argument("--seed", type=int, default=0, help="random seed (initialisation, dropout, batches)")
    o.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="floating-point type of features and parameters (default: float32)")
    o.add_argument("--threads", type=_positive_int, help="Numba threads (default: all cores)")
    r = p.add_argument_group("output")
    r.add_argument("--save", metavar="PATH", help="write the trained model as a checkpoint (.npz)")
    r.add_argument("--metrics-json", metavar="PATH", help="write the final metrics as JSON")
    r.add_argument("--diagnose", action="store_true",
                   help="record Θ_R gradient flow and gradient norms per epoch to a CSV (and a PNG plot "
                        "when matplotlib is installed) next to --save, or in ./runs/")
    r.add_argument("--quiet", action="store_true", help="print only the final metrics")
    r.add_argument("--log-every", type=_positive_int, default=10, help="progress line every N epochs")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="gatfast",
        description="Train GATv2 graph attention networks on sparse graphs on the CPU, "
                    "with closed-form gradients in Numba kernels.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("train", help="train a model (default: the embedded karate club)",
                       description="Train a GATv2 network and print per-epoch progress and the final "
                                   "metrics. With no options: the karate club, the GAT recipe.")
    _add_train_options(p)

    e = sub.add_parser("evaluate", help="evaluate a saved model on a dataset",
                       description="Load a checkpoint written by 'gatfast train --save' and print its metrics.")
    e.add_argument("checkpoint", help="path of the .npz checkpoint")
    e.add_argument("--dataset", default=None,
                   help="dataset to evaluate on (default: the one the model was trained on, if it is "
                        "'karate' or the file still exists)")
    e.add_argument("--metrics-json", metavar="PATH", help="write the metrics as JSON")
    e.add_argument("--threads", type=_positive_int, help="Numba threads")

    gc = sub.add_parser("gradcheck", help="finite-difference check of every gradient on a random graph",
                        description="Compare the closed-form gradients of a float64 layer with central "
                                    "finite differences; prints the worst relative error.")
    gc.add_argument("--nodes", type=_positive_int, default=12, help="nodes of the random graph (>= 2)")
    gc.add_argument("--in-features", type=_positive_int, default=5, help="input features per node (default: 5)")
    gc.add_argument("--out-features", type=_positive_int, default=4, help="channels per head (default: 4)")
    gc.add_argument("--heads", type=_positive_int, default=2, help="attention heads (default: 2)")
    gc.add_argument("--mean", action="store_true", help="average the heads instead of concatenating")
    gc.add_argument("--theta-r", choices=["linear", "pairwise"], default="linear",
                    help="form of the Θ_R gradient term to check (default: linear)")
    gc.add_argument("--attention-activation", choices=["leaky_relu", "softplus"], default="leaky_relu",
                    help="activation inside the attention score (softplus: GAT+)")
    gc.add_argument("--root-weight", choices=["theta_r", "theta_n"], default=None,
                    help="GAT+ root weight instead of self loops in the attention")
    gc.add_argument("--seed", type=int, default=0, help="seed of the random graph, features and weights")
    gc.add_argument("--tolerance", type=_positive_float, default=1e-6,
                    help="exit with status 1 if the worst relative error exceeds this")

    ex = sub.add_parser("experiment", help="run a packaged experiment",
                        description="Run a packaged experiment; 'pitfall' compares GATv2 and the GAT+ "
                                    "variants on small sparse graphs.")
    ex.add_argument("name", choices=["pitfall"], help="which experiment")
    ex.add_argument("--seeds", type=_positive_int, default=10, help="training runs per variant")
    ex.add_argument("--quick", action="store_true", help="a small, fast version (for smoke tests)")
    ex.add_argument("--out", default="runs/pitfall", help="directory for the CSV, Markdown table and plot")
    ex.add_argument("--threads", type=_positive_int, help="Numba threads")
    return parser


def _write_json(path, obj):
    from ._io import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _print_metrics(metrics):
    for key in sorted(metrics):
        value = metrics[key]
        print(f"{key:>22s}: {value:.4f}" if isinstance(value, float) else f"{key:>22s}: {value}")


def _cmd_train(args):
    from .train import train

    callback, recorder = None, None
    if args.diagnose:
        from .diagnostics import ThetaRFlowRecorder

        base = os.path.splitext(args.save)[0] if args.save else os.path.join("runs", "diagnose")
        os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
        recorder = ThetaRFlowRecorder(base + "_diagnostics.csv")
        callback = recorder.fit_callback()

    # train() loads the dataset itself so that a checkpoint records where it came from
    result = train(
        args.dataset, layers=args.layers, hidden=args.hidden, heads=args.heads, out_heads=args.out_heads,
        activation=args.activation, dropout=args.dropout, attention_dropout=args.attention_dropout,
        residual=args.residual, readout=args.readout, optimizer=args.optimizer, lr=args.lr,
        weight_decay=args.weight_decay, momentum=args.momentum, nesterov=args.nesterov, epochs=args.epochs,
        patience=args.patience, batch_size=args.batch_size, clip_norm=args.clip_norm, theta_r=args.theta_r,
        attention_activation=args.attention_activation, root_weight=args.root_weight,
        normalize_features=args.normalize_features, folds=args.folds, seed=args.seed,
        dtype=np.dtype(args.dtype), threads=args.threads, save=args.save, quiet=args.quiet,
        log_every=args.log_every, callback=callback,
    )
    print("final metrics:")
    _print_metrics(result.metrics)
    if recorder is not None:
        print(f"diagnostics written to {recorder.path}")
        try:
            png = os.path.splitext(recorder.path)[0] + ".png"
            recorder.plot(png)
            print(f"diagnostics plot written to {png}")
        except ImportError:
            print("matplotlib is not installed: no diagnostics plot (pip install gatfast[plot])")
    if args.save:
        print(f"model saved to {args.save}")
    if args.metrics_json:
        _write_json(args.metrics_json, result.metrics)
    return 0


def _cmd_evaluate(args):
    from .checkpoint import load_checkpoint
    from .data import load_dataset
    from .train import evaluate, num_threads

    model, meta = load_checkpoint(args.checkpoint)
    source = args.dataset or meta.get("dataset")
    if source is None:
        raise CLIError("the checkpoint does not name its dataset: pass --dataset PATH")
    opts = dict(dtype=np.dtype(model.get_config()["dtype"]),
                normalize_features=meta.get("normalize_features", True))
    if args.dataset is None:
        try:
            ds = load_dataset(source, **opts)
        except (OSError, ValueError) as exc:
            raise CLIError(f"cannot load the checkpoint's dataset {source!r} ({exc}): pass --dataset PATH"
                           ) from None
    else:
        ds = load_dataset(source, **opts)
    splits = _saved_splits(meta, ds, same=args.dataset is None or _same_source(args.dataset, meta))
    with num_threads(args.threads):
        metrics = evaluate(model, ds, splits=splits)
    what = "" if splits is not None or not hasattr(ds, "graphs") else " (all graphs as the test split)"
    print(f"model {args.checkpoint} on {ds.name}{what}:")
    _print_metrics(metrics)
    if args.metrics_json:
        _write_json(args.metrics_json, metrics)
    return 0


def _same_source(path, meta):
    from .train import _dataset_source

    return _dataset_source(path) == meta.get("dataset")


def _saved_splits(meta, ds, same):
    """The training run's graph splits, when evaluating on the dataset they index."""
    splits = meta.get("splits")
    if not same or splits is None or not hasattr(ds, "graphs"):
        return None
    try:
        out = {k: np.asarray(v, dtype=np.int64) for k, v in splits.items()}
    except (AttributeError, TypeError, ValueError):
        raise CLIError("the checkpoint's 'splits' entry is malformed") from None
    if any(v.ndim != 1 or (v.size and (v.min() < 0 or v.max() >= len(ds.graphs))) for v in out.values()):
        raise CLIError(f"the checkpoint's splits do not index the {len(ds.graphs)} graphs of {ds.name!r}")
    return {k: v for k, v in out.items() if v.size}


def _cmd_gradcheck(args):
    from .gradcheck import gradcheck_layer

    if args.nodes < 2:
        raise CLIError("--nodes must be >= 2")
    errors = gradcheck_layer(
        num_nodes=args.nodes, in_features=args.in_features, out_features=args.out_features,
        heads=args.heads, concat=not args.mean, theta_r=args.theta_r, seed=args.seed,
        attention_activation=args.attention_activation, root_weight=args.root_weight,
    )
    for name, err in errors.items():
        print(f"{name:>6s}: relative error {err:.3e}")
    worst = max(errors, key=errors.get)
    print(f"worst relative error: {errors[worst]:.3e} ({worst})")
    return 0 if errors[worst] <= args.tolerance else 1


def _cmd_experiment(args):
    from .experiments import run_pitfall

    # one thread by default: these graphs are tiny, and parallel launch costs dominate
    run_pitfall(seeds=args.seeds, quick=args.quick, out_dir=args.out, threads=args.threads or 1)
    return 0


def main(argv=None):
    """Entry point of the ``gatfast`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"train": _cmd_train, "evaluate": _cmd_evaluate, "gradcheck": _cmd_gradcheck,
                "experiment": _cmd_experiment}
    from .train import TrainingDiverged

    try:
        return handlers[args.command](args)
    except (CLIError, ValueError, OSError, TrainingDiverged) as exc:
        print(f"gatfast {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
