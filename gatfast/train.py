"""The training loop: epochs, evaluation, early stopping, progress, checkpoints.

Two entry points:

* :func:`fit` trains a given :class:`~gatfast.model.GATv2Network` on a
  dataset with a given optimizer (the loop itself);
* :func:`train` mirrors ``gatfast train``: it loads the dataset, builds the
  model and optimizer from plain options and calls :func:`fit` (once, or
  once per fold for k-fold cross-validation of graph classifiers).
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from . import _validate as V
from . import nn
from ._validate import NonFiniteError, all_finite
from .checkpoint import save_checkpoint
from .data import GraphDataset, NodeDataset, load_dataset
from .model import GATv2Network
from .optim import SGD, Adam, AdamW, clip_grad_norm

__all__ = ["TrainingDiverged", "TrainResult", "fit", "train", "evaluate", "num_threads", "OPTIMIZERS"]

OPTIMIZERS = ("adam", "adamw", "sgd")
NODE_TASKS = ("node_classification", "node_regression")
EVAL_BATCH_SIZE = 256  # graphs per evaluation batch, the same in fit() and evaluate()
GENERATED = ("karate", "csbm", "traffic_scenes")  # names load_dataset builds without a file


class _NonFiniteOutput(ValueError):
    """The model's output holds NaN or inf (fit() reports it as TrainingDiverged)."""


def _finite_output(out, where):
    if not all_finite(out):
        raise _NonFiniteOutput(f"the model output {where} contains NaN or inf")
    return out


class TrainingDiverged(RuntimeError):
    """Raised when a loss or gradient becomes NaN/inf; names the epoch."""

    def __init__(self, epoch, what):
        super().__init__(f"training diverged at epoch {epoch}: {what} is NaN or inf")
        self.epoch = epoch


@dataclass
class TrainResult:
    """Outcome of a training run.

    Attributes
    ----------
    model : GATv2Network
        The model, with the parameters of the best validation epoch restored.
    metrics : dict
        Final metrics of the restored model: ``train_accuracy``,
        ``val_accuracy``, ``test_accuracy`` (classification) or
        ``train_loss``, ``val_loss``, ``test_loss`` (regression), plus
        ``epochs`` (epochs run), ``best_epoch`` and ``seconds``.
    history : list of dict
        One entry per epoch with the training loss and the metrics.
    folds : list of dict
        Per-fold metrics of k-fold cross-validation (empty otherwise).
    splits : dict or None
        Graph datasets: the graph ids of the ``train``, ``val`` and ``test``
        splits (of the last fold with k-fold cross-validation).
    """

    model: GATv2Network
    metrics: dict
    history: list = field(default_factory=list)
    folds: list = field(default_factory=list)
    splits: dict = None


@contextmanager
def num_threads(n):
    """Set the Numba thread count for a block and restore it afterwards."""
    import numba

    if n is None:
        yield
        return
    n = V.check_int(n, "threads", 1)
    if n > numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"threads must be <= {numba.config.NUMBA_NUM_THREADS} on this machine, got {n}")
    old = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(old)


# ---------------------------------------------------------------------------- helpers
def make_optimizer(name, params, lr, weight_decay=0.0, momentum=0.0, nesterov=False):
    """Build an optimizer by name ("adam", "adamw" or "sgd")."""
    V.check_choice(name, "optimizer", set(OPTIMIZERS))
    if name == "adam":
        return Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return AdamW(params, lr=lr, weight_decay=weight_decay)
    return SGD(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)


def _check_finite_grads(grads, epoch):
    for name, g in grads.items():
        if g is not None and name != "x" and not all_finite(g):
            raise TrainingDiverged(epoch, f"the gradient of {name}")


@contextmanager
def _divergence(epoch, what):
    """Report NaN/inf inside the model as divergence at ``epoch``.

    The layers validate their inputs, so an overflowing hidden activation
    surfaces as a NonFiniteError; ``fit`` checked the dataset's features and
    the parameters, so here it can only come from training.
    """
    try:
        yield
    except _NonFiniteOutput:
        raise TrainingDiverged(epoch, what) from None
    except NonFiniteError as exc:
        raise TrainingDiverged(epoch, what) from exc


