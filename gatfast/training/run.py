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

from .. import _runtime
from .._io import atomic_write_text
from ..data import GENERATED, GraphDataset, NodeDataset, load_dataset, without_edge_features
from ..models.network import GATv2Network
from ..optim import make_optimizer
from .checkpoint import save_checkpoint
from .config import TrainConfig, preset_for
from .evaluation import target_width
from .loop import TrainResult, fit
from .progress import Progress
from .splits import fold_splits

__all__ = ["build_model", "dataset_source", "train"]


def train(dataset="karate", config=None, *, splits=None, callback=None, stream=None, **options):
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

    Examples
    --------
    >>> import gatfast
    >>> result = gatfast.train("karate", epochs=50, quiet=True)
    >>> sorted(result.metrics)[:3]
    ['best_epoch', 'epochs', 'seconds']
    """
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a gatfast.TrainConfig or None, got {type(config).__name__}")
    if isinstance(dataset, (NodeDataset, GraphDataset)):
        ds, source = dataset, dataset.name
        if config is None:
            config = TrainConfig.preset(preset_for(ds))
        config = config.replace(**options)
    else:
        # the dataset is loaded with the options given; its preset then fills in the rest
        base = (config or TrainConfig()).replace(**options)
        ds = load_dataset(dataset, dtype=base.numpy_dtype, normalize_features=base.normalize_features)
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

        base_path = os.path.splitext(config.save)[0] if config.save else os.path.join("runs", "diagnose")
        os.makedirs(os.path.dirname(os.path.abspath(base_path)), exist_ok=True)
        recorder = ThetaRFlowRecorder(base_path + "_diagnostics.csv")
        callback = _chain(recorder.fit_callback(), callback)

    progress = Progress(config.quiet, config.log_every, stream)
    size = f"{ds.num_nodes} nodes" if isinstance(ds, NodeDataset) else f"{len(ds)} graphs"
    in_features = ds.num_features
    edges = f", {ds.edge_dim} edge features" if ds.edge_dim is not None else ""
    progress.line(f"dataset {ds.name}: {ds.task}, {size}, {in_features} features{edges}")
    recipe = " ".join(f"{k}={v}" for k, v in config.recipe().items())
    progress.line(f"options: {recipe} seed={config.seed}")
    with _runtime.threads(config.threads):
        if config.folds is not None:
            result = _train_folds(ds, config, callback, progress)
        else:
            model = build_model(ds, config, config.seed)
            opt = make_optimizer(
                config.optimizer,
                model.parameters(),
                config.lr,
                config.weight_decay,
                config.momentum,
                config.nesterov,
            )
            result = fit(model, ds, opt, config, splits=splits, callback=callback, stream=stream)
    result.config = config
    if config.save is not None:
        meta = {
            "dataset": source,
            "task": ds.task,
            "num_classes": int(ds.num_classes),
            "normalize_features": bool(config.normalize_features),
            "metrics": result.metrics,
            "train_config": config.to_dict(),
        }
        if result.splits is not None:  # so that `gatfast evaluate` scores the same graphs
            meta["splits"] = {k: v.tolist() for k, v in result.splits.items()}
        save_checkpoint(config.save, result.model, meta)
    if config.metrics_json is not None:
        atomic_write_text(config.metrics_json, json.dumps(result.metrics, indent=2, sort_keys=True) + "\n")
    if recorder is not None:
        _finish_diagnostics(recorder, progress)
    return result


def _train_folds(ds, config, callback, progress):
    fold_metrics, result = [], None
    t0 = time.perf_counter()
    for k, split in enumerate(fold_splits(ds, config.folds, config.seed)):
        model = build_model(ds, config, config.seed + k)
        opt = make_optimizer(
            config.optimizer,
            model.parameters(),
            config.lr,
            config.weight_decay,
            config.momentum,
            config.nesterov,
        )
        result = fit(
            model, ds, opt, config, splits=split, callback=callback, seed=config.seed + k, quiet=True
        )
        fold_metrics.append(result.metrics)
        progress.line(
            f"fold {k + 1}/{config.folds}: test accuracy {result.metrics['test_accuracy']:.4f} "
            f"(best epoch {result.metrics['best_epoch']})"
        )
    metrics = {}
    for key in fold_metrics[0]:
        values = np.array([m[key] for m in fold_metrics], dtype=float)
        metrics[key] = float(values.mean())
        if key.endswith("_accuracy") or key.endswith("_loss"):
            metrics[f"{key}_std"] = float(values.std())
    metrics["folds"] = config.folds
    metrics["seconds"] = time.perf_counter() - t0
    return TrainResult(
        model=result.model, metrics=metrics, history=result.history, folds=fold_metrics, splits=result.splits
    )


def build_model(ds, config, seed):
    """The :class:`GATv2Network` that ``config`` describes, sized for dataset ``ds``."""
    out_features = ds.num_classes if ds.num_classes else target_width(ds)
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


def dataset_source(dataset):
    """How ``load_dataset`` finds ``dataset`` again: a name it knows, or an absolute path."""
    text = os.fspath(dataset)
    if text in GENERATED or not os.path.exists(text):
        return text
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
