"""What ``gatfast train``, ``evaluate``, ``gradcheck`` and ``experiment`` do with their parsed arguments."""

from __future__ import annotations

import json
import signal
import sys

import numpy as np

from ..training.config import TrainConfig
from .options import GENERATOR_FLAGS, CLIError

__all__ = ["cmd_evaluate", "cmd_experiment", "cmd_gradcheck", "cmd_train", "print_metrics", "write_json"]


def write_json(path, obj):
    from .._io import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def print_metrics(metrics):
    for key in sorted(metrics):
        value = metrics[key]
        print(f"{key:>22s}: {value:.4f}" if isinstance(value, float) else f"{key:>22s}: {value}")


def cmd_train(args):
    from .._precompile import start_helper
    from ..training import train

    options = {
        k: v
        for k, v in vars(args).items()
        if k not in ("command", "dataset", "preset") and not k.startswith("gen_")
    }
    generated = {k[len("gen_") :]: v for k, v in vars(args).items() if k.startswith("gen_")}
    _check_generator_flags(args.dataset, generated)
    config = TrainConfig.preset(args.preset, **options) if args.preset else None
    if not args.preset:  # with an empty kernel cache: a second process compiles from the other end
        start_helper(args.dataset, options.get("dtype", "float32"))
    result = train(args.dataset, config, dataset_options=generated or None, **options)
    print("final metrics:")
    print_metrics(result.metrics)
    if result.interrupted:  # the first Ctrl-C/SIGTERM: stopped at the end of an epoch, outputs written
        from .._signals import exit_status

        written = [p for p in (result.config.save, result.config.metrics_json) if p]
        print(
            f"gatfast train: interrupted by {result.interrupted} at epoch {len(result.history)}; kept the "
            f"best parameters (epoch {result.metrics['best_epoch']:g}); "
            + (
                f"wrote {' and '.join(written)}"
                if written
                else "nothing to write (no --save or --metrics-json)"
            ),
            file=sys.stderr,
        )
        return exit_status(getattr(signal, result.interrupted, signal.SIGINT))
    if result.config.save:
        print(f"model saved to {result.config.save}")
    return 0


def _check_generator_flags(dataset, generated):
    """Each generator flag given must be one the named generator takes."""
    from ..data import GENERATORS, generator_options

    for flag, dest, _, _ in GENERATOR_FLAGS:
        if dest not in generated:
            continue
        if dataset not in GENERATORS:
            raise CLIError(
                f"{flag} sets up a generated dataset ({', '.join(sorted(GENERATORS))}); "
                f"--dataset {dataset} is not one"
            )
        if dest not in generator_options(dataset):
            takers = [name for name in sorted(GENERATORS) if dest in generator_options(name)]
            raise CLIError(f"{flag} is an option of --dataset {' or '.join(takers)}, not {dataset}")


def cmd_evaluate(args):
    from .. import _paths, _runtime
    from ..data import dataset_file, load_dataset
    from ..training import evaluate, load_checkpoint

    model, meta = load_checkpoint(args.checkpoint)
    source = args.dataset or meta.get("dataset")
    if source is None:
        raise CLIError("the checkpoint does not name its dataset: pass --dataset PATH")
    try:
        data_file = dataset_file(source)
    except (TypeError, ValueError):
        data_file = None  # reported when loading
    _paths.check_output_paths(
        [("--metrics-json", args.metrics_json)], [("checkpoint", args.checkpoint), ("dataset", data_file)]
    )
    opts = dict(dtype=np.dtype(model.get_config()["dtype"]), normalize_features=_normalize(args, meta))
    if _same_source(source, meta):  # a generator's data: made again with the training run's options
        opts.update(meta.get("dataset_options") or {})
    if args.dataset is None:
        try:
            ds = load_dataset(source, **opts)
        except (OSError, ValueError) as exc:
            raise CLIError(
                f"cannot load the checkpoint's dataset {source!r} ({exc}): pass --dataset PATH"
            ) from None
    else:
        ds = load_dataset(source, **opts)
    splits = _saved_splits(meta, ds, same=args.dataset is None or _same_source(args.dataset, meta))
    with _runtime.threads(args.threads):
        metrics = evaluate(model, ds, splits=splits)
    what = "" if splits is not None or not hasattr(ds, "graphs") else " (all graphs as the test split)"
    print(f"model {args.checkpoint} on {ds.name}{what}:")
    print_metrics(metrics)
    if args.metrics_json:
        write_json(args.metrics_json, metrics)
    return 0


def _normalize(args, meta):
    """Row-normalise for evaluation: the flag, else what the checkpoint records; never a guess."""
    from ..training.checkpoint import recorded_preprocessing

    if args.normalize_features is not None:
        return args.normalize_features
    recorded = recorded_preprocessing(meta)
    if recorded is None or "normalize_features" not in recorded:
        raise CLIError(
            "the checkpoint does not record how its features were preprocessed (saved without "
            "preprocessing=): pass --normalize-features or --no-normalize-features"
        )
    return recorded["normalize_features"]


def _same_source(path, meta):
    from ..training.run import dataset_source

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


def cmd_gradcheck(args):
    from ..diagnostics import gradcheck_layer

    if args.nodes < 2:
        raise CLIError("--nodes must be >= 2")
    errors = gradcheck_layer(
        num_nodes=args.nodes,
        in_features=args.in_features,
        out_features=args.out_features,
        heads=args.heads,
        concat=not args.mean,
        theta_r=args.theta_r,
        seed=args.seed,
        attention_activation=args.attention_activation,
        root_weight=args.root_weight,
        edge_dim=args.edge_dim,
        bipartite=args.bipartite,
    )
    for name, err in errors.items():
        print(f"{name:>9s}: relative error {err:.3e}")
    worst = max(errors, key=errors.get)
    print(f"worst relative error: {errors[worst]:.3e} ({worst})")
    return 0 if errors[worst] <= args.tolerance else 1


def cmd_experiment(args):
    from ..diagnostics.pitfall import run_pitfall

    # one thread by default: these graphs are tiny, and parallel launch costs dominate
    run_pitfall(
        seeds=args.seeds,
        quick=args.quick,
        out_dir=args.out,
        threads=args.threads or 1,
        update_tracked=args.update_tracked,
    )
    return 0
