"""A stack of GATv2 layers with activations, dropout and a readout; the pass itself is in ``stack.py``."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping

import numpy as np

from .. import _validate as V
from ..layers import THETA_R_FORMS, GATv2Layer
from . import pyg
from .activations import ACTIVATIONS
from .linear import Linear
from .pooling import POOL_MODES
from .stack import NetworkCache, stack_backward, stack_forward

__all__ = ["GATv2Network", "NetworkCache", "READOUTS"]

READOUTS = (None,) + POOL_MODES


class GATv2Network:
    """A GATv2 network: node-level (transductive) or graph-level (with readout).

    Parameters
    ----------
    in_features : int or (int, int)
        Input feature size; ``(F_src, F_dst)`` makes the first layer bipartite (input ``(x_src, x_dst)``).
    hidden_features : int
        Channels per head of the hidden layers.
    out_features : int
        Output size (number of classes or targets).
    num_layers : int, default 2
        Number of GATv2 layers (>= 1).
    heads : int, default 8
        Heads of every hidden layer (concatenated: width ``heads * hidden_features``).
    out_heads : int, default 1
        Heads of the output layer (averaged). Unused with ``readout``.
    activation : {"elu", "relu", "identity"}, default "elu"
        Applied after every hidden layer.
    dropout : float, default 0.6
        Feature dropout on the input of every layer (and of the readout head), in training mode
        only. Sparse inputs stay sparse: only their stored values are dropped.
    attention_dropout : float, default 0.6
        Each layer's attention dropout (``GATv2Layer(dropout=...)``).
    residual : bool, default False
        A linear skip connection in every layer (see :class:`~gatfast.GATv2Layer`).
    negative_slope : float, default 0.2
        LeakyReLU slope inside every layer's attention.
    add_self_loops : bool, default True
        Every layer replaces existing self loops by one loop per node.
    share_weights : bool, default False
        Every layer uses one projection for sources and targets.
    attention_activation : {"leaky_relu", "softplus"}, default "leaky_relu"
        Activation inside every layer's score (``"softplus"``: GAT+).
    root_weight : {None, "theta_r", "theta_n"}, default None
        GAT+ root weight of every layer (see :class:`~gatfast.GATv2Layer`).
    readout : {None, "mean", "sum", "max"}, default None
        None for node-level outputs; otherwise graph-level outputs by pooling.
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the parameters and outputs.
    seed : int, optional
        Seeds the initialisation of every layer and the model's own dropout
        generator (independent streams spawned from one seed).
    edge_dim : int, optional
        Edge features: every layer gets ``edge_dim`` and the same edge
        attributes (``forward(..., edge_attr=...)``).
    fill_value : str, float or sequence, default "mean"
        Attributes of the self loops every layer adds (see ``GATv2Layer``).

    Attributes
    ----------
    layers : list of GATv2Layer
        The GATv2 layers, input first.
    head : Linear or None
        The readout's final linear layer.

    Notes
    -----
    With ``L = num_layers``, ``H = heads``, ``C = hidden_features``, and
    ``drop`` the feature dropout (identity in evaluation mode):

    ``readout=None`` (node level)::

        h_0 = x
        h_l = act(GATv2(h_{l-1} -> C, H heads, concat)(drop(h_{l-1})))   l = 1 .. L-1
        out = GATv2(h_{L-1} -> out_features, out_heads heads, mean)(drop(h_{L-1}))

    ``readout in {"mean", "sum", "max"}`` (graph level)::

        h_l = act(GATv2(h_{l-1} -> C, H heads, concat)(drop(h_{l-1})))   l = 1 .. L
        out = Linear(H*C -> out_features)(drop(pool(h_L, graph_ptr)))

    The defaults with ``num_layers=2, heads=8, hidden_features=8`` are the
    GAT recipe for Cora (Veličković et al., 2018), with GATv2 layers.
    """

    def __init__(
        self,
        in_features,
        hidden_features,
        out_features,
        num_layers=2,
        heads=8,
        out_heads=1,
        activation="elu",
        dropout=0.6,
        attention_dropout=0.6,
        residual=False,
        negative_slope=0.2,
        add_self_loops=True,
        share_weights=False,
        attention_activation="leaky_relu",
        root_weight=None,
        readout=None,
        dtype=np.float32,
        seed=None,
        edge_dim=None,
        fill_value="mean",
    ):
        if isinstance(in_features, (list, tuple)):
            if len(in_features) != 2:
                raise ValueError(f"in_features must be an int or a pair (F_src, F_dst), got {in_features!r}")
            self.in_features = (V.check_int(in_features[0], "in_features[0]", 1),
                                V.check_int(in_features[1], "in_features[1]", 1))
        else:
            self.in_features = V.check_int(in_features, "in_features", 1)
        self.hidden_features = V.check_int(hidden_features, "hidden_features", 1)
        self.out_features = V.check_int(out_features, "out_features", 1)
        self.num_layers = V.check_int(num_layers, "num_layers", 1)
        # the documented caps, before anything is allocated (a typo such as 10**6 layers would hang)
        V.check_network_size(self.in_features, hidden_features, out_features, num_layers, heads, out_heads,
                             readout)
        self.heads = V.check_int(heads, "heads", 1)
        self.out_heads = V.check_int(out_heads, "out_heads", 1)
        self.activation = V.check_choice(activation, "activation", set(ACTIVATIONS))
        self.dropout = V.check_float(dropout, "dropout", 0.0, 1.0, high_open=True)
        self.attention_dropout = V.check_float(
            attention_dropout, "attention_dropout", 0.0, 1.0, high_open=True
        )
        self.residual = bool(residual)
        self.negative_slope = V.check_float(negative_slope, "negative_slope")
        self.add_self_loops = bool(add_self_loops)
        self.share_weights = bool(share_weights)
        self.attention_activation = attention_activation
        self.root_weight = root_weight
        if readout not in READOUTS:
            raise ValueError(f"readout must be None, 'mean', 'sum' or 'max', got {readout!r}")
        self.readout = readout
        self.dtype = V.check_dtype(dtype)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise TypeError(f"seed must be None or an int, got {type(seed).__name__}")
        if seed is not None and seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.seed = None if seed is None else int(seed)

        # independent streams: one per layer, one for the head, one for dropout
        streams = np.random.default_rng(self.seed).spawn(self.num_layers + 2)
        common = dict(
            negative_slope=self.negative_slope,
            add_self_loops=self.add_self_loops,
            share_weights=self.share_weights,
            dtype=self.dtype,
            dropout=self.attention_dropout,
            residual=self.residual,
            attention_activation=attention_activation,
            root_weight=root_weight,
            edge_dim=edge_dim,
            fill_value=fill_value,
        )
        hidden_width = self.heads * self.hidden_features
        self.layers = []
        width = self.in_features
        for l in range(self.num_layers):
            last = l == self.num_layers - 1 and self.readout is None
            if last:
                layer = GATv2Layer(
                    width, self.out_features, heads=self.out_heads, concat=False, seed=streams[l], **common
                )
            else:
                layer = GATv2Layer(
                    width, self.hidden_features, heads=self.heads, concat=True, seed=streams[l], **common
                )
            self.layers.append(layer)
            width = hidden_width
        self.head = None
        if self.readout is not None:
            self.head = Linear(hidden_width, self.out_features, dtype=self.dtype, seed=streams[-2])
        self._rng = streams[-1]
        self.edge_dim = self.layers[0].edge_dim
        self.fill_value = self.layers[0].get_config()["fill_value"]

    # ------------------------------------------------------------------ parameters
    def _modules(self):
        mods = [(f"layers.{l}", layer) for l, layer in enumerate(self.layers)]
        if self.head is not None:
            mods.append(("head", self.head))
        return mods

    def has_activation(self, l):
        """Whether layer ``l`` is followed by the activation.

        Parameters
        ----------
        l : int
            Layer index, ``0 <= l < num_layers``.

        Returns
        -------
        bool
            True for every layer but the output layer of a node-level network.
        """
        return self.readout is not None or l < self.num_layers - 1

    def parameters(self):
        """Return every parameter array under a flat name.

        Returns
        -------
        dict of str to ndarray
            ``{"layers.0.W_l": array, ..., "head.weight": array}``: the arrays the model computes
            with (not copies), so an optimizer that updates them in place trains the model.
        """
        return {f"{prefix}.{k}": arr for prefix, mod in self._modules() for k, arr in mod.params.items()}

    def num_parameters(self):
        """Count the scalar parameters.

        Returns
        -------
        int
            The total size of the arrays of :meth:`parameters`.
        """
        return int(sum(a.size for a in self.parameters().values()))

    def load_parameters(self, params):
        """Copy values into the model's parameter arrays (in place; arrays keep their identity).

        Parameters
        ----------
        params : mapping
            Exactly the keys of :meth:`parameters`, each an array of the
            same shape. Everything is checked before anything is copied.
        """
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping of name -> array, got {type(params).__name__}")
        own = self.parameters()
        missing = [k for k in own if k not in params]
        if missing:
            raise KeyError(f"params is missing {missing[0]!r} ({len(missing)} of {len(own)} keys missing)")
        extra = [k for k in params if k not in own]
        if extra:
            raise KeyError(f"params has unexpected key {extra[0]!r}; expected the keys of parameters()")
        checked = {k: V.check_dense(params[k], f"params[{k!r}]", own[k].shape, self.dtype) for k in own}
        for k, arr in checked.items():
            np.copyto(own[k], arr)

    def get_config(self):
        """Return the constructor arguments.

        Returns
        -------
        dict
            JSON-able: ``GATv2Network(**config)`` rebuilds the model (with new parameter values).
        """
        return {
            "in_features": list(self.in_features) if isinstance(self.in_features, tuple) else self.in_features,
            "hidden_features": self.hidden_features,
            "out_features": self.out_features,
            "num_layers": self.num_layers,
            "heads": self.heads,
            "out_heads": self.out_heads,
            "activation": self.activation,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "residual": self.residual,
            "negative_slope": self.negative_slope,
            "add_self_loops": self.add_self_loops,
            "share_weights": self.share_weights,
            "attention_activation": self.attention_activation,
            "root_weight": self.root_weight,
            "readout": self.readout,
            "dtype": self.dtype.name,
            "seed": self.seed,
            "edge_dim": self.edge_dim,
            "fill_value": self.fill_value,
        }

    # a plain PyG model of GATv2Conv layers, both ways (models/pyg.py)
    from_pyg = classmethod(pyg.network_from_pyg)
    to_pyg = pyg.network_to_pyg
    to_pyg_state_dict = pyg.network_to_pyg_state_dict
    load_pyg_state_dict = pyg.load_network_pyg_state_dict

    def __repr__(self):
        body = ", ".join(repr(layer) for layer in self.layers)
        head = f", readout={self.readout!r}, head={self.head!r}" if self.head is not None else ""
        return f"GATv2Network([{body}]{head})"

    def forward(self, graph, x, graph_ptr=None, training=False, rng=None, edge_attr=None, ids=None):
        """Run the network.

        Parameters
        ----------
        graph : CSRGraph, scipy.sparse matrix, or list of them
            CSR by target (a batch of graphs is one block-diagonal graph); or one block per layer (sampled
            mini-batches: block ``l + 1``'s sources are block ``l``'s targets, targets first).
        x : ndarray or scipy.sparse matrix, or a pair of them
            Features of the (first block's) sources; ``(x_src, x_dst)`` if ``in_features`` is a pair.
        graph_ptr : ndarray of int, shape (num_graphs + 1,)
            Required iff ``readout`` is set (see :func:`gatfast.batch_graphs`).
        training : bool, default False
            Apply feature and attention dropout.
        rng : numpy.random.Generator or RandomKeys, optional
            Source of every dropout mask. A Generator is drawn in a fixed order (layer by layer:
            features, then attention; then the head's input); it defaults to the model's own
            generator. With :class:`~gatfast.RandomKeys` every mask is a function of the key and
            the global id of the node, edge or graph it applies to, so any split of a batch gives
            the same masks.
        edge_attr : ndarray or list of ndarray, optional
            Edge features in CSR order (required iff ``edge_dim`` is set):
            one array for one graph, one per block for a list of blocks.
        ids : GraphIds, optional
            Global ids of each layer's input rows and edges (and of the batch's graphs), for keyed
            dropout; default their positions.

        Returns
        -------
        out : ndarray
            (num_dst, out_features), or (num_graphs, out_features) with readout.
        cache : NetworkCache
            What :meth:`backward` needs.
        """
        return stack_forward(self, graph, x, graph_ptr, bool(training), self._rng if rng is None else rng, edge_attr,
                             ids)

    __call__ = forward

    def output(self, graph, x, graph_ptr=None, edge_attr=None):
        """Compute the evaluation-mode output: logits for classification, values for regression.

        Parameters
        ----------
        graph, x, graph_ptr, edge_attr : as in :meth:`forward`
            ``graph_ptr`` is required iff ``readout`` is set, ``edge_attr`` iff ``edge_dim`` is.

        Returns
        -------
        ndarray
            ``forward(graph, x, ...)[0]`` without dropout; no cache is kept.
        """
        return stack_forward(self, graph, x, graph_ptr, False, self._rng, edge_attr, keep_cache=False)[0]

    def predict(self, graph, x, graph_ptr=None, edge_attr=None):
        """Return the raw outputs (logits); deprecated, use :meth:`output`.

        .. deprecated:: 0.2 ``predict`` will return labels in gatfast 0.3 (it warns: FutureWarning).

        Parameters
        ----------
        graph, x, graph_ptr, edge_attr : as in :meth:`output`
            The network's input.

        Returns
        -------
        ndarray
            What :meth:`output` returns.
        """
        warnings.warn("GATv2Network.predict returns raw outputs (logits) and is deprecated: use "
                      "network.output(...) (predict will return labels in gatfast 0.3)", FutureWarning,
                      stacklevel=2)
        return self.output(graph, x, graph_ptr, edge_attr)

    def backward(self, cache, grad_out, theta_r="linear", input_grad=True):
        """Compute the gradients of a scalar loss ``L`` given ``grad_out = dL/d out``.

        Parameters
        ----------
        cache : NetworkCache
            From :meth:`forward` (with the parameters unchanged since).
        grad_out : ndarray, shape of ``out``
            The gradient of the loss with respect to the output of :meth:`forward`.
        theta_r : {"linear", "pairwise"}, default "linear"
            Form of the Θ_R term in every layer (see ``docs/MATH.md``).
        input_grad : bool, default True
            False: no ``"x"``, no ``"edge_attr"`` (training needs neither), nor the work only they need.

        Returns
        -------
        grads : dict
            The keys of :meth:`parameters`; ``"x"`` (the input gradient, or a pair) when the input
            was dense and ``input_grad``; ``"edge_attr"`` with edge features and ``input_grad``.
        """
        if not isinstance(cache, NetworkCache):
            raise TypeError(f"cache must be the NetworkCache returned by forward, got {type(cache).__name__}")
        V.check_choice(theta_r, "theta_r", set(THETA_R_FORMS))
        grad = V.check_dense(grad_out, "grad_out", cache.out_shape, self.dtype)
        return stack_backward(self, cache, grad, theta_r, bool(input_grad))
