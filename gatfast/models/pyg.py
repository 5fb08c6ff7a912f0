"""A network to and from a plain PyTorch Geometric model made of ``GATv2Conv`` layers.

The PyG side is a ``torch.nn.ModuleList`` of ``GATv2Conv`` (or a module with
such a list as its ``convs`` attribute and, for graph-level models, a
``torch.nn.Linear`` as its ``head``), run as :class:`GATv2Network` runs its
layers (``F`` is ``torch.nn.functional``; ``act`` the network's activation;
``pool`` PyG's ``global_mean_pool``, ``global_add_pool`` or
``global_max_pool`` for ``readout`` ``"mean"``, ``"sum"`` or ``"max"``)::

    def forward(x, edge_index, edge_attr=None, batch=None):
        for l, conv in enumerate(convs):
            x = conv(F.dropout(x, dropout, training), edge_index, edge_attr)
            if readout is not None or l < len(convs) - 1:
                x = act(x)
        if readout is not None:
            x = head(F.dropout(pool(x, batch), dropout, training))
        return x

The state dict of ``torch.nn.ModuleDict({"convs": convs, "head": head})``
(what :func:`network_to_pyg` returns) has the keys of
:func:`network_to_pyg_state_dict`: ``convs.0.att``, ``convs.0.lin_l.weight``,
..., ``head.weight``, ``head.bias``. torch and torch_geometric are imported
only inside these functions.
"""

from __future__ import annotations

import numpy as np

from .. import _validate as V
from ..layers.pyg import checked_pyg_params, layer_to_pyg, layer_to_pyg_state_dict, pyg_layer_config
from ..layers.torch_io import require_torch, tensor_or_array, to_numpy
from .activations import ACTIVATIONS

__all__ = ["load_network_pyg_state_dict", "network_from_pyg", "network_to_pyg", "network_to_pyg_state_dict"]

# options every layer of a GATv2Network shares
_COMMON = ("negative_slope", "add_self_loops", "share_weights", "residual", "edge_dim", "fill_value", "dropout",
           "dtype")


def _convs_and_head(model, head, readout):
    convs = getattr(model, "convs", model)
    if head is None:
        head = getattr(model, "head", None)
    if readout is None and head is not None:
        raise ValueError("the model has a head (a classifier after a readout) but readout is None: pass "
                         "readout='mean', 'sum' or 'max'")
    try:
        convs = list(convs)
    except TypeError:
        raise TypeError(f"model must be a ModuleList (or sequence) of GATv2Conv, or a module with a `convs` "
                        f"list, got {type(model).__name__}") from None
    if not convs:
        raise ValueError("model must hold at least one GATv2Conv")
    return convs, head


def _width(config):
    return config["heads"] * config["out_features"] if config["concat"] else config["out_features"]


