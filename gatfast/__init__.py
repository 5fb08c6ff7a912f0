"""gatfast: GATv2 graph attention networks on sparse graphs, on the CPU,
with closed-form gradients in Numba kernels."""

import os as _os

# Numba's OpenMP workers spin after every parallel loop by default; on a
# small machine they then starve OpenBLAS's threads in the dense products
# between kernels (and vice versa): batches of small graphs ran up to 10x
# slower. Passive waiting costs microseconds per kernel launch. This must be
# set before the first parallel kernel starts libgomp; a user's setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import data, diagnostics, nn
from .checkpoint import load_checkpoint, save_checkpoint
from .estimator import GATv2Classifier
from .graph import CSRGraph, batch_graphs
from .layer import GATv2Layer, LayerCache
from .model import GATv2Network
from .optim import SGD, Adam, AdamW, clip_grad_norm
from .train import TrainResult, evaluate, fit, train

__version__ = "0.1.0"

__all__ = [
    "CSRGraph",
    "GATv2Layer",
    "GATv2Network",
    "GATv2Classifier",
    "LayerCache",
    "SGD",
    "Adam",
    "AdamW",
    "TrainResult",
    "batch_graphs",
    "clip_grad_norm",
    "data",
    "diagnostics",
    "evaluate",
    "fit",
    "load_checkpoint",
    "nn",
    "save_checkpoint",
    "train",
    "__version__",
]
