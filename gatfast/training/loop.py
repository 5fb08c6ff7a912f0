"""The training loop: epochs, model selection, early stopping, divergence checks."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from .._validate import NonFiniteError, all_finite
from ..data import GraphDataset
from ..models.network import GATv2Network
from ..sampling import NeighborSampler
from .config import TrainConfig
from .errors import NonFiniteOutput, TrainingDiverged, WorkersLost
from .evaluation import check_compatible, evaluate_splits, node_targets, task_metrics
from .inference import node_outputs
from .progress import Progress
from .splits import check_splits, default_graph_splits
from .steps import add_shards, apply_step, epoch_plans, shard_gradients, shard_inputs, split_shards

__all__ = ["BLOWUP_FACTOR", "TrainResult", "blown_up", "constant_loss", "fit"]


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
    config : TrainConfig or None
        The options of the run.
    interrupted : str or None
        Why training stopped before its last epoch at a stop request (the
        signal name, ``"SIGINT"`` or ``"SIGTERM"``, from :func:`gatfast.train`),
        else None. ``metrics["interrupted"]`` is then True.
    """

    model: GATv2Network
    metrics: dict
    history: list = field(default_factory=list)
    folds: list = field(default_factory=list)
    splits: dict = None
    config: TrainConfig = None
    interrupted: str = None


def _check_finite_grads(grads, epoch):
    for name, g in grads.items():
        if g is not None and name != "x" and not all_finite(g):
            raise TrainingDiverged(epoch, f"the gradient of {name}")


def _check_finite_params(params, epoch):
    # a finite gradient times a huge learning rate can still overflow a parameter
    for name, p in params.items():
        if not all_finite(p):
            raise TrainingDiverged(epoch, f"parameter {name} after the update")


@contextmanager
def _divergence(epoch, what):
    """Report NaN/inf inside the model as divergence at ``epoch``.

    The layers validate their inputs, so an overflowing hidden activation
    surfaces as a NonFiniteError; ``fit`` checked the dataset's features and
    the parameters, so here it can only come from training.
    """
    try:
        yield
    except NonFiniteOutput:
        raise TrainingDiverged(epoch, what) from None
    except NonFiniteError as exc:
        raise TrainingDiverged(epoch, what) from exc


def _check_finite_inputs(ds):
    xs = ds.xs if isinstance(ds, GraphDataset) else [ds.x]
    for x in xs:
        values = x.data if hasattr(x, "tocsr") else np.asarray(x)
        if not all_finite(values):
            raise ValueError(f"the features of dataset {ds.name!r} must be finite, but contain NaN or inf")
    if not ds.num_classes:
        ys = ds.y if isinstance(ds, GraphDataset) else [ds.y]
        if not all(np.all(np.isfinite(np.asarray(y, dtype=float))) for y in ys):
            raise ValueError(f"the targets of dataset {ds.name!r} must be finite, but contain NaN or inf")


#: A training loss above this multiple of its reference means training blew up (see :func:`blown_up`).
BLOWUP_FACTOR = 1e4


def blown_up(loss, first, constant):
    """Whether a training loss shows that training blew up.

    The reference is the larger of the first epoch's training loss and the
    loss of the best constant prediction (``log(num_classes)`` for
    classification, the variance of the training targets for regression),
    so that a good first epoch does not make the bound tiny. Training blew
    up when a loss exceeds :data:`BLOWUP_FACTOR` times that reference (or is
    NaN). Gradient descent at a sane learning rate lowers the loss; a loss
    ten thousand times that of predicting a constant means the parameters
    have run away (``--lr 1e6`` on karate reaches 3.7e11 without a NaN).
    """
    reference = max(first, constant)
    return not loss <= BLOWUP_FACTOR * reference if reference > 0 else not loss == loss


def constant_loss(ds, train_targets):
    """The training loss of the best constant prediction: ``log(C)``, or the targets' variance."""
    if ds.num_classes:
        return math.log(max(int(ds.num_classes), 2))
    y = np.asarray(train_targets, dtype=np.float64)
    return float(np.mean((y - y.mean(axis=0)) ** 2)) if y.size else 0.0


