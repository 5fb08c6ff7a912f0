"""One training step, split into shards whose gradients add up.

A step works on a batch of *items*: the training nodes of a node dataset
(all of them, or a sampled mini-batch of seed nodes), or graphs of a graph
dataset. The batch is split into shards; each shard's loss **sum** and its
gradient are computed independently (:func:`shard_gradients`, a pure
function of the parameters, the dataset and the shard, so it can run on
another process), added in shard order (:func:`add_shards`), divided by the
batch's item count and applied (:func:`apply_step`).

Every random draw of a step (dropout masks, neighbour samples) is keyed by
``(seed, epoch, batch)`` and the global id of what it applies to
(:class:`gatfast.RandomKeys`), so the shards of a batch see exactly the
draws the whole batch would: splitting only changes the order in which
floating-point sums are added.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._random import SHUFFLE, GraphIds, RandomKeys
from .._validate import all_finite
from ..data import GraphDataset
from ..models import mse_loss, softmax_cross_entropy
from ..models.stack import stack_forward
from ..optim import clip_grad_norm
from ..sampling import sample_blocks
from ..sampling.blocks import keyed_permutation
from .errors import TrainingDiverged
from .evaluation import node_targets

__all__ = [
    "BatchPlan",
    "ShardResult",
    "add_shards",
    "apply_step",
    "epoch_plans",
    "plan_keys",
    "shard_gradients",
    "shard_inputs",
    "split_shards",
]


@dataclass(frozen=True)
class BatchPlan:
    """One step: epoch, batch number and the items (node or graph ids) it trains on."""

    epoch: int
    index: int
    items: np.ndarray


def plan_keys(config, plan):
    """The :class:`RandomKeys` of a step: ``(seed, epoch, batch)``."""
    return RandomKeys(config.seed, plan.epoch, plan.index)


def epoch_plans(dataset, config, splits, epoch):
    """The steps of epoch ``epoch``, in order.

    Full-batch node training is one step on all training nodes; sampled node
    training (``config.fanout``) and graph datasets shuffle their training
    items with a key of ``(seed, epoch)`` and cut batches of
    ``config.batch_size``.
    """
    if isinstance(dataset, GraphDataset):
        items = np.asarray(splits["train"], dtype=np.int64)
    else:
        items = np.flatnonzero(dataset.train_mask).astype(np.int64)
        if config.fanout is None:
            return [BatchPlan(epoch, 0, items)]
    order = keyed_permutation(items, RandomKeys(config.seed, SHUFFLE, epoch))
    size = config.batch_size
    return [BatchPlan(epoch, b, order[start : start + size]) for b, start in enumerate(range(0, order.size, size))]


def split_shards(items, shards):
    """``items`` cut into ``shards`` consecutive parts (fewer if there are fewer items; none empty)."""
    shards = max(1, min(int(shards), len(items)))
    return [part for part in np.array_split(np.asarray(items), shards) if part.size]


@dataclass
class ShardResult:
    """A shard's loss sum, its item count (for the mean) and the gradient of the sum."""

    loss_sum: float
    count: int
    grads: dict
    batch: dict = None  # what the callback sees (the graph and features of the step)


def _forward_inputs(model, dataset, plan, items, config, sampled):
    """``(graph, x, graph_ptr, edge_attr, ids, targets, mask)`` for a shard."""
    if isinstance(dataset, GraphDataset):
        batch = dataset.batch(np.sort(items))
        graph, x, graph_ptr, y = batch
        layers = model.num_layers
        ids = GraphIds([batch.node_ids] * layers, [batch.edge_ids] * layers, batch.graph_ids)
        return graph, x, graph_ptr if model.readout else None, batch.edge_attr, ids, y, None
    if config.fanout is None:  # the whole graph; the loss over this shard's nodes
        return dataset.graph, dataset.x, None, dataset.edge_attr, None, dataset.y, items
    if sampled is None:
        sampled = sample_blocks(dataset.graph, items, config.fanout, plan_keys(config, plan))
    x = sampled.input_features(dataset.x)
    attrs = None if dataset.edge_attr is None else sampled.edge_attrs(dataset.edge_attr)
    y = np.asarray(dataset.y)[sampled.seeds]
    return sampled.graphs, x, None, attrs, sampled.ids(), y, None


