"""Pickle-free model checkpoints.

A checkpoint is a ``.npz`` file (``numpy.savez``) with these entries:

* ``format``: the string ``"gatfast-checkpoint"``;
* ``version``: integer format version (currently 1);
* ``config``: a JSON string ``{"model": <GATv2Network.get_config()>, "meta": {...}}``
  where ``meta`` holds what is needed to use the model again (task,
  number of classes, metrics...) and ``meta["preprocessing"]``, when known,
  how the features were derived from the raw data
  (``{"normalize_features": bool}``; ``gatfast evaluate`` applies it);
* ``param/<name>``: one array per model parameter (``layers.0.W_l``, ...).

It loads with ``numpy.load(path, allow_pickle=False)``. Files are written to
a temporary file in the target directory and renamed over the destination,
so a crash never leaves a half-written checkpoint or damages an old one.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .._io import atomic_write
from .._npz import NpzError, NpzReader

FORMAT = "gatfast-checkpoint"
VERSION = 1

__all__ = ["PREPROCESSING", "check_preprocessing", "load_checkpoint", "recorded_preprocessing", "save_checkpoint"]


#: The preprocessing steps a checkpoint can record, with their type.
PREPROCESSING = {"normalize_features": bool}


def check_preprocessing(preprocessing, name="preprocessing"):
    """``preprocessing`` as a plain dict of known steps, or TypeError/ValueError naming the problem."""
    if not isinstance(preprocessing, dict):
        raise TypeError(f"{name} must be a dict such as {{'normalize_features': True}}, "
                        f"got {type(preprocessing).__name__}")
    unknown = sorted(set(preprocessing) - set(PREPROCESSING))
    if unknown:
        raise ValueError(f"{name} has unknown step(s) {unknown}; known: {sorted(PREPROCESSING)}")
    for key, kind in PREPROCESSING.items():
        if key in preprocessing and not isinstance(preprocessing[key], kind):
            raise TypeError(f"{name}[{key!r}] must be a {kind.__name__}, "
                            f"got {type(preprocessing[key]).__name__}")
    return {k: kind(preprocessing[k]) for k, kind in PREPROCESSING.items() if k in preprocessing}


def save_checkpoint(path, model, meta=None, *, preprocessing=None):
    """Save ``model`` (a GATv2Network) and ``meta`` (a JSON-able dict) to ``path``.

    Parameters
    ----------
    path : str or path-like
        Written atomically; its directory must exist.
    model : GATv2Network
        The model; its configuration and parameters are saved.
    meta : dict, optional
        JSON-able information stored with the model (``"dataset"``,
        ``"task"``, ``"metrics"``, ``"splits"``... as :func:`gatfast.train` writes).
    preprocessing : dict, optional
        How the features the model was trained on were derived from the raw
        data, e.g. ``{"normalize_features": False}`` (a dataset's
        ``preprocessing`` attribute). Stored as ``meta["preprocessing"]``;
        ``gatfast evaluate`` applies it, and asks for a flag when a
        checkpoint records none.

    Raises
    ------
    ValueError
        If a parameter holds NaN or inf: a diverged model is never saved.
    """
    meta = dict(meta or {})
    if preprocessing is not None:
        if "preprocessing" in meta:
            raise ValueError("pass preprocessing either as an argument or in meta, not both")
        meta["preprocessing"] = preprocessing
    if "preprocessing" in meta:
        meta["preprocessing"] = check_preprocessing(meta["preprocessing"])
    params = model.parameters()
    for name, arr in params.items():
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"refusing to save a checkpoint: parameter {name!r} contains NaN or inf")
    config = {"model": model.get_config(), "meta": meta}
    arrays = {f"param/{k}": np.asarray(v) for k, v in params.items()}
    arrays["format"] = np.array(FORMAT)
    arrays["version"] = np.array(VERSION)
    arrays["config"] = np.array(json.dumps(config, sort_keys=True))
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


def load_checkpoint(path):
    """Load a checkpoint written by :func:`save_checkpoint`.

    The file is read pickle-free and within the size limits of
    ``gatfast._npz.NpzReader``; the parameter shapes that the stored
    configuration implies are compared with the shapes in the arrays'
    ``.npy`` headers before any parameter is read or the model is built, so
    a small file cannot make gatfast allocate a huge network.

    Parameters
    ----------
    path : str or path-like
        The ``.npz`` file.

    Returns
    -------
    model : GATv2Network
        The model, rebuilt from the stored configuration and parameters.
    meta : dict
        What :func:`save_checkpoint` stored as ``meta`` (``{}`` if nothing).

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Anything wrong with the file; the message names it.
    """
    from ..models.network import GATv2Network
    from ..models.shapes import network_parameter_shapes

    path = os.fspath(path)
    with NpzReader(path, what="checkpoint file") as reader:
        fmt, version, config = _read_entries(reader, path)
        model_config, meta = config["model"], config.get("meta", {})
        try:
            expected = network_parameter_shapes(model_config)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: checkpoint model configuration is incompatible: {exc}") from None
        stored = {k[len("param/") :]: k for k in reader.keys if k.startswith("param/")}
        if set(stored) != set(expected):
            missing = sorted(set(expected) - set(stored))
            extra = sorted(set(stored) - set(expected))
            raise ValueError(
                f"{path}: checkpoint parameters do not match its configuration "
                f"(missing {missing}, unexpected {extra})"
            )
        params = {}
        for name, shape in expected.items():
            try:
                have, dtype = reader.header(stored[name])
                if have != shape:
                    raise ValueError(
                        f"{path}: checkpoint parameters do not match its configuration: {name} has shape "
                        f"{have}, the configuration needs {shape}"
                    )
                if dtype.kind != "f":
                    raise ValueError(f"{path}: checkpoint parameter {name!r} is not a finite floating-point array")
                params[name] = reader.read(stored[name])
            except NpzError as exc:
                raise ValueError(f"{path}: the checkpoint entries cannot be read: {exc.reason}") from None
    for name, arr in params.items():
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{path}: checkpoint parameter {name!r} is not a finite floating-point array")
    try:
        model = GATv2Network(**model_config)
        model.load_parameters(params)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: checkpoint model configuration is incompatible: {exc}") from exc
    return model, meta


#: Most bytes the small entries (format, version, config) may hold.
MAX_CONFIG_BYTES = 64 * 2**20


def _read_entries(reader, path):
    """The ``format``, ``version`` and ``config`` entries, checked."""
    values = {}
    for key in ("format", "version", "config"):
        if key not in reader.keys:
            values[key] = None
            continue
        try:
            shape, dtype = reader.header(key)
            if dtype.itemsize * int(np.prod(shape)) > MAX_CONFIG_BYTES:
                raise ValueError(f"entry {key!r} is larger than {MAX_CONFIG_BYTES} bytes")
            arr = reader.read(key)
            if key == "format":
                values[key] = str(arr)
            elif key == "version":
                values[key] = int(arr)
            else:
                values[key] = json.loads(str(arr))
        except NpzError as exc:
            raise ValueError(f"{path}: the checkpoint entries cannot be read: {exc.reason}") from None
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:  # bad JSON, non-integer version
            raise ValueError(f"{path}: the checkpoint entries cannot be read ({_short(exc)})") from None
    fmt, version, config = values["format"], values["version"], values["config"]
    if fmt != FORMAT:
        raise ValueError(f"{path} is not a gatfast checkpoint: missing or wrong 'format' entry")
    if version != VERSION:
        raise ValueError(f"{path}: checkpoint version {version} is not supported (expected {VERSION})")
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("model"), dict)
        or not isinstance(config.get("meta", {}), dict)
    ):
        raise ValueError(
            f"{path}: checkpoint 'config' entry is malformed: expected a JSON object "
            "{'model': {...}, 'meta': {...}}"
        )
    return fmt, version, config


def _short(exc):
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:200] + "..."


def recorded_preprocessing(meta):
    """The preprocessing a checkpoint's ``meta`` records, or None when it records none.

    Reads ``meta["preprocessing"]``, or the ``meta["normalize_features"]``
    entry that gatfast 0.2.0's ``gatfast train`` wrote.
    """
    if "preprocessing" in meta:
        try:
            return check_preprocessing(meta["preprocessing"], "the checkpoint's preprocessing")
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    if isinstance(meta.get("normalize_features"), bool):
        return {"normalize_features": meta["normalize_features"]}
    return None
