"""Train/validation/test splits of graph datasets, and k-fold cross-validation."""

from __future__ import annotations

import numpy as np

__all__ = ["check_splits", "default_graph_splits", "fold_splits"]


def default_graph_splits(ds, seed, val_frac=0.1, test_frac=0.1):
    """A seeded random 80/10/10 split of the graphs of ``ds`` (sorted ids per split)."""
    n = len(ds.graphs)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(test_frac * n))) if n >= 3 else 0
    n_val = max(1, int(round(val_frac * n))) if n >= 3 else 0
    return {
        "test": np.sort(perm[:n_test]),
        "val": np.sort(perm[n_test : n_test + n_val]),
        "train": np.sort(perm[n_test + n_val :]),
    }


def fold_splits(ds, folds, seed):
    """k-fold CV: each fold is the test set once; 10% of the rest is validation."""
    out = []
    for train_idx, test_idx in ds.folds(k=folds, seed=seed):
        perm = np.random.default_rng(seed).permutation(train_idx)
        n_val = max(1, len(perm) // 10)
        out.append({"train": np.sort(perm[n_val:]), "val": np.sort(perm[:n_val]), "test": np.sort(test_idx)})
    return out


def check_splits(ds, splits):
    """``splits`` as a dict of int64 arrays of valid graph ids, with a non-empty ``"train"``."""
    if not isinstance(splits, dict):
        raise TypeError(f"splits must be a dict of graph ids per split, got {type(splits).__name__}")
    unknown = set(splits) - {"train", "val", "test"}
    if unknown:
        raise ValueError(f"splits keys must be 'train', 'val' and 'test', got {sorted(unknown)}")
    out = {}
    for name, idx in splits.items():
        arr = np.asarray(idx)
        if arr.size == 0:
            out[name] = np.zeros(0, np.int64)
            continue
        if arr.ndim != 1 or arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"splits[{name!r}] must be a 1-D array of graph ids, got {arr.dtype} {arr.shape}"
            )
        if arr.min() < 0 or arr.max() >= len(ds.graphs):
            raise ValueError(
                f"splits[{name!r}] must hold graph ids in [0, {len(ds.graphs)}), "
                f"got min {arr.min()} max {arr.max()}"
            )
        out[name] = arr.astype(np.int64)
    if len(out.get("train", ())) == 0:
        raise ValueError("splits['train'] must contain at least one graph")
    return out
