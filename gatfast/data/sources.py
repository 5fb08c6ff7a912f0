"""Where a dataset named on the command line comes from, and the options of a generated one."""

from __future__ import annotations

import os

from . import GENERATED, GENERATORS, generator_options

__all__ = ["check_dataset_options", "dataset_source"]


def check_dataset_options(dataset, dataset_options):
    """``dataset_options`` as a dict, refused unless ``dataset`` names a generator."""
    if not dataset_options:
        return {}
    if not isinstance(dataset_options, dict) or not all(isinstance(k, str) for k in dataset_options):
        raise TypeError(f"dataset_options must be a dict of keyword arguments, got {dataset_options!r}")
    if os.fspath(dataset) not in GENERATORS:
        raise ValueError(
            f"dataset_options are for the generated datasets {sorted(GENERATORS)}, not {dataset!r}"
        )
    known = generator_options(os.fspath(dataset))
    unknown = set(dataset_options) - set(known)
    if unknown:
        raise ValueError(
            f"unknown option(s) {sorted(unknown)} for the {dataset!r} generator; it takes {list(known)}"
        )
    return dict(dataset_options)


def dataset_source(dataset):
    """How ``load_dataset`` finds ``dataset`` again: a name it knows, or an absolute path."""
    text = os.fspath(dataset)
    if text in GENERATED or not os.path.isfile(text):
        return text  # a name: load_dataset looks it up again
    return os.path.abspath(text)