def _check_classes(ds, splits):
    """Classification needs two classes among the training labels."""
    if not ds.task.endswith("classification"):
        return
    labels = np.asarray(ds.y)[splits["train"] if splits is not None else ds.train_mask]
    classes = np.unique(labels)
    if ds.num_classes < 2 or classes.size < 2:
        found = f"({classes[0]})" if classes.size else "(none)"
        raise ValueError(
            f"dataset {ds.name!r} has a single class {found} among its training labels "
            f"(num_classes={ds.num_classes}): classification needs at least two"
        )


def _training_targets(ds, splits):
    if ds.num_classes:
        return None
    if splits is None:
        return node_targets(ds.y)[ds.train_mask]
    return ds.batch(np.asarray(splits["train"]))[3]


def _better(metrics, best):
    """Model selection: highest validation accuracy (lowest loss breaks ties), or lowest loss."""
    if best is None:
        return True
    if "val_accuracy" in metrics and metrics["val_accuracy"] != best["val_accuracy"]:
        return metrics["val_accuracy"] > best["val_accuracy"]
    return metrics["val_loss"] < best["val_loss"]


def _selection_metrics(metrics):
    """The ``val_*`` metrics, or the ``train_*`` ones renamed when there is no validation split."""
    if "val_loss" in metrics:
        return {k: v for k, v in metrics.items() if k.startswith("val_")}
    return {"val" + k[len("train") :]: v for k, v in metrics.items() if k.startswith("train_")}


