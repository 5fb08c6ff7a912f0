"""The named training recipes: the options in which each differs from :class:`~gatfast.training.TrainConfig`'s defaults."""

from __future__ import annotations

__all__ = ["PRESETS", "preset_for"]


#: Recipes that differ from the defaults (the GAT recipe). ``"tu"``: graph
#: classification of small molecules (MUTAG underfit at lr 0.005 / patience
#: 50; sum pooling counts atoms, which mean cannot: 10-fold accuracy
#: 0.72 -> 0.78). ``"scenes"``: per-node regression on many small graphs.
PRESETS = {
    "gat": {},
    "tu": {
        "layers": 3,
        "hidden": 16,
        "heads": 4,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "lr": 0.01,
        "weight_decay": 1e-4,
        "readout": "sum",
    },
    "scenes": {
        "layers": 3,
        "hidden": 16,
        "heads": 4,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "lr": 0.01,
        "weight_decay": 1e-4,
    },
}


def preset_for(dataset):
    """The name of the preset that suits ``dataset``'s task.

    Parameters
    ----------
    dataset : NodeDataset or GraphDataset
        The dataset to train on.

    Returns
    -------
    str
        ``"gat"`` for node datasets, ``"tu"`` for graph classification,
        ``"scenes"`` for per-node regression on many graphs.
    """
    from ..data import GraphDataset

    if not isinstance(dataset, GraphDataset):
        return "gat"
    return "tu" if dataset.task == "graph_classification" else "scenes"
