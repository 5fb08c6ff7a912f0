"""The ``gatfast`` command line: ``train``, ``sweep``, ``evaluate``, ``gradcheck``, ``experiment``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import numpy as np

from .training.config import PRESETS, Option, TrainConfig

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A user error: printed without a traceback, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the message, then where to find help (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _option_type(option):
    """An argparse type that parses text as the option's kind and checks it with the config's rules."""
    kind = {int: int, float: float}.get(option.kind, str)

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {_describe(option)}, got {text!r}") from None
        try:
            return option.check("the value", value)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _describe(option):
    if option.kind is int:
        return "a whole number" + (f" >= {option.low:g}" if option.low is not None else "")
    if option.kind is float:
        return "a number"
    return "a value"


def _default_text(name, default):
    """The default, and where a preset differs from it."""
    parts = [f"default: {default}"]
    for preset, values in PRESETS.items():
        if name in values:
            parts.append(f"preset {preset}: {values[name]}")
    return "; ".join(parts)


def _add_config_options(parser):
    """One flag per TrainConfig field, grouped as in the dataclass.

    Every default is ``argparse.SUPPRESS``: a flag not given sets nothing,
    so the preset (chosen by the dataset, or by ``--preset``) decides.
    """
    groups = {}
    for name, (default, option) in TrainConfig.options().items():
        group = groups.get(option.group)
        if group is None:
            group = groups[option.group] = parser.add_argument_group(option.group)
        flag = "--" + name.replace("_", "-")
        help_text = f"{option.help} ({_default_text(name, default)})"
        if option.kind is bool:
            if default:
                group.add_argument("--no-" + name.replace("_", "-"), dest=name, action="store_const", const=False,
                                   default=argparse.SUPPRESS, help=f"turn off: {help_text}")
            else:
                group.add_argument(flag, dest=name, action="store_const", const=True, default=argparse.SUPPRESS,
                                   help=help_text)
            continue
        kwargs = dict(dest=name, default=argparse.SUPPRESS, help=help_text)
        if option.choices is not None:
            kwargs["choices"] = list(option.choices)
        else:
            kwargs["type"] = _option_type(option)
            kwargs["metavar"] = {os.PathLike: "PATH", tuple: "K[,K...]"}.get(option.kind, name.upper())
        group.add_argument(flag, **kwargs)


def _add_train_options(p):
    p.add_argument("--dataset", default="karate", metavar="NAME_OR_PATH",
                   help="'karate' (embedded, the default), a shipped dataset ('cora', 'mutag'), a generator "
                        "('csbm', 'traffic_scenes') or a Planetoid/TU .npz file (formats in docs/DATA.md)")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="start from this recipe instead of the dataset's own (gat: node classification, "
                        "tu: graph classification, scenes: per-node regression on many graphs)")
    _add_config_options(p)


_positive_int = _option_type(Option("", "", int, low=1))
_positive_float = _option_type(Option("", "", float, low=0.0, low_open=True))


def build_parser():
    parser = _Parser(
        prog="gatfast",
        description="Train GATv2 graph attention networks on sparse graphs on the CPU, "
                    "with closed-form gradients in Numba kernels.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("train", help="train a model (default: the embedded karate club)",
                       description="Train a GATv2 network and print per-epoch progress and the final "
                                   "metrics. With no options: the karate club, the GAT recipe.")
    _add_train_options(p)

    sw = sub.add_parser("sweep", help="train a grid of configurations, as tasks on a Dask cluster",
                        description="Train one model per combination of the --grid values (each a one-process "
                                    "run; with --workers N or --scheduler ADDRESS as tasks on a Dask cluster: pip "
                                    "install gatfast[distributed]) and print a table of their final metrics.")
    sw.add_argument("--grid", nargs="+", action="append", required=True, metavar=("OPTION", "VALUE"),
                    help="an option and the values to try, e.g. --grid lr 0.01 0.005 --grid fanout 10,10 5,5 "
                         "(repeat for more options; every combination is trained)")
    sw.add_argument("--csv", metavar="PATH", help="also write the table, every metric, as CSV")
    _add_train_options(sw)

    e = sub.add_parser("evaluate", help="evaluate a saved model on a dataset",
                       description="Load a checkpoint written by 'gatfast train --save' and print its metrics.")
    e.add_argument("checkpoint", help="path of the .npz checkpoint")
    e.add_argument("--dataset", default=None,
                   help="dataset to evaluate on (default: the one the model was trained on, if it is "
                        "'karate' or the file still exists)")
    e.add_argument("--metrics-json", metavar="PATH", help="write the metrics as JSON")
    e.add_argument("--threads", type=_positive_int, help="Numba threads")
    norm = e.add_mutually_exclusive_group()
    norm.add_argument("--normalize-features", dest="normalize_features", action="store_const", const=True,
                      default=None, help="row-normalise the features (default: as the checkpoint records; "
                                         "required when it records nothing)")
    norm.add_argument("--no-normalize-features", dest="normalize_features", action="store_const", const=False,
                      help="use the raw features (default: as the checkpoint records)")

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
    gc.add_argument("--edge-dim", type=_positive_int, default=None,
                    help="check edge features too: D random attributes per edge (default: none)")
    gc.add_argument("--bipartite", action="store_true",
                    help="check a bipartite layer on a block of --nodes targets reading --nodes + 3 sources")
    gc.add_argument("--seed", type=int, default=0, help="seed of the random graph, features and weights")
    gc.add_argument("--tolerance", type=_positive_float, default=1e-6,
                    help="exit with status 1 if the worst relative error exceeds this")

    ex = sub.add_parser("experiment", help="run a packaged experiment",
                        description="Run a packaged experiment; 'pitfall' compares GATv2 and the GAT+ "
                                    "variants on small sparse graphs.")
    ex.add_argument("name", choices=["pitfall"], help="which experiment")
    ex.add_argument("--seeds", type=_positive_int, default=10, help="training runs per variant")
    ex.add_argument("--quick", action="store_true", help="a small, fast version (for smoke tests)")
    ex.add_argument("--out", default="runs/pitfall",
                    help="directory for the CSV, Markdown table and plot (default: runs/pitfall; created if "
                         "its parent exists)")
    ex.add_argument("--update-tracked", action="store_true",
                    help="allow --out to be a directory with files tracked by git (the published results in "
                         "docs/results/pitfall); refused otherwise")
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
    from .training import train

    options = {k: v for k, v in vars(args).items() if k not in ("command", "dataset", "preset")}
    config = TrainConfig.preset(args.preset, **options) if args.preset else None
    result = train(args.dataset, config, **options)
    print("final metrics:")
    _print_metrics(result.metrics)
    if result.interrupted:  # the first Ctrl-C/SIGTERM: stopped at the end of an epoch, outputs written
        from ._signals import exit_status

        written = [p for p in (result.config.save, result.config.metrics_json) if p]
        print(f"gatfast train: interrupted by {result.interrupted} at epoch {len(result.history)}; kept the "
              f"best parameters (epoch {result.metrics['best_epoch']:g}); "
              + (f"wrote {' and '.join(written)}" if written else "nothing to write (no --save or --metrics-json)"),
              file=sys.stderr)
        return exit_status(getattr(signal, result.interrupted, signal.SIGINT))
    if result.config.save:
        print(f"model saved to {result.config.save}")
    return 0


def _grid(specs):
    """``--grid`` arguments as ``{option: [values]}``, each value checked as the option's flag would be."""
    options, grid = TrainConfig.options(), {}
    for name, *texts in specs:
        name = name.replace("-", "_")
        if name not in options:
            raise CLIError(f"--grid: {name!r} is not a training option (see 'gatfast train --help')")
        if not texts:
            raise CLIError(f"--grid {name}: give at least one value")
        option = options[name][1]
        grid[name] = [_grid_value(name, option, t) for t in texts]
    return grid