def _check_finite_inputs(ds):
    xs = [ds.x] if isinstance(ds, NodeDataset) else ds.xs
    for x in xs:
        values = x.data if hasattr(x, "tocsr") else np.asarray(x)
        if not all_finite(values):
            raise ValueError(f"the features of dataset {ds.name!r} must be finite, but contain NaN or inf")
    if not ds.num_classes:
        ys = [ds.y] if isinstance(ds, NodeDataset) else ds.y
        if not all(np.all(np.isfinite(np.asarray(y, dtype=float))) for y in ys):
            raise ValueError(f"the targets of dataset {ds.name!r} must be finite, but contain NaN or inf")


def _check_finite_params(params, epoch):
    # a finite gradient times a huge learning rate can still overflow a parameter
    for name, p in params.items():
        if not all_finite(p):
            raise TrainingDiverged(epoch, f"parameter {name} after the update")


def _node_targets(y):
    y = np.asarray(y)
    return y if y.ndim == 2 else y.reshape(-1, 1)


class _Progress:
    """Per-epoch progress lines (every ``every`` epochs), silent when quiet."""

    def __init__(self, quiet, every, stream=None):
        self.quiet = quiet
        self.every = max(1, int(every))
        self.stream = stream or sys.stdout

    def epoch(self, epoch, last, row):
        if self.quiet or (epoch % self.every and not last):
            return
        parts = [f"epoch {epoch:4d}", f"loss {row['loss']:.4f}"]
        for key in ("train_accuracy", "val_accuracy", "test_accuracy", "val_loss", "test_loss"):
            if key in row:
                short = key.replace("_accuracy", " acc").replace("_loss", " loss")
                parts.append(f"{short} {row[key]:.4f}")
        print(" | ".join(parts), file=self.stream, flush=True)

    def line(self, text):
        if not self.quiet:
            print(text, file=self.stream, flush=True)


# ---------------------------------------------------------------------------- evaluation
def _eval_nodes(model, ds):
    logits = _finite_output(model.predict(ds.graph, ds.x), f"on dataset {ds.name!r}")
    metrics = {}
    for split in ("train", "val", "test"):
        mask = getattr(ds, f"{split}_mask")
        if not mask.any():
            continue
        if ds.task == "node_classification":
            loss, _ = nn.softmax_cross_entropy(logits, ds.y, mask)
            metrics[f"{split}_accuracy"] = float(nn.accuracy(logits, ds.y, mask))
        else:
            loss, _ = nn.mse_loss(logits, _node_targets(ds.y).astype(logits.dtype), mask)
        metrics[f"{split}_loss"] = float(loss)
    return metrics


def _eval_graphs(model, ds, indices, batch_size):
    """Mean loss (and accuracy) over the graphs ``indices``."""
    if len(indices) == 0:
        return {}
    total_loss, total_correct, total_count = 0.0, 0, 0
    for start in range(0, len(indices), batch_size):
        idx = indices[start : start + batch_size]
        graph, x, graph_ptr, y = ds.batch(idx)
        out = model.predict(graph, x, graph_ptr if model.readout else None)
        _finite_output(out, f"on dataset {ds.name!r}")
        if ds.task == "graph_classification":
            loss, _ = nn.softmax_cross_entropy(out, y)
            total_correct += int(np.sum(np.argmax(out, axis=1) == y))
            count = len(idx)
        else:
            target = _node_targets(y).astype(out.dtype)
            loss, _ = nn.mse_loss(out, target)
            count = target.size
        total_loss += float(loss) * count
        total_count += count
    metrics = {"loss": total_loss / total_count}
    if ds.task == "graph_classification":
        metrics["accuracy"] = total_correct / len(indices)
    return metrics


def evaluate(model, dataset, splits=None, batch_size=EVAL_BATCH_SIZE):
    """Metrics of ``model`` on ``dataset`` (no training).

    For node datasets the dataset's masks are used; for graph datasets pass
    ``splits = {"test": indices, ...}`` (default: all graphs as ``test``;
    ``TrainResult.splits`` and a checkpoint's ``meta["splits"]`` hold the
    training run's splits). The default ``batch_size`` is the one
    :func:`fit` evaluates with, so the metrics are the same to the bit.
    """
    _check_compatible(model, dataset)
    if isinstance(dataset, NodeDataset):
        return _eval_nodes(model, dataset)
    splits = splits or {"test": np.arange(len(dataset.graphs))}
    metrics = {}
    for split, idx in splits.items():
        for key, value in _eval_graphs(model, dataset, np.asarray(idx), batch_size).items():
            metrics[f"{split}_{key}"] = value
    return metrics