def fit(model, dataset, optimizer, config=None, *, splits=None, callback=None, stream=None, stop=None,
        executor=None, **options):
    """Train ``model`` on ``dataset`` and restore the best validation epoch.

    Parameters
    ----------
    model : GATv2Network
        The model to train, in place.
    dataset : NodeDataset or GraphDataset
        The data, with its train/val/test masks (node datasets).
    optimizer : SGD, Adam or AdamW
        Built on ``model.parameters()``.
    config : TrainConfig, optional
        The loop reads ``epochs``, ``patience`` (GAT's rule: stop when
        neither the validation accuracy nor the validation loss improved for
        that many epochs; None never stops), ``theta_r``, ``clip_norm``,
        ``batch_size`` (graph datasets), ``seed`` (dropout masks and batch
        order), ``fanout``/``eval_fanout`` (neighbour sampling), ``shards``,
        ``quiet`` and ``log_every``. Default: ``TrainConfig()``.
    splits : dict, optional
        Graph datasets: ``{"train": idx, "val": idx, "test": idx}``
        (default: a seeded 80/10/10 split).
    callback : callable, optional
        ``callback(epoch, model, grads, row)`` once per epoch, after the
        epoch's updates and evaluation (used for diagnostics). ``row`` is a
        copy of the epoch's history entry plus ``"graph"`` and ``"x"``: the
        whole graph (node datasets) or the epoch's first training batch
        (graph datasets, with its ``"graph_ptr"``); ``grads`` are the
        gradients of that step (of that batch).
    stream : file object, optional
        Where progress goes (default stdout).
    stop : callable, optional
        ``stop()`` is called at the end of every epoch; a true return value
        (a reason such as ``"SIGINT"``) ends training there, as early
        stopping does: the best parameters so far are restored and the
        result has ``interrupted`` set and ``metrics["interrupted"] = True``.
        :func:`gatfast.train` passes the Ctrl-C/SIGTERM stop request.
    executor : callable, optional
        ``executor(model, plan, shards, config) -> list of ShardResult``
        computes a step's shards elsewhere (``gatfast.distributed``); the
        default computes them here, one after the other. With
        ``config.shards`` None a batch is cut into ``executor.default_shards``
        shards (one per worker; 1 without an executor). An executor that
        loses its cluster raises :class:`~gatfast.training.errors.WorkersLost`:
        ``fit`` then restores the best parameters so far, as a stop request
        would, and raises it again with the evaluated result attached.
    **options
        Fields of :class:`TrainConfig` that replace those of ``config``.

    Returns
    -------
    TrainResult
        The model (best validation epoch restored), its final metrics and the history.

    Raises
    ------
    TrainingDiverged
        When the loss, a gradient, a parameter or an activation becomes
        NaN/inf, or the training loss blows up (:func:`blown_up`); the
        message names the epoch, and the model is left with the best
        parameters found before (its initial ones if that was epoch 1).
    ValueError
        Classification data with fewer than two classes among its training labels.
    WorkersLost
        The executor lost its cluster: ``exc.result`` is the run up to then
        (the best parameters so far, ``interrupted="workers lost"``), or
        None if no epoch had finished (the model has its initial parameters).
    """
    config = (config or TrainConfig()).replace(**options)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None, got {type(callback).__name__}")
    if stop is not None and not callable(stop):
        raise TypeError(f"stop must be callable or None, got {type(stop).__name__}")
    check_compatible(model, dataset)
    _check_finite_inputs(dataset)
    epochs, patience = config.epochs, config.patience
    params = model.parameters()
    t0 = time.perf_counter()
    history, best, best_params, best_epoch, interrupted, lost = [], None, None, 0, None, None
    best_metrics = None  # the evaluation of best_params, when nothing could have changed them after it
    best_acc, best_loss, since = -math.inf, math.inf, 0
    graph_level = isinstance(dataset, GraphDataset)
    if graph_level:
        if splits is None:
            splits = default_graph_splits(dataset, config.seed)
        splits = check_splits(dataset, splits)
    _check_classes(dataset, splits if graph_level else None)
    sampler, outputs = _sampled_setup(model, dataset, config)
    constant = constant_loss(dataset, _training_targets(dataset, splits if graph_level else None))
    first_loss = None

    # the model never ends up with non-finite parameters: on divergence it
    # gets the best parameters so far (its initial ones before any epoch)
    initial = {k: v.copy() for k, v in params.items()}
    with Progress(config.quiet, config.log_every, stream, total=epochs) as progress:
        try:
            for epoch in range(1, epochs + 1):
                with _divergence(epoch, "an activation inside the model"):
                    loss, grads, first = _run_epoch(model, dataset, optimizer, config, splits, epoch, executor,
                                                    sampler, progress, callback is not None)
                _check_finite_params(params, epoch)
                with _divergence(epoch, "an activation inside the model after the update"):
                    metrics = evaluate_splits(model, dataset, splits if graph_level else None, outputs)
                first_loss = loss if first_loss is None else first_loss
                # the step's loss (before the update) and the updated model's training loss
                worst = max(loss, metrics.get("train_loss", loss))
                if blown_up(worst, first_loss, constant):
                    raise TrainingDiverged(
                        epoch, f"the training loss ({worst:.3g})",
                        f"blew up (above {BLOWUP_FACTOR:g} x max(first-epoch loss {first_loss:.3g}, "
                        f"constant-prediction loss {constant:.3g}))",
                    )
                row = {"epoch": epoch, "loss": loss, **metrics}
                history.append(row)
                if callback is not None:
                    callback(epoch, model, grads, {**row, **first})
                # Model selection and early stopping on the validation split, or on
                # the training split when there is none (the history keeps true names).
                sel = _selection_metrics(metrics)
                if _better(sel, best):
                    best, best_epoch = sel, epoch
                    best_params = {k: v.copy() for k, v in params.items()}
                    # evaluation is deterministic: these are the final metrics if this epoch stays the best
                    # (a callback may have changed the parameters since they were evaluated)
                    best_metrics = metrics if callback is None else None
                improved = False
                if "val_accuracy" in sel and sel["val_accuracy"] >= best_acc:
                    best_acc, improved = sel["val_accuracy"], True
                if sel["val_loss"] <= best_loss:
                    best_loss, improved = sel["val_loss"], True
                since = 0 if improved else since + 1
                stop_early = patience is not None and since >= patience
                progress.epoch(epoch, stop_early or epoch == epochs, row)
                if stop_early:
                    progress.line(
                        f"early stop at epoch {epoch}: no validation improvement for {patience} epochs"
                    )
                    break
                reason = stop() if stop is not None else None
                if reason:
                    interrupted = reason if isinstance(reason, str) else "stop"
                    break
        except TrainingDiverged:
            model.load_parameters(best_params if best_params is not None else initial)
            raise
        except WorkersLost as exc:  # as a stop request: the epoch's partial updates are dropped
            interrupted, lost = "workers lost", WorkersLost(f"{exc} (during epoch {epoch})")

    model.load_parameters(best_params if best_params is not None else initial)
    if best_metrics is None:
        best_metrics = evaluate_splits(model, dataset, splits if graph_level else None, outputs)
    final = task_metrics(dataset.task, best_metrics)
    final.update(epochs=len(history), best_epoch=best_epoch, seconds=time.perf_counter() - t0)
    if interrupted:
        final["interrupted"] = True
    result = TrainResult(
        model=model,
        metrics=final,
        history=history,
        splits=splits if graph_level else None,
        config=config,
        interrupted=interrupted,
    )
    if lost is not None:
        lost.result = result if history else None  # no epoch finished: nothing worth keeping
        raise lost
    return result