def _grid_value(name, option, text):
    if option.optional and text.lower() == "none":
        return None
    if option.kind is bool:
        if text.lower() not in ("true", "false"):
            raise CLIError(f"--grid {name}: expected true or false, got {text!r}")
        return text.lower() == "true"
    try:
        return _option_type(option)(text)
    except argparse.ArgumentTypeError as exc:
        raise CLIError(f"--grid {name}: {exc}") from None


def _cmd_sweep(args):
    from . import _validate as V
    from ._io import atomic_write_text
    from .distributed import format_table, sweep

    options = {k: v for k, v in vars(args).items() if k not in ("command", "dataset", "preset", "grid", "csv")}
    grid = _grid(args.grid)
    V.check_output_paths([("--csv", args.csv)], [])
    config = TrainConfig.preset(args.preset, **options) if args.preset else None
    rows = sweep(args.dataset, grid, config, **options)
    shown = [k for k in ("val_accuracy", "test_accuracy", "val_loss", "test_loss", "best_epoch", "seconds")
             if k in rows[0]]
    print(format_table(rows, list(grid) + shown))
    if args.csv:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        lines = [",".join(columns)] + [",".join(_csv_cell(row.get(c, "")) for c in columns) for row in rows]
        atomic_write_text(args.csv, "\n".join(lines) + "\n")
    return 0