def _check_compatible(model, dataset):
    in_features = model.get_config()["in_features"]
    have = dataset.x.shape[1] if isinstance(dataset, NodeDataset) else dataset.xs[0].shape[1]
    if have != in_features:
        raise ValueError(
            f"the model expects {in_features} input features but dataset {dataset.name!r} has {have}"
        )
    out_features = model.get_config()["out_features"]
    if dataset.num_classes and out_features != dataset.num_classes:
        raise ValueError(
            f"the model predicts {out_features} classes but dataset {dataset.name!r} has {dataset.num_classes}"
        )
    if not dataset.num_classes and out_features != _target_width(dataset):
        raise ValueError(
            f"the model predicts {out_features} targets per node but dataset {dataset.name!r} has "
            f"{_target_width(dataset)}"
        )
    graph_level = dataset.task == "graph_classification"
    if graph_level != bool(model.readout):
        raise ValueError(
            f"the model (readout={model.readout!r}) does not fit the task {dataset.task!r} of {dataset.name!r}"
        )


# ---------------------------------------------------------------------------- the loop
def _better(task, metrics, best):
    """Model selection: highest validation accuracy (lowest loss breaks ties), or lowest loss."""
    if best is None:
        return True
    if "val_accuracy" in metrics:
        if metrics["val_accuracy"] != best["val_accuracy"]:
            return metrics["val_accuracy"] > best["val_accuracy"]
    return metrics["val_loss"] < best["val_loss"]


