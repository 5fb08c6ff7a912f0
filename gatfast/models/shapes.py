"""The parameter shapes of a :class:`GATv2Network` configuration, computed without building it.

``load_checkpoint`` compares them with the shapes stored in a file's
``.npy`` headers before it allocates anything, so a small file whose
configuration asks for a huge network is refused at once.
"""

from __future__ import annotations

import inspect

from .. import _validate as V
from ..layers import ROOT_WEIGHTS
from ..layers.shapes import layer_parameter_shapes
from .network import READOUTS, GATv2Network

__all__ = ["layer_parameter_shapes", "network_parameter_shapes"]


def network_parameter_shapes(config):
    """``{name: shape}`` of ``GATv2Network(**config)``, the keys of its ``parameters()``.

    Parameters
    ----------
    config : dict
        Keyword arguments of :class:`GATv2Network` (its ``get_config()``).

    Raises
    ------
    TypeError, ValueError
        An unknown keyword, a size that is not a positive int, or a network
        above the limits of :func:`gatfast._validate.check_network_size`.
    """
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict of GATv2Network arguments, got {type(config).__name__}")
    signature = inspect.signature(GATv2Network.__init__)
    try:
        bound = signature.bind(None, **config)
    except TypeError as exc:
        raise TypeError(f"GATv2Network(): {exc}") from None
    bound.apply_defaults()
    a = bound.arguments
    V.check_network_size(a["in_features"], a["hidden_features"], a["out_features"], a["num_layers"],
                         a["heads"], a["out_heads"], a["readout"])
    if a["readout"] not in READOUTS:
        raise ValueError(f"readout must be None, 'mean', 'sum' or 'max', got {a['readout']!r}")
    if a["root_weight"] not in ROOT_WEIGHTS:
        raise ValueError(f"root_weight must be None, 'theta_r' or 'theta_n', got {a['root_weight']!r}")
    common = dict(share_weights=bool(a["share_weights"]), residual=bool(a["residual"]),
                  root_weight=a["root_weight"], edge_dim=a["edge_dim"])
    shapes, width = {}, a["in_features"]
    hidden_width = a["heads"] * a["hidden_features"]
    for l in range(a["num_layers"]):
        if l == a["num_layers"] - 1 and a["readout"] is None:
            layer = layer_parameter_shapes(width, a["out_features"], a["out_heads"], False, **common)
        else:
            layer = layer_parameter_shapes(width, a["hidden_features"], a["heads"], True, **common)
        shapes.update({f"layers.{l}.{k}": v for k, v in layer.items()})
        width = hidden_width
    if a["readout"] is not None:
        shapes["head.weight"] = (a["out_features"], hidden_width)
        shapes["head.bias"] = (a["out_features"],)
    return shapes
