"""A layer's constructor arguments as plain values (``GATv2Layer.get_config``)."""

__all__ = ["layer_config"]


def layer_config(layer):
    """Return the constructor arguments, except ``seed``.

    Returns
    -------
    dict
        Plain JSON-able values: ``GATv2Layer(**config)`` builds a layer of the same configuration.
    """
    fill = list(layer.fill_value) if isinstance(layer.fill_value, tuple) else layer.fill_value
    return {
        "in_features": list(layer.in_features) if layer.bipartite else layer.in_features,
        "out_features": layer.out_features,
        "heads": layer.heads,
        "concat": layer.concat,
        "negative_slope": layer.negative_slope,
        "add_self_loops": layer.add_self_loops,
        "bias": layer.bias,
        "share_weights": layer.share_weights,
        "dtype": layer.dtype.name,
        "dropout": layer.dropout,
        "residual": layer.residual,
        "attention_activation": layer.attention_activation,
        "root_weight": layer.root_weight,
        "edge_dim": layer.edge_dim,
        "fill_value": fill,
    }