def network_from_pyg(cls, model, *, head=None, readout=None, activation="elu", dropout=0.0, dtype=None):
    """Build a :class:`GATv2Network` with the configuration and weights of a PyG model.

    Bound as the classmethod ``GATv2Network.from_pyg``. The model is not
    modified; the network holds copies of its weights. The activation, the
    feature dropout and the readout live in the PyG model's ``forward``,
    not in its modules, so they are arguments here (the forward pass
    they describe is in the docstring of :mod:`gatfast.models.pyg`).

    Parameters
    ----------
    model : torch.nn.ModuleList of GATv2Conv, or a module with ``convs``
        The layers, first to last. Hidden layers concatenate their heads
        (or have one head) and all have the same ``heads`` and
        ``out_channels``; without ``readout`` the last layer averages its
        heads (or has one). All share ``negative_slope``,
        ``add_self_loops``, ``share_weights``, ``residual``, ``edge_dim``,
        ``fill_value``, ``dropout`` (the attention dropout) and have biases.
    head : torch.nn.Linear, optional
        The classifier after the readout (default: ``model.head``);
        required iff ``readout`` is set.
    readout : {None, "mean", "sum", "max"}, default None
        The pooling of the PyG model's forward (None: node-level outputs).
    activation : {"elu", "relu", "identity"}, default "elu"
        The activation of the PyG model's forward, after every layer but a node-level output layer.
    dropout : float, default 0.0
        The feature dropout of the PyG model's forward.
    dtype : numpy.float32 or numpy.float64, optional
        Default: the dtype of the convs' parameters.

    Returns
    -------
    GATv2Network

    Raises
    ------
    ImportError
        torch or torch_geometric is not installed.
    TypeError
        ``model`` holds something else than ``GATv2Conv`` layers.
    ValueError
        A structure :class:`GATv2Network` cannot express (named in the
        message), or what :func:`~gatfast.layers.pyg.pyg_layer_config`
        refuses for one conv.

    Examples
    --------
    >>> convs = torch.nn.ModuleList([GATv2Conv(1433, 8, heads=8),
    ...                              GATv2Conv(64, 7, heads=1, concat=False)])   # doctest: +SKIP
    >>> net = GATv2Network.from_pyg(convs, activation="elu")                     # doctest: +SKIP
    """
    convs, head = _convs_and_head(model, head, readout)
    V.check_choice(activation, "activation", set(ACTIVATIONS))
    configs = []
    for l, conv in enumerate(convs):
        try:
            configs.append(pyg_layer_config(conv, dtype))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"layer {l}: {exc}") from None
    first = configs[0]
    for l, config in enumerate(configs):
        for key in _COMMON:
            if config[key] != first[key]:
                raise ValueError(f"layer {l} has {key}={config[key]!r} but layer 0 has {first[key]!r}: "
                                 "a GATv2Network's layers share it (convert the layers one by one instead)")
        if not config["bias"]:
            raise ValueError(f"layer {l} has bias=False; a GATv2Network's layers have biases")
        if l and config["in_features"] != _width(configs[l - 1]):
            raise ValueError(f"layer {l} takes {config['in_features']!r} features but layer {l - 1} gives "
                             f"{_width(configs[l - 1])}")
    hidden = configs if readout is not None else configs[:-1]
    for l, config in enumerate(hidden):
        if not config["concat"] and config["heads"] > 1:
            raise ValueError(f"hidden layer {l} averages its heads (concat=False); a GATv2Network's hidden "
                             "layers concatenate them")
        if (config["heads"], config["out_features"]) != (hidden[0]["heads"], hidden[0]["out_features"]):
            raise ValueError(f"hidden layer {l} has heads={config['heads']}, out_channels={config['out_features']} "
                             f"but layer 0 has {hidden[0]['heads']}, {hidden[0]['out_features']}: a "
                             "GATv2Network's hidden layers are all alike")
    if readout is None:
        last = configs[-1]
        if last["concat"] and last["heads"] > 1:
            raise ValueError("the last layer concatenates its heads; a node-level GATv2Network's output layer "
                             "averages them (concat=False), or pass readout= for a graph-level model")
        out_features, out_heads = last["out_features"], last["heads"]
    else:
        if head is None:
            raise ValueError(f"readout={readout!r} needs the classifier after the pooling: pass head= "
                             "(a torch.nn.Linear), or give the model a `head` attribute")
        weight = to_numpy(head.weight)
        if getattr(head, "bias", None) is None:
            raise ValueError("head has no bias; a GATv2Network's readout classifier has one")
        if weight.ndim != 2 or weight.shape[1] != _width(configs[-1]):
            raise ValueError(f"head must map the {_width(configs[-1])} pooled features, got weight shape "
                             f"{weight.shape}")
        out_features, out_heads = weight.shape[0], 1
    spec = hidden[0] if hidden else configs[-1]
    net = cls(
        first["in_features"], spec["out_features"], out_features, num_layers=len(convs),
        heads=spec["heads"] if hidden else 1, out_heads=out_heads, activation=activation, dropout=dropout,
        attention_dropout=first["dropout"], residual=first["residual"], negative_slope=first["negative_slope"],
        add_self_loops=first["add_self_loops"], share_weights=first["share_weights"], readout=readout,
        dtype=first["dtype"], seed=0, edge_dim=first["edge_dim"], fill_value=first["fill_value"],
    )
    state = {f"convs.{l}.{k}": v for l, conv in enumerate(convs) for k, v in conv.state_dict().items()}
    if readout is not None:
        state.update({f"head.{k}": v for k, v in head.state_dict().items()})
    return load_network_pyg_state_dict(net, state)