def _sampled_setup(model, dataset, config):
    """The neighbour sampler and the evaluation outputs of sampled node training (None, None otherwise)."""
    if config.fanout is None:
        return None, None
    if isinstance(dataset, GraphDataset):
        raise ValueError("fanout (neighbour sampling) is for node datasets; graph datasets train on whole graphs")
    if len(config.fanout) != model.num_layers:
        raise ValueError(f"fanout must have one entry per layer ({model.num_layers}), got {list(config.fanout)}")
    if config.eval_fanout is not None and len(config.eval_fanout) != model.num_layers:
        raise ValueError(f"eval_fanout must have one entry per layer ({model.num_layers}), "
                         f"got {list(config.eval_fanout)}")
    sampler = NeighborSampler(dataset.graph, config.fanout, dataset.train_mask, config.batch_size, seed=config.seed)
    return sampler, partial(node_outputs, config=config)


def _local_shards(model, dataset, plan, shards, config, sampled):
    """The shards of one step, computed here one after the other."""
    if len(shards) == 1:
        return [shard_gradients(model, dataset, plan, shards[0], config, sampled)]
    return [shard_gradients(model, dataset, plan, items, config) for items in shards]


def _run_epoch(model, dataset, optimizer, config, splits, epoch, executor, sampler, progress, want_batch):
    """Every step of one epoch; returns the mean training loss, the first step's gradients and batch."""
    plans = epoch_plans(dataset, config, splits, epoch)
    parts = config.shards if config.shards is not None else getattr(executor, "default_shards", 1)
    # sampled training: the sampler yields the same batches as the plans (same keys), sampled ahead
    batches = sampler.epoch(epoch) if sampler is not None and parts == 1 and executor is None else None
    loss_sum, count, first = 0.0, 0, None
    with progress.batches(len(plans), epoch) as tick:
        for plan in plans:
            sampled = next(batches) if batches is not None else None
            shards = split_shards(plan.items, parts)
            if executor is None:
                results = _local_shards(model, dataset, plan, shards, config, sampled)
            else:
                results = executor(model, plan, shards, config)
            total = add_shards(results)
            apply_step(optimizer, total, config, epoch)
            loss_sum += total.loss_sum
            count += total.count
            if first is None:
                batch = total.batch  # an executor sends no batch back: rebuilt here for the callback
                if batch is None and want_batch:
                    batch = shard_inputs(model, dataset, plan, shards[0], config)
                first = (total.grads, batch or {})
            tick()
    return loss_sum / count, first[0], first[1]
