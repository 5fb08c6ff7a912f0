"""gatfast: GATv2 graph attention networks on sparse graphs, on the CPU,
with closed-form gradients in Numba kernels.

Importing gatfast changes nothing in the process; what it sets later, and
when, is listed in ``gatfast/_runtime.py``. It imports nothing heavy either:
each name below is imported on first use (``gatfast.CSRGraph`` imports
``gatfast.graph``, and Numba with it), so that ``gatfast train`` can start
its compile helper (``gatfast/_precompile.py``) before the library loads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import _hooks

__version__ = "0.2.0"

# name -> the module it comes from, imported on first use
_HOMES = {
    "CSRGraph": "graph",
    "batch_graphs": "graph",
    "GraphIds": "_random",
    "RandomKeys": "_random",
    "NonFiniteError": "_validate",
    "GATv2Layer": "layers",
    "LayerCache": "layers",
    "GATv2Network": "models",
    "SGD": "optim",
    "Adam": "optim",
    "AdamW": "optim",
    "clip_grad_norm": "optim",
    "TrainConfig": "training",
    "TrainResult": "training",
    "TrainingDiverged": "training",
    "WorkersLost": "training",
    "evaluate": "training",
    "fit": "training",
    "load_checkpoint": "training",
    "save_checkpoint": "training",
    "train": "training",
    # the estimators import scikit-learn (optional) on first use, never at `import gatfast`
    "GATv2Classifier": "estimators",
    "GATv2GraphClassifier": "estimators",
}
_SUBPACKAGES = ("data", "diagnostics", "estimators", "models")  # also in __all__
# reachable as attributes too, as when the package imported them all (gatfast.distributed needs dask:
# import it)
_MODULES = ("cli", "graph", "kernels", "layers", "optim", "sampling", "training")

__all__ = sorted([*_HOMES, *_SUBPACKAGES, "__version__"], key=str.lower)

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from . import data, diagnostics, estimators, models  # noqa: F401
    from ._random import GraphIds, RandomKeys  # noqa: F401
    from ._validate import NonFiniteError  # noqa: F401
    from .estimators import GATv2Classifier, GATv2GraphClassifier  # noqa: F401
    from .graph import CSRGraph, batch_graphs  # noqa: F401
    from .layers import GATv2Layer, LayerCache  # noqa: F401
    from .models import GATv2Network  # noqa: F401
    from .optim import SGD, Adam, AdamW, clip_grad_norm  # noqa: F401
    from .training import (  # noqa: F401
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


def __getattr__(name):
    if name in _SUBPACKAGES or name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")  # also sets it on this module
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    if _HOMES[name] != "estimators":  # an estimator may be a placeholder until scikit-learn is installed
        globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def _open_cluster(**options):
    # train(client=...), workers=, scheduler=: gatfast.distributed (and dask) imported on first use only
    from .distributed.cluster import open_session

    return open_session(**options)


_hooks.set_cluster_provider(_open_cluster)
