"""One layer to and from PyTorch Geometric's ``GATv2Conv``: configuration and weights.

gatfast's parameters carry PyG's meaning under short names; a state dict
uses PyG's keys:

=================  ==================  =================================
gatfast            PyG state dict      shape
=================  ==================  =================================
``W_l``, ``b_l``   ``lin_l.weight``,   (H*C, F_src), (H*C,)
                   ``lin_l.bias``
``W_r``, ``b_r``   ``lin_r.weight``,   (H*C, F_dst), (H*C,); with
                   ``lin_r.bias``      ``share_weights`` the ``lin_l`` values
``att``            ``att``             (H, C) here, (1, H, C) in PyG
``W_e``            ``lin_edge.weight`` (H*C, D)
``W_res``          ``res.weight``      (out_dim, F_dst)
``bias``           ``bias``            (out_dim,)
=================  ==================  =================================

torch and torch_geometric are imported only inside these functions (they
are test and cross-check dependencies, ``pip install gatfast[crosscheck]``).
"""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from .torch_io import require_torch, tensor_or_array, to_numpy

__all__ = [
    "PYG_KEYS",
    "checked_pyg_params",
    "layer_from_pyg",
    "layer_to_pyg",
    "layer_to_pyg_state_dict",
    "load_pyg_state_dict",
    "pyg_layer_config",
]

#: PyG's state-dict key of every gatfast parameter name, in PyG's order.
PYG_KEYS = {
    "att": "att",
    "bias": "bias",
    "W_l": "lin_l.weight",
    "b_l": "lin_l.bias",
    "W_r": "lin_r.weight",
    "b_r": "lin_r.bias",
    "W_e": "lin_edge.weight",
    "W_res": "res.weight",
}
_SHARED = {"W_r": "W_l", "b_r": "b_l"}  # with share_weights, lin_r is lin_l


def _conv_class():
    require_torch("converting a GATv2Conv", geometric=True)
    from torch_geometric.nn import GATv2Conv

    return GATv2Conv


def _numpy_dtype(tensor):
    name = str(tensor.dtype).replace("torch.", "")
    return np.dtype(name) if name in ("float32", "float64") else None


def pyg_layer_config(conv, dtype=None):
    """The :class:`GATv2Layer` keyword arguments that reproduce ``conv`` (no weights).

    Parameters
    ----------
    conv : torch_geometric.nn.GATv2Conv
    dtype : numpy.float32 or numpy.float64, optional
        Default: the dtype of ``conv``'s parameters (float32 or float64).

    Returns
    -------
    dict
        ``in_features``, ``out_features``, ``heads``, ``concat``,
        ``negative_slope``, ``add_self_loops``, ``bias``, ``share_weights``,
        ``dropout``, ``residual``, ``edge_dim``, ``fill_value`` and ``dtype``.

    Raises
    ------
    TypeError
        ``conv`` is not a ``GATv2Conv``.
    ValueError
        What gatfast cannot express: uninitialised (lazy, ``in_channels=-1``)
        weights, an aggregation other than ``"add"``, ``flow=
        "target_to_source"``, biases on only some of the linear maps, or
        parameters in half precision without ``dtype``.
    """
    GATv2Conv = _conv_class()
    if not isinstance(conv, GATv2Conv):
        raise TypeError(f"conv must be a torch_geometric.nn.GATv2Conv, got {type(conv).__name__}")
    from torch.nn.parameter import UninitializedParameter

    if any(isinstance(p, UninitializedParameter) for p in conv.parameters()):
        raise ValueError("conv has uninitialised (lazy, in_channels=-1) weights: run it once on data, "
                         "or build it with the feature sizes")
    if conv.aggr not in ("add", "sum"):
        raise ValueError(f"conv aggregates with {conv.aggr!r}; gatfast's layer sums the messages (aggr='add')")
    if conv.flow != "source_to_target":
        raise ValueError(f"conv has flow={conv.flow!r}; gatfast reads edge_index as [sources; targets] "
                         "(flow='source_to_target'): flip edge_index instead")
    has_bias = conv.bias is not None
    if (conv.lin_l.bias is not None) != has_bias or (conv.lin_r.bias is not None) != has_bias:
        raise ValueError("conv has biases on only some of lin_l, lin_r and the output; gatfast has all or none")
    if dtype is None:
        dtype = _numpy_dtype(conv.att)
        if dtype is None:
            raise ValueError(f"conv's parameters are {conv.att.dtype}; gatfast computes in float32 or float64: "
                             "pass dtype=numpy.float32 (or convert the conv with .float())")
    bipartite = isinstance(conv.in_channels, (tuple, list))
    f_src = int(conv.lin_l.weight.shape[1])
    f_dst = int(conv.lin_r.weight.shape[1])
    fill = conv.fill_value
    if hasattr(fill, "detach"):
        fill = to_numpy(fill).astype(np.float64)
        fill = float(fill) if fill.ndim == 0 else tuple(float(v) for v in fill.ravel())
    return {
        "in_features": (f_src, f_dst) if bipartite else f_src,
        "out_features": int(conv.out_channels),
        "heads": int(conv.heads),
        "concat": bool(conv.concat),
        "negative_slope": float(conv.negative_slope),
        "add_self_loops": bool(conv.add_self_loops),
        "bias": has_bias,
        "share_weights": bool(conv.share_weights),
        "dropout": float(conv.dropout),
        "residual": conv.res is not None,
        "edge_dim": None if conv.lin_edge is None else int(conv.lin_edge.weight.shape[1]),
        "fill_value": fill,
        "dtype": V.check_dtype(dtype),
    }