def fit(
    model,
    dataset,
    optimizer,
    epochs=300,
    patience=100,
    theta_r="linear",
    clip_norm=None,
    batch_size=32,
    splits=None,
    seed=0,
    quiet=False,
    log_every=10,
    callback=None,
    stream=None,
):
    """Train ``model`` on ``dataset`` and restore the best validation epoch.

    Parameters
    ----------
    model : GATv2Network
    dataset : NodeDataset or GraphDataset
    optimizer : SGD, Adam or AdamW
        Built on ``model.parameters()``.
    epochs : int
        Maximum number of epochs.
    patience : int or None
        Stop when neither the validation accuracy (classification) nor the
        validation loss improved for this many epochs (GAT's rule). None
        disables early stopping.
    theta_r : {"linear", "pairwise"}
        Form of the Θ_R gradient term.
    clip_norm : float, optional
        Clip the global gradient norm to this value.
    batch_size : int
        Graphs per mini-batch (graph datasets only).
    splits : dict, optional
        Graph datasets: ``{"train": idx, "val": idx, "test": idx}``.
    seed : int
        Seeds dropout masks and batch shuffling.
    quiet : bool
        No progress output.
    callback : callable, optional
        ``callback(epoch, model, grads, row)`` once per epoch, after the
        epoch's updates and evaluation (used for diagnostics). ``row`` is a
        copy of the epoch's history entry plus ``"graph"`` and ``"x"``: the
        whole graph (node datasets) or the epoch's first training batch
        (graph datasets, with its ``"graph_ptr"``); ``grads`` are the
        gradients of that step (of that batch).

    Returns
    -------
    TrainResult

    Raises
    ------
    TrainingDiverged
        When the loss, a gradient, a parameter or an activation becomes
        NaN/inf (the message names the epoch); the model is left with the
        best parameters found before (its initial ones if that was epoch 1).
    """
    epochs = V.check_int(epochs, "epochs", 1)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None, got {type(callback).__name__}")
    if patience is not None:
        patience = V.check_int(patience, "patience", 1)
    V.check_choice(theta_r, "theta_r", {"linear", "pairwise"})
    if clip_norm is not None:
        clip_norm = V.check_float(clip_norm, "clip_norm", 0.0, low_open=True)
    batch_size = V.check_int(batch_size, "batch_size", 1)
    _check_compatible(model, dataset)
    _check_finite_inputs(dataset)
    rng = np.random.default_rng(seed)
    progress = _Progress(quiet, log_every, stream)
    params = model.parameters()
    t0 = time.perf_counter()
    history, best, best_params, best_epoch = [], None, None, 0
    best_acc, best_loss, since = -math.inf, math.inf, 0
    graph_level = isinstance(dataset, GraphDataset)
    if graph_level:
        splits = _check_splits(dataset, splits if splits is not None else _default_graph_splits(dataset, seed))
        train_idx = splits["train"]

    # the model never ends up with non-finite parameters: on divergence it
    # gets the best parameters so far (its initial ones before any epoch)
    initial = {k: v.copy() for k, v in params.items()}
    try:
        for epoch in range(1, epochs + 1):
            with _divergence(epoch, "an activation inside the model"):
                if graph_level:
                    loss, grads, first = _graph_epoch(model, dataset, optimizer, train_idx, batch_size, rng,
                                                      theta_r, clip_norm, epoch)
                else:
                    loss, grads = _node_step(model, dataset, optimizer, rng, theta_r, clip_norm, epoch)
                    first = {"graph": dataset.graph, "x": dataset.x}
            _check_finite_params(params, epoch)
            with _divergence(epoch, "an activation inside the model after the update"):
                metrics = _evaluate_splits(model, dataset, splits if graph_level else None)
            row = {"epoch": epoch, "loss": loss, **metrics}
            history.append(row)
            if callback is not None:
                callback(epoch, model, grads, {**row, **first})
            # Model selection and early stopping on the validation split, or on
            # the training split when there is none (the history keeps true names).
            sel = _selection_metrics(metrics)
            if _better(dataset.task, sel, best):
                best, best_epoch = sel, epoch
                best_params = {k: v.copy() for k, v in params.items()}
            improved = False
            if "val_accuracy" in sel and sel["val_accuracy"] >= best_acc:
                best_acc, improved = sel["val_accuracy"], True
            if sel["val_loss"] <= best_loss:
                best_loss, improved = sel["val_loss"], True
            since = 0 if improved else since + 1
            stop = patience is not None and since >= patience
            progress.epoch(epoch, stop or epoch == epochs, row)
            if stop:
                progress.line(f"early stop at epoch {epoch}: no validation improvement for {patience} epochs")
                break
    except TrainingDiverged:
        model.load_parameters(best_params if best_params is not None else initial)
        raise

    model.load_parameters(best_params)
    final = _task_metrics(dataset.task, _evaluate_splits(model, dataset, splits if graph_level else None))
    final.update(epochs=len(history), best_epoch=best_epoch, seconds=time.perf_counter() - t0)
    return TrainResult(model=model, metrics=final, history=history, splits=splits if graph_level else None)


def _evaluate_splits(model, dataset, splits):
    if splits is None:
        return _eval_nodes(model, dataset)
    metrics = {}
    for split in ("train", "val", "test"):
        if len(splits.get(split, ())):
            for k, v in _eval_graphs(model, dataset, splits[split], EVAL_BATCH_SIZE).items():
                metrics[f"{split}_{k}"] = v
    return metrics


def _selection_metrics(metrics):
    """The ``val_*`` metrics, or the ``train_*`` ones renamed when there is no validation split."""
    if "val_loss" in metrics:
        return {k: v for k, v in metrics.items() if k.startswith("val_")}
    return {"val" + k[len("train"):]: v for k, v in metrics.items() if k.startswith("train_")}


def _check_splits(ds, splits):
    """``splits`` as a dict of int64 arrays of valid graph ids, with a non-empty ``"train"``."""
    if not isinstance(splits, dict):
        raise TypeError(f"splits must be a dict of graph ids per split, got {type(splits).__name__}")
    unknown = set(splits) - {"train", "val", "test"}
    if unknown:
        raise ValueError(f"splits keys must be 'train', 'val' and 'test', got {sorted(unknown)}")
    out = {}
    for name, idx in splits.items():
        arr = np.asarray(idx)
        if arr.size == 0:
            out[name] = np.zeros(0, np.int64)
            continue
        if arr.ndim != 1 or arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"splits[{name!r}] must be a 1-D array of graph ids, got {arr.dtype} {arr.shape}")
        if arr.min() < 0 or arr.max() >= len(ds.graphs):
            raise ValueError(f"splits[{name!r}] must hold graph ids in [0, {len(ds.graphs)}), "
                             f"got min {arr.min()} max {arr.max()}")
        out[name] = arr.astype(np.int64)
    if len(out.get("train", ())) == 0:
        raise ValueError("splits['train'] must contain at least one graph")
    return out


