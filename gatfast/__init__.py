"""gatfast: GATv2 graph attention networks on sparse graphs, on the CPU,
with closed-form gradients in Numba kernels.

Importing gatfast changes nothing in the process; what it sets later, and
when, is listed in ``gatfast/_runtime.py``.
"""

from . import data, diagnostics, estimators, models
from ._random import GraphIds, RandomKeys
from ._validate import NonFiniteError
from .graph import CSRGraph, batch_graphs
from .layers import GATv2Layer, LayerCache
from .models import GATv2Network
from .optim import SGD, Adam, AdamW, clip_grad_norm
from .training import (
    TrainConfig,
    TrainingDiverged,
    TrainResult,
    WorkersLost,
    evaluate,
    fit,
    load_checkpoint,
    save_checkpoint,
    train,
)
from .training import backends as _backends

__version__ = "0.2.0"


def _open_cluster(**options):
    # train(client=...), workers=, scheduler=: gatfast.distributed (and dask) imported on first use only
    from .distributed.cluster import open_session

    return open_session(**options)


_backends.register_cluster_provider(_open_cluster)

__all__ = [
    "CSRGraph",
    "GATv2Classifier",
    "GATv2GraphClassifier",
    "GATv2Layer",
    "GATv2Network",
    "GraphIds",
    "LayerCache",
    "NonFiniteError",
    "RandomKeys",
    "SGD",
    "Adam",
    "AdamW",
    "TrainConfig",
    "TrainResult",
    "TrainingDiverged",
    "WorkersLost",
    "batch_graphs",
    "clip_grad_norm",
    "data",
    "diagnostics",
    "estimators",
    "evaluate",
    "fit",
    "load_checkpoint",
    "models",
    "save_checkpoint",
    "train",
    "__version__",
]


def __getattr__(name):
    # the estimators import scikit-learn (optional) on first use, never at `import gatfast`
    if name in estimators.__all__:
        return getattr(estimators, name)
    raise AttributeError(f"module 'gatfast' has no attribute {name!r}")