def layer_from_pyg(cls, conv, *, dtype=None):
    """Build a layer with the configuration and the weights of a PyG ``GATv2Conv``.

    Bound as the classmethod ``GATv2Layer.from_pyg(conv, dtype=None)``. The
    conv is not modified; the layer holds copies of its weights.

    Parameters
    ----------
    conv : torch_geometric.nn.GATv2Conv
        Any configuration PyG offers: ``in_channels`` an int or a pair,
        ``heads``, ``concat``, ``negative_slope``, ``dropout``,
        ``add_self_loops``, ``edge_dim``, ``fill_value`` (a mode name, a
        number or a tensor), ``bias``, ``share_weights``, ``residual``.
    dtype : numpy.float32 or numpy.float64, optional
        Default: the dtype of the conv's parameters.

    Returns
    -------
    GATv2Layer
        ``layer.forward(CSRGraph.from_edge_index(edge_index, n), x)`` equals
        ``conv(x, edge_index)`` (in ``eval()`` mode, or without dropout).

    Raises
    ------
    ImportError
        torch or torch_geometric is not installed.
    TypeError, ValueError
        See :func:`pyg_layer_config`.

    Examples
    --------
    >>> conv = torch_geometric.nn.GATv2Conv(16, 8, heads=4, edge_dim=3)   # doctest: +SKIP
    >>> layer = GATv2Layer.from_pyg(conv)                                   # doctest: +SKIP
    >>> conv.load_state_dict(layer.to_pyg_state_dict())                     # doctest: +SKIP
    """
    config = pyg_layer_config(conv, dtype)
    layer = cls(**config, seed=0)
    load_pyg_state_dict(layer, conv.state_dict())
    return layer


def _expected_keys(layer):
    """``{PyG key: gatfast name}`` for ``layer``'s parameters, in PyG's order."""
    names = set(layer.params)
    if layer.share_weights:
        names |= {"W_r", "b_r"} if layer.bias else {"W_r"}
    return {key: _SHARED.get(name, name) if layer.share_weights else name
            for name, key in PYG_KEYS.items() if name in names}


def _check_expressible(layer):
    if layer.root_weight is not None or layer.attention_activation != "leaky_relu":
        raise ValueError(f"PyG's GATv2Conv has no GAT+ variant: this layer has root_weight={layer.root_weight!r}, "
                         f"attention_activation={layer.attention_activation!r}")


def layer_to_pyg_state_dict(layer):
    """The layer's weights under PyG's ``GATv2Conv`` state-dict keys.

    Bound as ``GATv2Layer.to_pyg_state_dict()``; ``conv.load_state_dict(
    layer.to_pyg_state_dict())`` works for a conv of the same configuration
    (see :meth:`GATv2Layer.to_pyg`).

    Parameters
    ----------
    layer : GATv2Layer
        The layer (``self`` when called as a method).

    Returns
    -------
    dict
        ``att`` (1, H, C), ``bias``, ``lin_l.weight``, ``lin_l.bias``,
        ``lin_r.weight``, ``lin_r.bias`` (copies of ``lin_l``'s with
        ``share_weights``), ``lin_edge.weight``, ``res.weight``, as present:
        torch tensors (copies, the layer's dtype), or NumPy arrays when
        torch is not installed.

    Raises
    ------
    ValueError
        The layer uses a GAT+ option (``root_weight``, softplus attention).
    """
    _check_expressible(layer)
    out = {}
    for key, name in _expected_keys(layer).items():
        value = layer.params[name]
        out[key] = tensor_or_array(value.reshape(1, *value.shape) if name == "att" else value)
    return out