def _task_metrics(task, metrics):
    """Keep accuracies for classification and losses for regression."""
    if task.endswith("classification"):
        keep = {k: v for k, v in metrics.items() if k.endswith("_accuracy")}
        keep.update({k: v for k, v in metrics.items() if k.endswith("_loss")})
        return keep
    return {k: v for k, v in metrics.items() if k.endswith("_loss")}


def _step(model, optimizer, graph, x, graph_ptr, loss_fn, rng, theta_r, clip_norm, epoch):
    """Forward in training mode, loss, backward, optional clipping, update.

    ``loss_fn(out) -> (loss, grad_out)``. Raises TrainingDiverged before the
    update if the output, the loss or a gradient is not finite.
    """
    out, cache = model.forward(graph, x, graph_ptr, training=True, rng=rng)
    if not all_finite(out):
        raise TrainingDiverged(epoch, "the model output")
    loss, grad = loss_fn(out)
    if not np.isfinite(loss):
        raise TrainingDiverged(epoch, "the training loss")
    grads = model.backward(cache, grad, theta_r=theta_r)
    _check_finite_grads(grads, epoch)
    if clip_norm is not None:
        clip_grad_norm(grads, clip_norm)
    optimizer.step(grads)
    return float(loss), grads


def _node_step(model, ds, optimizer, rng, theta_r, clip_norm, epoch):
    if ds.task == "node_classification":
        def loss_fn(out):
            return nn.softmax_cross_entropy(out, ds.y, ds.train_mask)
    else:
        def loss_fn(out):
            return nn.mse_loss(out, _node_targets(ds.y).astype(out.dtype), ds.train_mask)
    return _step(model, optimizer, ds.graph, ds.x, None, loss_fn, rng, theta_r, clip_norm, epoch)


def _graph_epoch(model, ds, optimizer, train_idx, batch_size, rng, theta_r, clip_norm, epoch):
    """One pass over the shuffled training graphs.

    Returns the epoch's mean training loss (weighted like the evaluation:
    per graph, or per target entry for regression), the first batch's
    gradients and that batch (for the callback).
    """
    order = rng.permutation(train_idx)
    total, count = 0.0, 0
    first_grads, first = None, None
    for start in range(0, len(order), batch_size):
        idx = np.sort(order[start : start + batch_size])
        graph, x, graph_ptr, y = ds.batch(idx)
        if ds.task == "graph_classification":
            def loss_fn(out, y=y):
                return nn.softmax_cross_entropy(out, y)
        else:
            def loss_fn(out, y=y):
                return nn.mse_loss(out, _node_targets(y).astype(out.dtype))
        loss, grads = _step(model, optimizer, graph, x, graph_ptr if model.readout else None, loss_fn,
                            rng, theta_r, clip_norm, epoch)
        if start == 0:
            first_grads, first = grads, {"graph": graph, "x": x, "graph_ptr": graph_ptr}
        n = len(idx) if ds.task == "graph_classification" else int(np.size(y))
        total += float(loss) * n
        count += n
    return total / count, first_grads, first


def _default_graph_splits(ds, seed, val_frac=0.1, test_frac=0.1):
    n = len(ds.graphs)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(test_frac * n))) if n >= 3 else 0
    n_val = max(1, int(round(val_frac * n))) if n >= 3 else 0
    return {
        "test": np.sort(perm[:n_test]),
        "val": np.sort(perm[n_test : n_test + n_val]),
        "train": np.sort(perm[n_test + n_val :]),
    }