def shard_gradients(model, dataset, plan, items, config, sampled=None):
    """The loss sum over ``items`` and its gradient (a :class:`ShardResult`).

    Parameters
    ----------
    model : GATv2Network
    dataset : NodeDataset or GraphDataset
    plan : BatchPlan
        The step the shard belongs to (its keys).
    items : ndarray of int64
        Node ids (node datasets) or graph ids (graph datasets) of the shard.
    config : TrainConfig
    sampled : SampledBatch, optional
        The blocks of ``items``, if already sampled (with the step's keys).

    Raises
    ------
    TrainingDiverged
        The output, the loss or a gradient is not finite.
    """
    graph, x, graph_ptr, edge_attr, ids, y, mask = _forward_inputs(model, dataset, plan, items, config, sampled)
    keys = plan_keys(config, plan)
    if ids is None:  # the whole graph: rows and edges are their own ids
        ids = GraphIds.positions([graph] * model.num_layers)
    # the features are rows of the dataset, which fit checked for NaN and inf once
    out, cache = stack_forward(model, graph, x, graph_ptr, True, keys, edge_attr, ids, x_finite=True)
    if not all_finite(out):
        raise TrainingDiverged(plan.epoch, "the model output")
    if dataset.task.endswith("classification"):
        loss, grad = softmax_cross_entropy(out, y, mask, reduction="sum")
        count = out.shape[0] if mask is None else len(mask)
    else:
        target = node_targets(y).astype(out.dtype)
        loss, grad = mse_loss(out, target, mask, reduction="sum")
        count = int(target.size if mask is None else len(mask) * target.shape[1])
    if not np.isfinite(loss):
        raise TrainingDiverged(plan.epoch, "the training loss")
    grads = model.backward(cache, grad, theta_r=config.theta_r, input_grad=False)
    grads = {k: v for k, v in grads.items() if k not in ("x", "edge_attr")}
    seen = {"graph": graph, "x": x, "graph_ptr": graph_ptr, "edge_attr": edge_attr}
    return ShardResult(float(loss), count, grads, seen)


def shard_inputs(model, dataset, plan, items, config):
    """What the shard ``items`` of step ``plan`` trains on, as :attr:`ShardResult.batch` holds it.

    ``{"graph", "x", "graph_ptr", "edge_attr"}``: the batch's graphs and
    features (sampled blocks with the step's keys for sampled training).
    Executors that compute shards elsewhere return no batch; ``fit`` builds
    it here when a callback needs one.
    """
    graph, x, graph_ptr, edge_attr = _forward_inputs(model, dataset, plan, items, config, None)[:4]
    return {"graph": graph, "x": x, "graph_ptr": graph_ptr, "edge_attr": edge_attr}


def add_shards(results):
    """The batch's loss sum, count and gradient: the shards added in their order (a fixed order)."""
    first = results[0]
    grads = {k: v.copy() for k, v in first.grads.items()}
    loss, count = first.loss_sum, first.count
    for r in results[1:]:
        loss += r.loss_sum
        count += r.count
        for k, v in r.grads.items():
            grads[k] += v
    return ShardResult(loss, count, grads, first.batch)


def apply_step(optimizer, total, config, epoch):
    """Divide by the item count, check, clip and update in place; returns the batch's mean loss."""
    scale = 1.0 / total.count
    for name, g in total.grads.items():
        g *= g.dtype.type(scale)
        if not all_finite(g):
            raise TrainingDiverged(epoch, f"the gradient of {name}")
    if config.clip_norm is not None:
        clip_grad_norm(total.grads, config.clip_norm)
    optimizer.step(total.grads)
    return total.loss_sum * scale