def network_to_pyg_state_dict(net):
    """The network's weights under the keys of ``ModuleDict({"convs": ..., "head": ...})``.

    Bound as ``GATv2Network.to_pyg_state_dict()``.

    Parameters
    ----------
    net : GATv2Network
        The network (``self`` when called as a method).

    Returns
    -------
    dict
        ``convs.{l}.{key}`` for every layer (the keys of
        ``GATv2Layer.to_pyg_state_dict``), and ``head.weight``,
        ``head.bias`` with a readout: torch tensors, or NumPy arrays when
        torch is not installed.

    Raises
    ------
    ValueError
        A layer uses a GAT+ option, which PyG's GATv2Conv lacks.
    """
    out = {}
    for l, layer in enumerate(net.layers):
        out.update({f"convs.{l}.{k}": v for k, v in layer_to_pyg_state_dict(layer).items()})
    if net.head is not None:
        out.update({f"head.{k}": tensor_or_array(v) for k, v in net.head.params.items()})
    return out


def load_network_pyg_state_dict(net, state_dict):
    """Copy a state dict with the keys of :func:`network_to_pyg_state_dict` into ``net``.

    Bound as ``GATv2Network.load_pyg_state_dict(state_dict)``. Everything is
    checked before anything is copied.

    Parameters
    ----------
    net : GATv2Network
        The network (``self`` when called as a method).
    state_dict : mapping
        ``convs.{l}.*`` for every layer and ``head.*`` with a readout;
        torch tensors or arrays.

    Returns
    -------
    GATv2Network
        ``net``.

    Raises
    ------
    KeyError
        A key is missing or unexpected.
    ValueError
        A shape does not match.
    """
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict must be a mapping of keys to tensors, got {type(state_dict).__name__}")
    per_layer = [{} for _ in net.layers]
    head = {}
    for key, value in state_dict.items():
        parts = key.split(".", 2)
        if parts[0] == "convs" and len(parts) == 3 and parts[1].isdigit() and int(parts[1]) < len(net.layers):
            per_layer[int(parts[1])][parts[2]] = value
        elif parts[0] == "head" and len(parts) == 2 and net.head is not None:
            head[parts[1]] = value
        else:
            raise KeyError(f"state_dict has unexpected key {key!r} for a {len(net.layers)}-layer network"
                           + (" with a head" if net.head is not None else " without a head"))
    staged = []  # every layer is checked before anything is copied
    for l, (layer, sd) in enumerate(zip(net.layers, per_layer)):
        if not sd:
            raise KeyError(f"state_dict has no 'convs.{l}.*' keys")
        try:
            staged.append(checked_pyg_params(layer, sd))
        except KeyError as exc:
            raise KeyError(f"layer {l}: {exc.args[0]}") from None
        except ValueError as exc:
            raise ValueError(f"layer {l}: {exc}") from None
    head_params = {}
    if net.head is not None:
        for name, shape in net.head.params.shapes.items():
            if name not in head:
                raise KeyError(f"state_dict is missing 'head.{name}'")
            head_params[name] = V.check_dense(to_numpy(head[name]), f"state_dict['head.{name}']", shape, net.dtype)
        extra = sorted(set(head) - set(head_params))
        if extra:
            raise KeyError(f"state_dict has unexpected key 'head.{extra[0]}'")
    for layer, params in zip(net.layers, staged):
        for name, value in params.items():
            layer.params[name] = value
    for name, value in head_params.items():
        net.head.params[name] = value
    return net


def network_to_pyg(net):
    """A plain PyG model with the network's configuration and weights (bound as ``GATv2Network.to_pyg()``).

    Parameters
    ----------
    net : GATv2Network
        The network (``self`` when called as a method).

    Returns
    -------
    torch.nn.ModuleDict
        ``"convs"``: a ``torch.nn.ModuleList`` of ``GATv2Conv``, and with a
        readout ``"head"``: a ``torch.nn.Linear``; in the network's dtype,
        in training mode as every new module. Run it with the forward pass
        of :mod:`gatfast.models.pyg` (the activation, the feature dropout and
        the readout are ``net.activation``, ``net.dropout``, ``net.readout``).

    Raises
    ------
    ImportError
        torch or torch_geometric is not installed.
    ValueError
        A layer uses a GAT+ option, which PyG's GATv2Conv lacks.
    """
    torch = require_torch("GATv2Network.to_pyg", geometric=True)
    modules = {"convs": torch.nn.ModuleList([layer_to_pyg(layer) for layer in net.layers])}
    if net.head is not None:
        linear = torch.nn.Linear(net.head.in_features, net.head.out_features)
        linear = linear.to(torch.float64 if net.dtype == np.float64 else torch.float32)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(net.head.params["weight"]))
            linear.bias.copy_(torch.from_numpy(net.head.params["bias"]))
        modules["head"] = linear
    return torch.nn.ModuleDict(modules)