def _fold_splits(ds, folds, seed):
    """k-fold CV: each fold is the test set once; 10% of the rest is validation."""
    out = []
    for train_idx, test_idx in ds.folds(k=folds, seed=seed):
        perm = np.random.default_rng(seed).permutation(train_idx)
        n_val = max(1, len(perm) // 10)
        out.append({"train": np.sort(perm[n_val:]), "val": np.sort(perm[:n_val]), "test": np.sort(test_idx)})
    return out


# ---------------------------------------------------------------------------- train()
GAT_RECIPE = {
    "layers": 2,
    "hidden": 8,
    "heads": 8,
    "out_heads": 1,
    "activation": "elu",
    "dropout": 0.6,
    "attention_dropout": 0.6,
    "optimizer": "adam",
    "lr": 0.005,
    "weight_decay": 5e-4,
    "epochs": 300,
    "patience": 100,
}
"""The standard GAT recipe (Velickovic et al. 2018) for Planetoid node classification."""

GRAPH_DEFAULTS = {
    "layers": 3,
    "hidden": 16,
    "heads": 4,
    "out_heads": 1,
    "activation": "elu",
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "optimizer": "adam",
    # MUTAG underfit at lr 0.005 / 200 epochs / patience 50 (train accuracy 0.78): the loss still falls
    # after epoch 200, and patience 50 on a ~17-graph validation split stopped folds early.
    "lr": 0.01,
    "weight_decay": 1e-4,
    "epochs": 300,
    "patience": 100,
    # sum counts atoms, which mean cannot (GIN's argument); 10-fold test accuracy 0.72 -> 0.78 with the above
    "readout": "sum",
}
"""Defaults for graph-level datasets (MUTAG-sized molecules) and scene regression."""


def defaults_for(dataset):
    """The default options for a dataset: the GAT recipe for node tasks."""
    if isinstance(dataset, NodeDataset):
        return dict(GAT_RECIPE)
    d = dict(GRAPH_DEFAULTS)
    if dataset.task != "graph_classification":
        d["readout"] = None
    return d


def train(
    dataset="karate",
    *,
    layers=None,
    hidden=None,
    heads=None,
    out_heads=None,
    activation=None,
    dropout=None,
    attention_dropout=None,
    residual=False,
    readout=None,
    optimizer=None,
    lr=None,
    weight_decay=None,
    momentum=0.0,
    nesterov=False,
    epochs=None,
    patience=None,
    batch_size=32,
    clip_norm=None,
    theta_r="linear",
    attention_activation="leaky_relu",
    root_weight=None,
    normalize_features=True,
    folds=None,
    seed=0,
    dtype=np.float32,
    threads=None,
    save=None,
    quiet=False,
    log_every=10,
    callback=None,
    stream=None,
):
    """Train a GATv2 network: the Python twin of ``gatfast train``.

    Every option left as None takes the dataset's default (the standard GAT
    recipe for node classification, see ``GAT_RECIPE``; ``GRAPH_DEFAULTS``
    for graph datasets).

    Parameters
    ----------
    dataset : str, path, NodeDataset or GraphDataset
        ``"karate"`` (embedded), a Planetoid or TU ``.npz`` path, or a loaded dataset.
    folds : int, optional
        Graph classification only: run k-fold cross-validation and report
        the mean and std of the test accuracy over folds.
    save : path, optional
        Write the trained model as a checkpoint (atomically); with ``folds``,
        the last fold's model. Nothing is written when training diverges.

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
    if isinstance(dataset, (NodeDataset, GraphDataset)):
        ds, source = dataset, dataset.name
    else:
        ds = load_dataset(dataset, dtype=dtype, normalize_features=normalize_features)
        source = _dataset_source(dataset)
    opts = defaults_for(ds)
    given = dict(layers=layers, hidden=hidden, heads=heads, out_heads=out_heads, activation=activation,
                 dropout=dropout, attention_dropout=attention_dropout, optimizer=optimizer, lr=lr,
                 weight_decay=weight_decay, epochs=epochs, patience=patience)
    opts.update({k: v for k, v in given.items() if v is not None})
    if readout is not None:
        opts["readout"] = readout
    if patience == 0:
        opts["patience"] = None
    if folds is not None and not (isinstance(ds, GraphDataset) and ds.task == "graph_classification"):
        raise ValueError("folds is only available for graph classification datasets (TU format)")

    out_features = ds.num_classes if ds.num_classes else _target_width(ds)
    in_features = ds.x.shape[1] if isinstance(ds, NodeDataset) else ds.xs[0].shape[1]

    def build(model_seed):
        return GATv2Network(
            in_features, opts["hidden"], out_features, num_layers=opts["layers"], heads=opts["heads"],
            out_heads=opts["out_heads"], activation=opts["activation"], dropout=opts["dropout"],
            attention_dropout=opts["attention_dropout"], residual=residual,
            attention_activation=attention_activation, root_weight=root_weight,
            readout=opts.get("readout"), dtype=dtype, seed=model_seed,
        )

    progress = _Progress(quiet, log_every, stream)
    size = f"{ds.num_nodes} nodes" if isinstance(ds, NodeDataset) else f"{len(ds)} graphs"
    progress.line(f"dataset {ds.name}: {ds.task}, {size}, {in_features} features")
    progress.line(
        f"model: layers={opts['layers']} hidden={opts['hidden']} heads={opts['heads']} "
        f"out_heads={opts['out_heads']} activation={opts['activation']} dropout={opts['dropout']} "
        f"attention_dropout={opts['attention_dropout']} readout={opts.get('readout')}; "
        f"optimizer={opts['optimizer']} lr={opts['lr']} weight_decay={opts['weight_decay']}; "
        f"epochs={opts['epochs']} patience={opts['patience']} seed={seed} theta_r={theta_r}"
    )
    with num_threads(threads):
        if folds is not None:
            folds = V.check_int(folds, "folds", 2)
            fold_metrics, result = [], None
            t0 = time.perf_counter()
            for k, split in enumerate(_fold_splits(ds, folds, seed)):
                model = build(seed + k)
                opt = make_optimizer(opts["optimizer"], model.parameters(), opts["lr"],
                                     opts["weight_decay"], momentum, nesterov)
                result = fit(model, ds, opt, epochs=opts["epochs"], patience=opts["patience"],
                             theta_r=theta_r, clip_norm=clip_norm, batch_size=batch_size, splits=split,
                             seed=seed + k, quiet=True, callback=callback)
                fold_metrics.append(result.metrics)
                progress.line(f"fold {k + 1}/{folds}: test accuracy {result.metrics['test_accuracy']:.4f} "
                              f"(best epoch {result.metrics['best_epoch']})")
            metrics = {}
            for key in fold_metrics[0]:
                values = np.array([m[key] for m in fold_metrics], dtype=float)
                metrics[key] = float(values.mean())
                if key.endswith("_accuracy") or key.endswith("_loss"):
                    metrics[f"{key}_std"] = float(values.std())
            metrics["folds"] = folds
            metrics["seconds"] = time.perf_counter() - t0
            result = TrainResult(model=result.model, metrics=metrics, history=result.history,
                                 folds=fold_metrics, splits=result.splits)
        else:
            model = build(seed)
            opt = make_optimizer(opts["optimizer"], model.parameters(), opts["lr"], opts["weight_decay"],
                                 momentum, nesterov)
            result = fit(model, ds, opt, epochs=opts["epochs"], patience=opts["patience"], theta_r=theta_r,
                         clip_norm=clip_norm, batch_size=batch_size, seed=seed, quiet=quiet,
                         log_every=log_every, callback=callback, stream=stream)
    if save is not None:
        meta = {"dataset": source, "task": ds.task, "num_classes": int(ds.num_classes),
                "normalize_features": bool(normalize_features), "metrics": result.metrics}
        if result.splits is not None:  # so that `gatfast evaluate` scores the same graphs
            meta["splits"] = {k: v.tolist() for k, v in result.splits.items()}
        save_checkpoint(save, result.model, meta)
    return result


def _dataset_source(dataset):
    """How ``load_dataset`` finds ``dataset`` again: a generated name, an absolute path or a data/ name."""
    text = os.fspath(dataset)
    if text in GENERATED or not os.path.exists(text):
        return text
    return os.path.abspath(text)


def _target_width(ds):
    if isinstance(ds, NodeDataset):
        y = np.asarray(ds.y)
    else:
        y = np.asarray(ds.batch(np.arange(min(1, len(ds.graphs))))[3])
    return 1 if y.ndim == 1 else y.shape[1]