def _csv_cell(value):
    text = repr(value) if isinstance(value, float) else str(value)
    return f'"{text}"' if "," in text else text


def _cmd_evaluate(args):
    from . import _runtime
    from . import _validate as V
    from .data import dataset_file, load_dataset
    from .training import evaluate, load_checkpoint

    model, meta = load_checkpoint(args.checkpoint)
    source = args.dataset or meta.get("dataset")
    if source is None:
        raise CLIError("the checkpoint does not name its dataset: pass --dataset PATH")
    try:
        data_file = dataset_file(source)
    except (TypeError, ValueError):
        data_file = None  # reported when loading
    V.check_output_paths([("--metrics-json", args.metrics_json)],
                         [("checkpoint", args.checkpoint), ("dataset", data_file)])
    opts = dict(dtype=np.dtype(model.get_config()["dtype"]), normalize_features=_normalize(args, meta))
    if args.dataset is None:
        try:
            ds = load_dataset(source, **opts)
        except (OSError, ValueError) as exc:
            raise CLIError(f"cannot load the checkpoint's dataset {source!r} ({exc}): pass --dataset PATH"
                           ) from None
    else:
        ds = load_dataset(source, **opts)
    splits = _saved_splits(meta, ds, same=args.dataset is None or _same_source(args.dataset, meta))
    with _runtime.threads(args.threads):
        metrics = evaluate(model, ds, splits=splits)
    what = "" if splits is not None or not hasattr(ds, "graphs") else " (all graphs as the test split)"
    print(f"model {args.checkpoint} on {ds.name}{what}:")
    _print_metrics(metrics)
    if args.metrics_json:
        _write_json(args.metrics_json, metrics)
    return 0


def _normalize(args, meta):
    """Row-normalise for evaluation: the flag, else what the checkpoint records; never a guess."""
    from .training.checkpoint import recorded_preprocessing

    if args.normalize_features is not None:
        return args.normalize_features
    recorded = recorded_preprocessing(meta)
    if recorded is None or "normalize_features" not in recorded:
        raise CLIError("the checkpoint does not record how its features were preprocessed (saved without "
                       "preprocessing=): pass --normalize-features or --no-normalize-features")
    return recorded["normalize_features"]


def _same_source(path, meta):
    from .training.run import dataset_source

    return dataset_source(path) == meta.get("dataset")


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
    from .diagnostics import gradcheck_layer

    if args.nodes < 2:
        raise CLIError("--nodes must be >= 2")
    errors = gradcheck_layer(
        num_nodes=args.nodes, in_features=args.in_features, out_features=args.out_features,
        heads=args.heads, concat=not args.mean, theta_r=args.theta_r, seed=args.seed,
        attention_activation=args.attention_activation, root_weight=args.root_weight,
        edge_dim=args.edge_dim, bipartite=args.bipartite,
    )
    for name, err in errors.items():
        print(f"{name:>9s}: relative error {err:.3e}")
    worst = max(errors, key=errors.get)
    print(f"worst relative error: {errors[worst]:.3e} ({worst})")
    return 0 if errors[worst] <= args.tolerance else 1


def _cmd_experiment(args):
    from .diagnostics.pitfall import run_pitfall

    # one thread by default: these graphs are tiny, and parallel launch costs dominate
    run_pitfall(seeds=args.seeds, quick=args.quick, out_dir=args.out, threads=args.threads or 1,
                update_tracked=args.update_tracked)
    return 0


def main(argv=None):
    """Entry point of the ``gatfast`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"train": _cmd_train, "sweep": _cmd_sweep, "evaluate": _cmd_evaluate,
                "gradcheck": _cmd_gradcheck, "experiment": _cmd_experiment}
    from .training import TrainingDiverged, WorkersLost

    try:
        return handlers[args.command](args)
    except (CLIError, ValueError, TypeError, OSError, ImportError, TrainingDiverged, WorkersLost) as exc:
        message = " ".join(str(exc).split("\n"))  # always one line
        print(f"gatfast {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C outside training, or a second one during it
        from ._signals import exit_status

        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"gatfast {args.command}: aborted by {signal.Signals(signum).name}; files being written were "
              "left as they were", file=sys.stderr)
        return exit_status(signum)


if __name__ == "__main__":
    sys.exit(main())