def checked_pyg_params(layer, state_dict):
    """The arrays :func:`load_pyg_state_dict` would copy into ``layer``, checked, by gatfast name.

    Parameters
    ----------
    layer : GATv2Layer
        The layer (``self`` when called as a method).
    state_dict : mapping
        See :func:`load_pyg_state_dict`.

    Returns
    -------
    dict
        ``{name: ndarray}`` in the layer's dtype, one entry per parameter.

    Raises
    ------
    TypeError, KeyError, ValueError
        See :func:`load_pyg_state_dict`.
    """
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict must be a mapping of PyG keys to tensors, got {type(state_dict).__name__}")
    expected = _expected_keys(layer)
    optional = {PYG_KEYS[n] for n in _SHARED} if layer.share_weights else set()
    missing = [k for k in expected if k not in state_dict and k not in optional]
    if missing:
        raise KeyError(f"state_dict is missing {missing[0]!r} (this layer needs {sorted(expected)})")
    extra = [k for k in state_dict if k not in expected]
    if extra:
        raise KeyError(f"state_dict has unexpected key {extra[0]!r} for this layer (it has {sorted(expected)})")
    values = {}
    for key, name in expected.items():
        if key not in state_dict:
            continue
        shape = layer.params.shapes[name]
        value = to_numpy(state_dict[key])
        if name == "att" and value.shape == (1, *shape):
            value = value.reshape(shape)
        value = V.check_dense(value, f"state_dict[{key!r}]", shape, layer.dtype)
        if key in optional:
            if not np.array_equal(value, values[name]):
                raise ValueError(f"state_dict[{key!r}] must equal the lin_l values: the layer shares its weights")
            continue
        values[name] = value
    return values


def load_pyg_state_dict(layer, state_dict):
    """Copy the weights of a PyG ``GATv2Conv`` state dict into ``layer`` (same configuration).

    Bound as ``GATv2Layer.load_pyg_state_dict(state_dict)``. Everything is
    checked before anything is copied.

    Parameters
    ----------
    layer : GATv2Layer
        The layer (``self`` when called as a method).
    state_dict : mapping
        PyG's keys (:data:`PYG_KEYS`), torch tensors or arrays. With
        ``share_weights``, ``lin_r.*`` may be left out; if present it must
        equal ``lin_l.*``.

    Returns
    -------
    GATv2Layer
        ``layer``.

    Raises
    ------
    TypeError
        ``state_dict`` is not a mapping.
    KeyError
        A key is missing or unexpected for this layer's configuration.
    ValueError
        A shape does not match, or ``lin_r`` differs from ``lin_l`` with
        ``share_weights``.
    """
    for name, value in checked_pyg_params(layer, state_dict).items():
        layer.params[name] = value
    return layer


def layer_to_pyg(layer):
    """A PyG ``GATv2Conv`` with the layer's configuration and weights (bound as ``GATv2Layer.to_pyg()``).

    Parameters
    ----------
    layer : GATv2Layer
        The layer (``self`` when called as a method).

    Returns
    -------
    torch_geometric.nn.GATv2Conv
        In the layer's dtype, in training mode as every new module (call
        ``.eval()`` for inference when ``dropout > 0``).

    Raises
    ------
    ImportError
        torch or torch_geometric is not installed.
    ValueError
        The layer uses a GAT+ option (``root_weight``, softplus attention).
    """
    _check_expressible(layer)
    torch = require_torch("GATv2Layer.to_pyg", geometric=True)
    GATv2Conv = _conv_class()
    fill = layer.fill_value
    if isinstance(fill, tuple):
        fill = torch.tensor(fill, dtype=torch.float64 if layer.dtype == np.float64 else torch.float32)
    conv = GATv2Conv(
        layer.in_features, layer.out_features, heads=layer.heads, concat=layer.concat,
        negative_slope=layer.negative_slope, dropout=layer.dropout, add_self_loops=layer.add_self_loops,
        edge_dim=layer.edge_dim, fill_value=fill, bias=layer.bias, share_weights=layer.share_weights,
        residual=layer.residual,
    )
    conv = conv.to(torch.float64 if layer.dtype == np.float64 else torch.float32)
    conv.load_state_dict(layer_to_pyg_state_dict(layer))
    return conv
