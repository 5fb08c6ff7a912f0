"""``train()``: the Python twin of ``gatfast train``.

It resolves the options (a preset for the dataset, then the caller's
overrides), loads the dataset, builds the model and optimizer, runs
:func:`~gatfast.training.loop.fit` once or once per fold, and writes the
requested outputs.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from .. import _paths, _runtime
from .. import _validate as V
from .._io import atomic_write_text
from .._signals import deferred_interrupts
from ..data import (
    GENERATED,
    GENERATORS,
    GraphDataset,
    NodeDataset,
    dataset_file,
    generator_options,
    load_dataset,
    without_edge_features,
)
from ..models.network import GATv2Network
from ..optim import make_optimizer
from .checkpoint import save_checkpoint
from .config import TrainConfig, preset_for
from .evaluation import target_width
from .loop import TrainResult, fit
from .progress import Progress
from .splits import fold_splits

__all__ = ["build_model", "check_dataset_options", "check_outputs", "dataset_source", "train"]


def train(dataset="karate", config=None, *, dataset_options=None, splits=None, callback=None, stream=None,
          **options):
    """Train a GATv2 network: the Python twin of ``gatfast train``.

    Parameters
    ----------
    dataset : str, path, NodeDataset or GraphDataset
        ``"karate"`` (embedded), a shipped dataset name (``"cora"``,
        ``"mutag"``), a generator name (``"csbm"``, ``"traffic_scenes"``), a
        Planetoid or TU ``.npz`` path, or a loaded dataset.
    config : TrainConfig, optional
        The options of the run. Default: the preset for the dataset's task
        (:func:`~gatfast.training.config.preset_for`: the GAT recipe for node
        classification, ``"tu"`` for graph classification).
    dataset_options : dict, optional
        Keyword arguments of a generator named by ``dataset``
        (``{"num_nodes": 2_000_000, "avg_degree": 10, "num_features": 64}``
        for ``"csbm"``); recorded in the checkpoint, so that ``gatfast
        evaluate`` generates the same data.
    splits : dict, optional
        Graph datasets, one run (no ``folds``): the graph ids
        ``{"train": ..., "val": ..., "test": ...}`` (default: a seeded
        80/10/10 split; a missing or empty ``"val"`` selects the model on the
        training graphs). Node datasets carry their split as masks.
    callback : callable, optional
        ``callback(epoch, model, grads, row)`` after every epoch (see :func:`fit`).
    stream : file object, optional
        Where progress goes (default stdout).
    **options
        Fields of :class:`TrainConfig` that replace those of ``config``
        (``epochs=50``, ``lr=0.01``, ``save="model.npz"`` ...).

    Returns
    -------
    TrainResult
        With ``folds`` set, ``result.folds`` holds the per-fold metrics and
        ``result.metrics`` their means plus ``test_accuracy_std``.

    Notes
    -----
    Output paths (``save``, ``metrics_json``, the ``diagnose`` files) are
    checked before the dataset is loaded (ValueError naming the option).
    In the main thread, the first Ctrl-C or SIGTERM stops training at the
    end of the current epoch, as early stopping would: the best parameters
    so far are kept, the outputs are written with
    ``metrics["interrupted"] = True``, and ``result.interrupted`` names the
    signal. A second one aborts at once (KeyboardInterrupt); files being
    written are left as they were. The previous handlers are restored.

    Examples
    --------
    >>> import gatfast
    >>> result = gatfast.train("karate", epochs=50, quiet=True)
    >>> sorted(result.metrics)[:3]
    ['best_epoch', 'epochs', 'seconds']
    """
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a gatfast.TrainConfig or None, got {type(config).__name__}")
    # output paths are run options (presets never set them): check them before anything is loaded
    diagnose_base = check_outputs((config or TrainConfig()).replace(**options), dataset)
    if isinstance(dataset, (NodeDataset, GraphDataset)):
        if dataset_options:
            raise ValueError("dataset_options are for a generator named by dataset, not a loaded dataset")
        ds, source = dataset, dataset.name
        if config is None:
            config = TrainConfig.preset(preset_for(ds))
        config = config.replace(**options)
    else:
        # the dataset is loaded with the options given; its preset then fills in the rest
        base = (config or TrainConfig()).replace(**options)
        ds = load_dataset(dataset, dtype=base.numpy_dtype, normalize_features=base.normalize_features,
                          **check_dataset_options(dataset, dataset_options))
        source = dataset_source(dataset)
        if config is None:
            config = TrainConfig.preset(preset_for(ds), **options)
        else:
            config = base
    if not config.edge_features and ds.edge_dim is not None:
        ds = without_edge_features(ds)
    if config.folds is not None and not (isinstance(ds, GraphDataset) and ds.task == "graph_classification"):
        raise ValueError("folds is only available for graph classification datasets (TU format)")
    if splits is not None and (config.folds is not None or not isinstance(ds, GraphDataset)):
        raise ValueError("splits is for one run on a graph dataset (not with folds; node datasets have masks)")

    recorder = None
    if config.diagnose:
        from ..diagnostics import ThetaRFlowRecorder

        recorder = ThetaRFlowRecorder(diagnose_base + "_diagnostics.csv")
        callback = _chain(recorder.fit_callback(), callback)

    progress = Progress(config.quiet, config.log_every, stream)
    size = f"{ds.num_nodes} nodes" if isinstance(ds, NodeDataset) else f"{len(ds)} graphs"
    in_features = ds.num_features
    edges = f", {ds.edge_dim} edge features" if ds.edge_dim is not None else ""
    progress.line(f"dataset {ds.name}: {ds.task}, {size}, {in_features} features{edges}")
    recipe = " ".join(f"{k}={v}" for k, v in config.recipe().items())
    progress.line(f"options: {recipe} seed={config.seed}")
    # Ctrl-C / SIGTERM: the first stops training at the end of the epoch (the
    # outputs are still written), a second one aborts at once (gatfast._signals)
    with deferred_interrupts() as request, _runtime.threads(config.threads):
        if config.folds is not None:
            result = _train_folds(ds, config, callback, progress, request)
        else:
            model = build_model(ds, config, config.seed)
            opt = _optimizer(model, config)
            result = fit(model, ds, opt, config, splits=splits, callback=callback, stream=stream, stop=request)
        result.config = config
        _write_outputs(result, ds, source, config, dataset_options)
    if recorder is not None:
        _finish_diagnostics(recorder, progress)
    return result


def _optimizer(model, config):
    return make_optimizer(
        config.optimizer, model.parameters(), config.lr, config.weight_decay, config.momentum, config.nesterov
    )


def _write_outputs(result, ds, source, config, dataset_options=None):
    """The checkpoint (``save``) and the metrics (``metrics_json``) of a finished or stopped run."""
    if config.save is not None:
        meta = {
            "dataset": source,
            "task": ds.task,
            "num_classes": int(ds.num_classes),
            "metrics": result.metrics,
            "train_config": config.to_dict(),
        }
        if dataset_options:  # a generator's arguments: `gatfast evaluate` makes the same data
            meta["dataset_options"] = dict(dataset_options)
        if ds.preprocessing is not None:  # what was done to the features, not what the config asked
            meta["preprocessing"] = ds.preprocessing
        if result.splits is not None:  # so that `gatfast evaluate` scores the same graphs
            meta["splits"] = {k: v.tolist() for k, v in result.splits.items()}
        save_checkpoint(config.save, result.model, meta)
    if config.metrics_json is not None:
        atomic_write_text(config.metrics_json, json.dumps(result.metrics, indent=2, sort_keys=True) + "\n")


def check_outputs(config, dataset):
    """Check ``config``'s output paths before a run (see :func:`gatfast._paths.check_output_paths`).

    Returns the base path of the ``diagnose`` files (None without
    ``diagnose``). Without ``save`` they go to the documented default
    ``runs/diagnose_diagnostics.csv``, whose directory is created.
    """
    inputs = []
    if not isinstance(dataset, (NodeDataset, GraphDataset)):
        inputs.append(("dataset", dataset_file(dataset)))
    outputs = [("save", config.save), ("metrics_json", config.metrics_json)]
    base = None
    if config.diagnose:
        if config.save:
            base = os.path.splitext(config.save)[0]
        else:
            base = os.path.join("runs", "diagnose")
            _paths.check_output_dir("diagnose", "runs", create_parents=True)
        outputs += [("diagnose (CSV)", base + "_diagnostics.csv"), ("diagnose (plot)", base + "_diagnostics.png")]
    _paths.check_output_paths(outputs, inputs)
    return base


def _train_folds(ds, config, callback, progress, stop):
    """k-fold cross-validation; a stop request ends the current fold and skips the rest."""
    fold_metrics, result = [], None
    t0 = time.perf_counter()
    for k, split in enumerate(fold_splits(ds, config.folds, config.seed)):
        model = build_model(ds, config, config.seed + k)
        result = fit(
            model, ds, _optimizer(model, config), config, splits=split, callback=callback,
            seed=config.seed + k, quiet=True, stop=stop,
        )
        fold_metrics.append({k: v for k, v in result.metrics.items() if k != "interrupted"})
        progress.line(
            f"fold {k + 1}/{config.folds}: test accuracy {result.metrics['test_accuracy']:.4f} "
            f"(best epoch {result.metrics['best_epoch']})"
        )
        if result.interrupted:
            break
    metrics = {}
    for key in fold_metrics[0]:
        values = np.array([m[key] for m in fold_metrics], dtype=float)
        metrics[key] = float(values.mean())
        if key.endswith("_accuracy") or key.endswith("_loss"):
            metrics[f"{key}_std"] = float(values.std())
    metrics["folds"] = len(fold_metrics)  # fewer than config.folds when interrupted
    metrics["seconds"] = time.perf_counter() - t0
    if result.interrupted:
        metrics["interrupted"] = True
    return TrainResult(
        model=result.model, metrics=metrics, history=result.history, folds=fold_metrics, splits=result.splits,
        interrupted=result.interrupted,
    )


def build_model(ds, config, seed):
    """Build the :class:`GATv2Network` that ``config`` describes, sized for dataset ``ds``.

    Parameters
    ----------
    ds : NodeDataset or GraphDataset
        Gives the input size, the output size (classes or targets) and the edge features.
    config : TrainConfig
        The model options (layers, hidden, heads, ...).
    seed : int or None
        Seed of the initialisation and of the model's dropout.

    Returns
    -------
    GATv2Network
        A new, untrained model.
    """
    out_features = ds.num_classes if ds.num_classes else target_width(ds)
    V.check_network_size(ds.num_features, config.hidden, out_features, config.layers, config.heads,
                         config.out_heads, config.readout)
    return GATv2Network(
        ds.num_features,
        config.hidden,
        out_features,
        num_layers=config.layers,
        heads=config.heads,
        out_heads=config.out_heads,
        activation=config.activation,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        residual=config.residual,
        attention_activation=config.attention_activation,
        root_weight=config.root_weight,
        readout=config.readout,
        dtype=config.numpy_dtype,
        seed=seed,
        edge_dim=ds.edge_dim,
        fill_value=config.fill_value,
    )


def check_dataset_options(dataset, dataset_options):
    """``dataset_options`` as a dict, refused unless ``dataset`` names a generator."""
    if not dataset_options:
        return {}
    if not isinstance(dataset_options, dict) or not all(isinstance(k, str) for k in dataset_options):
        raise TypeError(f"dataset_options must be a dict of keyword arguments, got {dataset_options!r}")
    if os.fspath(dataset) not in GENERATORS:
        raise ValueError(f"dataset_options are for the generated datasets {sorted(GENERATORS)}, not {dataset!r}")
    known = generator_options(os.fspath(dataset))
    unknown = set(dataset_options) - set(known)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for the {dataset!r} generator; it takes {list(known)}")
    return dict(dataset_options)


def dataset_source(dataset):
    """How ``load_dataset`` finds ``dataset`` again: a name it knows, or an absolute path."""
    text = os.fspath(dataset)
    if text in GENERATED or not os.path.isfile(text):
        return text  # a name: load_dataset looks it up again
    return os.path.abspath(text)


def _chain(first, second):
    if second is None:
        return first

    def both(*args):
        first(*args)
        second(*args)

    return both


def _finish_diagnostics(recorder, progress):
    progress.line(f"diagnostics written to {recorder.path}")
    png = os.path.splitext(recorder.path)[0] + ".png"
    try:
        recorder.plot(png)
        progress.line(f"diagnostics plot written to {png}")
    except ImportError:
        progress.line("matplotlib is not installed: no diagnostics plot (pip install gatfast[plot])")
