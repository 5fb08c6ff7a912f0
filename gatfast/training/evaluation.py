"""Metrics of a model on a dataset: node masks or graph splits, in fixed-size batches."""

from __future__ import annotations

import numpy as np

from .._validate import all_finite
from ..data import NodeDataset
from ..models import accuracy, mse_loss, softmax_cross_entropy
from .errors import NonFiniteOutput

__all__ = [
    "EVAL_BATCH_SIZE",
    "check_compatible",
    "evaluate",
    "evaluate_splits",
    "finite_output",
    "node_targets",
    "target_width",
    "task_metrics",
]

EVAL_BATCH_SIZE = 256  # graphs per evaluation batch, the same in fit() and evaluate()


def finite_output(out, where):
    if not all_finite(out):
        raise NonFiniteOutput(f"the model output {where} contains NaN or inf")
    return out


def node_targets(y):
    y = np.asarray(y)
    return y if y.ndim == 2 else y.reshape(-1, 1)


def eval_nodes(model, ds, outputs=None):
    """Loss and accuracy per mask of a node dataset; ``outputs(model, ds)`` gives the logits (default: whole graph)."""
    out = outputs(model, ds) if outputs is not None else model.output(ds.graph, ds.x, edge_attr=ds.edge_attr)
    logits = finite_output(out, f"on dataset {ds.name!r}")
    metrics = {}
    for split in ("train", "val", "test"):
        mask = getattr(ds, f"{split}_mask")
        if not mask.any():
            continue
        if ds.task == "node_classification":
            loss, _ = softmax_cross_entropy(logits, ds.y, mask)
            metrics[f"{split}_accuracy"] = float(accuracy(logits, ds.y, mask))
        else:
            loss, _ = mse_loss(logits, node_targets(ds.y).astype(logits.dtype), mask)
        metrics[f"{split}_loss"] = float(loss)
    return metrics


def eval_graphs(model, ds, indices, batch_size):
    """Mean loss (and accuracy) over the graphs ``indices``."""
    if len(indices) == 0:
        return {}
    total_loss, total_correct, total_count = 0.0, 0, 0
    for start in range(0, len(indices), batch_size):
        idx = indices[start : start + batch_size]
        batch = ds.batch(idx)
        graph, x, graph_ptr, y = batch
        out = model.output(graph, x, graph_ptr if model.readout else None, edge_attr=batch.edge_attr)
        finite_output(out, f"on dataset {ds.name!r}")
        if ds.task == "graph_classification":
            loss, _ = softmax_cross_entropy(out, y)
            total_correct += int(np.sum(np.argmax(out, axis=1) == y))
            count = len(idx)
        else:
            target = node_targets(y).astype(out.dtype)
            loss, _ = mse_loss(out, target)
            count = target.size
        total_loss += float(loss) * count
        total_count += count
    metrics = {"loss": total_loss / total_count}
    if ds.task == "graph_classification":
        metrics["accuracy"] = total_correct / len(indices)
    return metrics


def evaluate(model, dataset, splits=None, batch_size=EVAL_BATCH_SIZE):
    """Compute the metrics of ``model`` on ``dataset`` (no training).

    Parameters
    ----------
    model : GATv2Network
        A model that fits the dataset (feature and output sizes, edge features).
    dataset : NodeDataset or GraphDataset
        For node datasets the dataset's masks are the splits.
    splits : dict of str to array_like of int, optional
        Graph datasets: ``{"test": indices, ...}`` (default: all graphs as
        ``test``; ``TrainResult.splits`` and a checkpoint's ``meta["splits"]``
        hold the training run's splits). Ignored for node datasets.
    batch_size : int, default 256
        Graphs per evaluation batch; the default is the one :func:`fit`
        evaluates with, so the metrics are the same to the bit.

    Returns
    -------
    dict of str to float
        ``<split>_loss`` for every split, and ``<split>_accuracy`` for
        classification (node splits with no node are left out).
    """
    check_compatible(model, dataset)
    if isinstance(dataset, NodeDataset):
        return eval_nodes(model, dataset)
    splits = splits or {"test": np.arange(len(dataset.graphs))}
    metrics = {}
    for split, idx in splits.items():
        for key, value in eval_graphs(model, dataset, np.asarray(idx), batch_size).items():
            metrics[f"{split}_{key}"] = value
    return metrics


def check_compatible(model, dataset):
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
    if not dataset.num_classes and out_features != target_width(dataset):
        raise ValueError(
            f"the model predicts {out_features} targets per node but dataset {dataset.name!r} has "
            f"{target_width(dataset)}"
        )
    edge_dim = model.get_config().get("edge_dim")
    if edge_dim != dataset.edge_dim:
        have_edges = "no edge features" if dataset.edge_dim is None else f"{dataset.edge_dim} edge features"
        want = "no edge features" if edge_dim is None else f"{edge_dim} edge features"
        raise ValueError(f"the model uses {want} but dataset {dataset.name!r} has {have_edges}")
    graph_level = dataset.task == "graph_classification"
    if graph_level != bool(model.readout):
        raise ValueError(
            f"the model (readout={model.readout!r}) does not fit the task {dataset.task!r} of {dataset.name!r}"
        )


def evaluate_splits(model, dataset, splits, outputs=None):
    """Metrics per split: the masks of a node dataset (``splits`` None), or graph splits."""
    if splits is None:
        return eval_nodes(model, dataset, outputs)
    metrics = {}
    for split in ("train", "val", "test"):
        if len(splits.get(split, ())):
            for k, v in eval_graphs(model, dataset, splits[split], EVAL_BATCH_SIZE).items():
                metrics[f"{split}_{k}"] = v
    return metrics


def task_metrics(task, metrics):
    """Keep accuracies for classification and losses for regression."""
    if task.endswith("classification"):
        keep = {k: v for k, v in metrics.items() if k.endswith("_accuracy")}
        keep.update({k: v for k, v in metrics.items() if k.endswith("_loss")})
        return keep
    return {k: v for k, v in metrics.items() if k.endswith("_loss")}


def target_width(ds):
    if isinstance(ds, NodeDataset):
        y = np.asarray(ds.y)
    else:
        y = np.asarray(ds.batch(np.arange(min(1, len(ds.graphs))))[3])
    return 1 if y.ndim == 1 else y.shape[1]
