"""Datasets: the embedded karate club, Planetoid and TU ``.npz`` loaders, and
seeded synthetic generators.

Every graph is a :class:`~gatfast.CSRGraph` **by target** (row ``i`` lists
the sources ``j`` of the edges ``j -> i``); undirected data stores both
directions. The ``.npz`` formats are described in ``docs/DATA.md``; files
are always read with ``np.load(path, allow_pickle=False)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .datasets import Batch, GraphDataset, NodeDataset, normalized, row_normalize, without_edge_features
from .karate import load_karate
from .npz import NpzFile, write_planetoid_npz
from .planetoid import PLANETOID_KEYS, PLANETOID_X_KEYS, load_planetoid
from .synthetic import make_csbm, make_traffic_scenes, traffic_target
from .tu import TU_KEYS, load_tu

__all__ = [
    "Batch",
    "DATA_DIR",
    "GENERATED",
    "GENERATORS",
    "GraphDataset",
    "NodeDataset",
    "dataset_file",
    "generator_options",
    "load_dataset",
    "load_karate",
    "load_planetoid",
    "load_tu",
    "make_csbm",
    "make_traffic_scenes",
    "row_normalize",
    "traffic_target",
    "without_edge_features",
    "write_planetoid_npz",
]

#: The datasets that ship with the package (``cora.npz``, ``mutag.npz``, ``karate.npz``).
DATA_DIR = Path(__file__).resolve().parent / "files"

#: Names :func:`load_dataset` builds without a file.
GENERATED = ("karate", "csbm", "traffic_scenes")

#: The generators :func:`load_dataset` runs by name, whose keyword arguments it passes on.
GENERATORS = {"csbm": make_csbm, "traffic_scenes": make_traffic_scenes}


def generator_options(name):
    """The keyword arguments the generator ``name`` takes from ``load_dataset(name, **options)``.

    Parameters
    ----------
    name : str
        A key of :data:`GENERATORS`.

    Returns
    -------
    tuple of str
        Its parameters, except ``dtype`` (``load_dataset``'s own).
    """
    import inspect

    return tuple(p for p in inspect.signature(GENERATORS[name]).parameters if p != "dtype")


def load_dataset(path_or_name, dtype=np.float32, normalize_features=False, **kwargs):
    """Load a dataset by name or path.

    Parameters
    ----------
    path_or_name : str or path-like
        ``"karate"``: the embedded karate club. ``"csbm"`` or
        ``"traffic_scenes"``: the generator with its defaults and
        ``seed=0`` (override through ``kwargs``). Another bare name
        (``"cora"``, ``"mutag"``) is looked up as ``DATA_DIR/<name>.npz``.
        A ``.npz`` file is read as Planetoid when it has ``y`` and the masks,
        as TU when it has ``graph_indicator``.
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the features.
    normalize_features : bool, default False
        Row-normalise the features as PyG's ``NormalizeFeatures``.
    **kwargs
        Passed to the loader or generator.

    Returns
    -------
    NodeDataset or GraphDataset
        The dataset, CSR by target.
    """
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"path_or_name must be a str or path, got {type(path_or_name).__name__}")
    text = os.fspath(path_or_name)
    if text == "karate":
        return load_karate(dtype=dtype, normalize_features=normalize_features, **kwargs)
    if text in GENERATORS:
        ds = GENERATORS[text](dtype=dtype, **{"seed": 0, **kwargs})
        return normalized(ds) if normalize_features else ds
    path = dataset_file(text)
    z = NpzFile(path)  # read once, handed to the loader
    keys = set(z.arrays)
    opts = dict(dtype=dtype, normalize_features=normalize_features, **kwargs)
    if set(PLANETOID_KEYS) <= keys:
        return load_planetoid(z, **opts)
    if "graph_indicator" in keys:
        return load_tu(z, **opts)
    raise ValueError(
        f"{path}: unknown dataset format; expected Planetoid keys {list(PLANETOID_KEYS)} "
        f"(+ {list(PLANETOID_X_KEYS)}) or TU keys {list(TU_KEYS)}, found {sorted(keys)}"
    )


def dataset_file(path_or_name):
    """Return the file :func:`load_dataset` reads for ``path_or_name``.

    Parameters
    ----------
    path_or_name : str or path-like
        As for :func:`load_dataset`. A bare name that is neither generated
        nor an existing path is looked up as ``DATA_DIR/<name>.npz``;
        ValueError if that does not exist either.

    Returns
    -------
    pathlib.Path or None
        The file, or None for a generated dataset.
    """
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"path_or_name must be a str or path, got {type(path_or_name).__name__}")
    text = os.fspath(path_or_name)
    if text in GENERATED:
        return None
    path = Path(text)
    if path.suffix != ".npz" and not path.is_file():  # a shipped name (a directory "cora" does not hide it)
        candidate = DATA_DIR / f"{text}.npz"
        if path.name == text and candidate.is_file():  # bare names only
            return candidate
        if not path.exists():
            raise ValueError(
                "path_or_name must be 'karate', 'csbm', 'traffic_scenes', a dataset name in "
                f"{DATA_DIR} or a .npz path, got {text!r}"
            )
    return path
