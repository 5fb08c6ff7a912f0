"""A layer's constructor arguments as plain values (``GATv2Layer.get_config``)."""

__all__ = ["layer_config"]


def layer_config(self):
    """Return the constructor arguments, except ``seed``.

    Returns
    -------
    dict
        Plain JSON-able values: ``GATv2Layer(**config)`` builds a layer of the same configuration.
    """
    fill = list(self.fill_value) if isinstance(self.fill_value, tuple) else self.fill_value
    return {
        "in_features": list(self.in_features) if self.bipartite else self.in_features,
        "out_features": self.out_features,
        "heads": self.heads,
        "concat": self.concat,
        "negative_slope": self.negative_slope,
        "add_self_loops": self.add_self_loops,
        "bias": self.bias,
        "share_weights": self.share_weights,
        "dtype": self.dtype.name,
        "dropout": self.dropout,
        "residual": self.residual,
        "attention_activation": self.attention_activation,
        "root_weight": self.root_weight,
        "edge_dim": self.edge_dim,
        "fill_value": fill,
    }
