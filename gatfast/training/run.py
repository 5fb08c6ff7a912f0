"""``train()``: the Python twin of ``gatfast train``.

It resolves the options (a preset for the dataset, then the caller's
overrides), loads the dataset, builds the model and optimizer, runs
:func:`~gatfast.training.loop.fit` once or once per fold, and writes the
requested outputs.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext

from .. import _paths, _runtime
from .. import _validate as V
from .._io import atomic_write_text
from .._signals import deferred_interrupts
from ..data import GraphDataset, NodeDataset, dataset_file, load_dataset, without_edge_features
from ..data.sources import check_dataset_options, dataset_source
from ..models.network import GATv2Network
from ..optim import make_optimizer
from .backends import check_cluster_options, cluster_session, uses_cluster
from .checkpoint import save_checkpoint
from .config import TrainConfig, preset_for
from .errors import WorkersLost
from .evaluation import target_width
from .folds import train_folds
from .loop import fit
from .progress import Progress

__all__ = ["build_model", "check_dataset_options", "check_outputs", "dataset_source", "train", "train_fold"]


def train(
    dataset="karate",
    config=None,
    *,
    dataset_options=None,
    splits=None,
    callback=None,
    stream=None,
    client=None,
    **options,
):
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
    client : distributed.Client, optional
        Compute on this Dask cluster (``pip install gatfast[distributed]``):
        every step's shards on its workers, or with ``folds`` one task per
        fold. The options ``workers=N`` (a local cluster, started and
        closed by the run) and ``scheduler=ADDRESS`` do the same without a
        client; the results equal the one-process run's up to the order of
        floating-point sums (``docs/SCALING.md``).
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
    When the cluster of a distributed run is lost (no worker left for
    ``worker_timeout`` seconds, or no scheduler), the run stops the same
    way, its outputs are written, and :class:`~gatfast.training.errors.WorkersLost`
    is raised.

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
    early = (config or TrainConfig()).replace(**options)
    diagnose_base = check_outputs(early, dataset)
    _check_cluster_options(early, client, callback)
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
        ds = load_dataset(
            dataset,
            dtype=base.numpy_dtype,
            normalize_features=base.normalize_features,
            **check_dataset_options(dataset, dataset_options),
        )
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
        raise ValueError(
            "splits is for one run on a graph dataset (not with folds; node datasets have masks)"
        )

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
    with (
        deferred_interrupts() as request,
        _runtime.threads(config.threads),
        cluster_session(config, client, progress) as session,
    ):
        try:
            if config.folds is not None:
                result = train_folds(
                    ds,
                    config,
                    lambda k, split: train_fold(ds, config, k, split, callback, request),
                    progress,
                    request,
                    session,
                )
            else:
                if session is not None and config.shards is None:
                    config = config.replace(shards=session.workers)  # recorded: the run's summation order
                model = build_model(ds, config, config.seed)
                opt = _optimizer(model, config)
                with session.step_executor(ds) if session is not None else nullcontext() as executor:
                    result = fit(
                        model,
                        ds,
                        opt,
                        config,
                        splits=splits,
                        callback=callback,
                        stream=stream,
                        stop=request,
                        executor=executor,
                    )
        except WorkersLost as exc:  # as a stop request: the best model so far is written, then the error
            if exc.result is None:
                raise WorkersLost(f"{exc}; no epoch had finished: nothing was written") from None
            exc.result.config = config
            _write_outputs(exc.result, ds, source, config, dataset_options)
            raise WorkersLost(f"{exc}; {_kept(exc.result, config)}", exc.result) from None
        result.config = config
        _write_outputs(result, ds, source, config, dataset_options)
    if recorder is not None:
        _finish_diagnostics(recorder, progress)
    return result


def _check_cluster_options(config, client, callback):
    if not uses_cluster(config, client):
        return
    check_cluster_options(config, client)
    if config.folds is not None and (callback is not None or config.diagnose):
        raise ValueError(
            "folds on a cluster run as tasks on the workers: callback and diagnose are not "
            "available there (run the folds in one process, or without folds)"
        )


def _kept(result, config):
    """What a stopped run kept and wrote, for the error message."""
    best = result.metrics.get("best_epoch", 0)
    if result.folds:
        kept = f"kept the {len(result.folds)} finished folds"
    else:
        kept = f"kept the best parameters (epoch {best:g})" if best else "no epoch had finished"
    written = [p for p in (config.save, config.metrics_json) if p]
    return kept + (f", wrote {' and '.join(written)}" if written else "")


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
        outputs += [
            ("diagnose (CSV)", base + "_diagnostics.csv"),
            ("diagnose (plot)", base + "_diagnostics.png"),
        ]
    _paths.check_output_paths(outputs, inputs)
    return base


def train_fold(ds, config, k, split, callback=None, stop=None):
    """Fold ``k`` of k-fold cross-validation: a one-process :func:`fit` of a model seeded ``config.seed + k``.

    Parameters
    ----------
    ds : GraphDataset
    config : TrainConfig
    k : int
        The fold's index (0-based).
    split : dict
        Its ``{"train", "val", "test"}`` graph ids (from :func:`~gatfast.training.splits.fold_splits`).
    callback, stop : callable, optional
        As in :func:`fit`.

    Returns
    -------
    TrainResult
    """
    model = build_model(ds, config, config.seed + k)
    return fit(
        model,
        ds,
        _optimizer(model, config),
        config,
        splits=split,
        callback=callback,
        seed=config.seed + k,
        quiet=True,
        stop=stop,
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
    V.check_network_size(
        ds.num_features,
        config.hidden,
        out_features,
        config.layers,
        config.heads,
        config.out_heads,
        config.readout,
    )
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
