"""Every training option, once: its type, default, allowed values and help.

:class:`TrainConfig` is the single home of the options of ``gatfast train``:
:func:`gatfast.train`, :func:`gatfast.fit`, the estimators and the command
line (whose parser is generated from the fields below) all read it, and a
checkpoint records it. Named presets hold the recipes that differ from the
defaults; the defaults themselves are the GAT recipe for citation graphs
(Veličković et al., 2018).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

import numpy as np

from .. import _validate as V
from .options import Option, check_address
from .options import option_field as _opt
from .presets import PRESETS, preset_for

__all__ = ["PRESETS", "Option", "TrainConfig", "preset_for"]


@dataclass(frozen=True)
class TrainConfig:
    """The options of a training run: model, data, optimisation, runtime and output.

    Every field is validated on construction (a wrong type is a TypeError, a
    value out of range a ValueError, each naming the field). The defaults are
    the GAT recipe for Planetoid node classification; :meth:`preset` gives
    the other recipes. Frozen: :meth:`replace` returns a changed copy.

    Examples
    --------
    >>> from gatfast import TrainConfig
    >>> cfg = TrainConfig.preset("tu", epochs=50)
    >>> cfg.readout, cfg.epochs
    ('sum', 50)
    >>> TrainConfig.from_json(cfg.to_json()) == cfg
    True
    """

    # ------------------------------------------------------------------ model
    layers: int = _opt(2, "number of GATv2 layers", "model", int, low=1, high=V.MAX_LAYERS)
    hidden: int = _opt(8, "channels per head in the hidden layers", "model", int, low=1, high=V.MAX_CHANNELS)
    heads: int = _opt(
        8, "attention heads of the hidden layers (concatenated)", "model", int, low=1, high=V.MAX_HEADS
    )
    out_heads: int = _opt(1, "heads of the output layer (averaged)", "model", int, low=1, high=V.MAX_HEADS)
    activation: str = _opt(
        "elu", "activation between layers", "model", str, choices=("elu", "relu", "identity")
    )
    dropout: float = _opt(
        0.6, "feature dropout before every layer", "model", float, low=0.0, high=1.0, high_open=True
    )
    attention_dropout: float = _opt(
        0.6, "dropout on the attention weights", "model", float, low=0.0, high=1.0, high_open=True
    )
    residual: bool = _opt(False, "add a linear skip connection to every layer", "model", bool)
    readout: str | None = _opt(
        None,
        "graph-level pooling before a linear classifier (None: node-level outputs)",
        "model",
        str,
        choices=("mean", "sum", "max"),
        optional=True,
    )
    attention_activation: str = _opt(
        "leaky_relu",
        "activation inside the attention score (softplus: GAT+)",
        "model",
        str,
        choices=("leaky_relu", "softplus"),
    )
    root_weight: str | None = _opt(
        None,
        "GAT+ root weight instead of self loops in the attention (None: off)",
        "model",
        str,
        choices=("theta_r", "theta_n"),
        optional=True,
    )
    fill_value: str = _opt(
        "mean",
        "attributes of the self loops each layer adds, from the node's other in-edges (edge features only)",
        "model",
        str,
        choices=("mean", "add", "max", "min", "mul"),
    )
    # ------------------------------------------------------------------ data
    edge_features: bool = _opt(
        True,
        "use the dataset's edge features when it has some (MUTAG's bond types, road-scene geometry)",
        "data",
        bool,
    )
    normalize_features: bool = _opt(
        True, "row-normalise node features as PyG's NormalizeFeatures", "data", bool
    )
    # ------------------------------------------------------------------ optimisation
    optimizer: str = _opt("adam", "optimizer", "optimisation", str, choices=("adam", "adamw", "sgd"))
    lr: float = _opt(0.005, "learning rate", "optimisation", float, low=0.0, low_open=True)
    weight_decay: float = _opt(5e-4, "L2 penalty (decoupled for adamw)", "optimisation", float, low=0.0)
    momentum: float = _opt(0.0, "SGD momentum", "optimisation", float, low=0.0, high=1.0, high_open=True)
    nesterov: bool = _opt(False, "Nesterov momentum for SGD", "optimisation", bool)
    epochs: int = _opt(300, "maximum number of epochs", "optimisation", int, low=1, high=10**7)
    patience: int | None = _opt(
        100,
        "early stopping after this many epochs without validation improvement (None or 0: never stop early)",
        "optimisation",
        int,
        low=0,
        optional=True,
    )
    batch_size: int = _opt(
        32, "graphs (graph datasets) or seed nodes (with --fanout) per mini-batch", "optimisation", int, low=1
    )
    clip_norm: float | None = _opt(
        None,
        "clip the global gradient norm to this value (None: no clipping)",
        "optimisation",
        float,
        low=0.0,
        low_open=True,
        optional=True,
    )
    folds: int | None = _opt(
        None,
        "k-fold cross-validation for graph classification (None: one split)",
        "optimisation",
        int,
        low=2,
        optional=True,
    )
    theta_r: str = _opt(
        "linear",
        "form of the Θ_R gradient term: the O(N) sum or the paper's O(N²) pairwise sum",
        "optimisation",
        str,
        choices=("linear", "pairwise"),
    )
    fanout: tuple | None = _opt(
        None,
        "neighbour sampling: in-edges kept per node and layer, input layer first, e.g. 10,10 "
        "(None: full-batch training); node datasets only",
        "optimisation",
        tuple,
        low=1,
        optional=True,
    )
    eval_fanout: tuple | None = _opt(
        None,
        "with --fanout: sample this many in-edges per node and layer when evaluating (None: every in-edge, "
        "layer by layer over chunks of nodes)",
        "optimisation",
        tuple,
        low=1,
        optional=True,
    )
    # ------------------------------------------------------------------ runtime
    shards: int | None = _opt(
        None,
        "split every batch into this many shards whose gradients are added in a fixed order (the unit of "
        "data-parallel work; the result does not depend on it beyond rounding; None: 1 in one process, one "
        "per worker on a cluster)",
        "runtime",
        int,
        low=1,
        optional=True,
        recipe=False,
    )
    workers: int | None = _opt(
        None,
        "train on a local Dask cluster of this many worker processes (pip install gatfast[distributed]); "
        "each computes shards of every step, or whole folds with --folds (None: this process only)",
        "runtime",
        int,
        low=1,
        high=1024,
        optional=True,
        recipe=False,
    )
    scheduler: str | None = _opt(
        None,
        "train on the existing Dask cluster whose scheduler has this address, e.g. tcp://127.0.0.1:8786 "
        "(started with 'dask scheduler' and 'dask worker'; None: no cluster)",
        "runtime",
        str,
        optional=True,
        recipe=False,
    )
    worker_timeout: float = _opt(
        30.0,
        "on a cluster: seconds to wait for a worker when none is left; then the run stops with an error "
        "(the best model so far is still saved)",
        "runtime",
        float,
        low=0.0,
        low_open=True,
        recipe=False,
    )
    seed: int = _opt(
        0, "random seed (initialisation, dropout, batches, splits)", "runtime", int, low=0, recipe=False
    )
    dtype: str = _opt(
        "float32",
        "floating-point type of features and parameters",
        "runtime",
        np.dtype,
        choices=("float32", "float64"),
        recipe=False,
    )
    threads: int | None = _opt(
        None, "Numba threads (None: all cores)", "runtime", int, low=1, optional=True, recipe=False
    )
    # ------------------------------------------------------------------ output
    save: str | None = _opt(
        None,
        "write the trained model as a checkpoint (.npz)",
        "output",
        os.PathLike,
        optional=True,
        recipe=False,
    )
    metrics_json: str | None = _opt(
        None, "write the final metrics as JSON", "output", os.PathLike, optional=True, recipe=False
    )
    diagnose: bool = _opt(
        False,
        "record the Θ_R gradient flow per epoch to a CSV (and a PNG plot with "
        "matplotlib) next to --save, or in ./runs/",
        "output",
        bool,
        recipe=False,
    )
    quiet: bool = _opt(False, "print only the final metrics (no progress)", "output", bool, recipe=False)
    log_every: int = _opt(10, "a progress line every this many epochs", "output", int, low=1, recipe=False)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            checked = f.metadata["option"].check(f.name, getattr(self, f.name))
            object.__setattr__(self, f.name, checked)
        if self.patience == 0:
            object.__setattr__(self, "patience", None)
        if self.scheduler is not None:
            object.__setattr__(self, "scheduler", check_address("scheduler", self.scheduler))
            if self.workers is not None:
                raise ValueError(
                    "workers (start a local cluster) and scheduler (use an existing one) are "
                    f"alternatives: got workers={self.workers} and scheduler={self.scheduler!r}"
                )

    # ------------------------------------------------------------------ construction
    @classmethod
    def options(cls):
        """``{name: (default, Option)}`` for every field, in declaration order."""
        return {f.name: (f.default, f.metadata["option"]) for f in dataclasses.fields(cls)}

    @classmethod
    def preset(cls, name, **overrides):
        """The named recipe (see :data:`PRESETS`), with ``overrides`` applied.

        Parameters
        ----------
        name : {"gat", "tu", "scenes"}
            The recipe.
        **overrides
            Field values that replace the preset's.

        Returns
        -------
        TrainConfig
            The recipe's configuration.
        """
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)!r}, got {name!r}")
        return cls(**{**PRESETS[name], **_known(overrides)})

    def replace(self, **overrides):
        """Return a copy with some fields changed.

        Parameters
        ----------
        **overrides
            Field values, validated like the constructor's; unknown names are a TypeError.

        Returns
        -------
        TrainConfig
            The changed copy.
        """
        return dataclasses.replace(self, **_known(overrides))

    def to_dict(self):
        """Return every field as a plain JSON-able value.

        Returns
        -------
        dict
            ``{field: value}`` in declaration order; :meth:`from_dict` rebuilds the config.
        """
        return dataclasses.asdict(self)

    def recipe(self):
        """Return the fields that make up a training recipe (no seed, paths or output settings).

        Returns
        -------
        dict
            ``{field: value}`` for the fields whose :class:`Option` has ``recipe=True``.
        """
        options = self.options()
        return {k: v for k, v in self.to_dict().items() if options[k][1].recipe}

    @classmethod
    def from_dict(cls, values):
        """Rebuild a config from :meth:`to_dict` output.

        Parameters
        ----------
        values : dict
            Field values; missing fields take their defaults, unknown keys are a TypeError.

        Returns
        -------
        TrainConfig
            The validated config.
        """
        if not isinstance(values, dict):
            raise TypeError(f"values must be a dict, got {type(values).__name__}")
        return cls(**_known(values))

    def to_json(self):
        """Return :meth:`to_dict` as a JSON string.

        Returns
        -------
        str
            JSON with sorted keys; :meth:`from_json` rebuilds the config.
        """
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text):
        """Rebuild a config from :meth:`to_json` output.

        Parameters
        ----------
        text : str
            A JSON object of field values.

        Returns
        -------
        TrainConfig
            The validated config.
        """
        return cls.from_dict(json.loads(text))

    @property
    def numpy_dtype(self):
        """``dtype`` as a NumPy dtype."""
        return np.dtype(self.dtype)


def _known(values):
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise TypeError(f"unknown training option(s) {unknown}; the options are {sorted(names)}")
    return dict(values)
