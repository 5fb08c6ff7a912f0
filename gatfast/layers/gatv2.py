"""One GATv2 layer with closed-form gradients (no autograd).

Semantics, parameter names and initialisation follow PyTorch Geometric's
``GATv2Conv`` (edge features, bipartite input, self-loop fill values
included); the math is in ``docs/MATH.md``.
"""

from __future__ import annotations

import numbers

import numpy as np

from .. import _runtime
from .. import _validate as V
from .._random import RandomKeys
from ..kernels import ACTIVATIONS
from . import pyg, small
from .cache import LayerCache
from .config import layer_config
from .dense import linear, project_inputs
from .init import glorot, uniform_bias
from .inputs import check_fill_value, resolve_inputs
from .params import ParamDict
from .passes import attention_backward, attention_dropout, attention_forward, kernel_constants
from .rowwise import add_bias_finite
from .shapes import layer_parameter_shapes
from .workspace import Workspace

__all__ = ["GATv2Layer", "THETA_R_FORMS", "ROOT_WEIGHTS"]

THETA_R_FORMS = ("linear", "pairwise")
ROOT_WEIGHTS = (None, "theta_r", "theta_n")


def _in_features(value):
    """``(in_features as stored, F_src, F_dst, bipartite)``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"in_features must be an int or a pair (F_src, F_dst), got {value!r}")
        f_src = V.check_int(value[0], "in_features[0]", 1)
        f_dst = V.check_int(value[1], "in_features[1]", 1)
        return (f_src, f_dst), f_src, f_dst, True
    f = V.check_int(value, "in_features", 1)
    return f, f, f, False


class GATv2Layer:
    """GATv2 attention layer (Brody et al., 2022) on CSR-by-target graphs.

    Parameters
    ----------
    in_features : int or (int, int)
        Input feature size ``F``, or ``(F_src, F_dst)`` for a bipartite layer
        whose ``forward`` takes ``(x_src, x_dst)`` (``W_l`` acts on sources,
        ``W_r`` on targets).
    out_features : int
        Channels per head ``C``.
    heads : int, default 1
        Number of attention heads ``H``.
    concat : bool, default True
        Concatenate the heads (output ``H*C``) or average them (output ``C``).
    negative_slope : float, default 0.2
        LeakyReLU slope inside the attention.
    add_self_loops : bool, default True
        Replace existing self loops by one loop per node (PyG semantics). In
        a bipartite graph target ``i`` gets a loop from source ``i`` for
        ``i < min(num_src, num_dst)``, exactly as PyG does; in a sampled
        block (targets first among the sources) that is every target.
    bias : bool, default True
        Learn ``b_l``, ``b_r`` and the output ``bias``.
    share_weights : bool, default False
        Use one projection for sources and targets (``W_r = W_l``); the
        params and grads then hold only ``W_l``/``b_l``. A bipartite layer
        needs ``F_src == F_dst`` for it.
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the parameters and outputs.
    seed : int or numpy.random.Generator, optional
        Seed of the initialisation and of attention dropout.
    dropout : float, default 0.0
        Attention dropout rate (training only), as PyG's ``dropout``.
    residual : bool, default False
        Add a linear skip connection ``x_dst @ W_res.T`` (PyG's ``residual``).
    attention_activation : {"leaky_relu", "softplus"}, default "leaky_relu"
        Activation inside the score. ``"softplus"`` is smooth, so the Θ_R
        gradient never vanishes structurally (GAT+).
    root_weight : {None, "theta_r", "theta_n"}, default None
        GAT+ root weight: add ``Θ_R h̃_i`` (``"theta_r"``) or a separate
        ``Θ_n h̃_i`` (``"theta_n"``) to each head's output. Self loops are
        then left out of the attention and ``add_self_loops`` is ignored.
    edge_dim : int, optional
        Number of edge features ``D``: adds ``W_e`` (PyG's
        ``lin_edge.weight``, no bias) and the term ``W_e u_ij`` inside the
        score; ``forward`` then requires ``edge_attr``.
    fill_value : {"mean", "add", "max", "min", "mul"}, float or sequence, default "mean"
        Attributes of the added self loops, from the target's other
        in-edges (``"mean"``: their mean, 0 without any) or a constant
        (a number, or a vector of ``edge_dim`` numbers), as PyG.

    Attributes
    ----------
    params : ParamDict
        ``W_l`` (H*C, F_src), ``b_l`` (H*C), ``W_r`` (H*C, F_dst), ``b_r``,
        ``att`` (H, C), ``W_e`` (H*C, D) with ``edge_dim``, ``W_n``
        (H*C, F_dst) and ``b_n`` with ``root_weight="theta_n"``, ``W_res``
        (out_dim, F_dst) with ``residual``, ``bias`` (out_dim).

    Notes
    -----
    Initialisation as PyG's ``GATv2Conv.reset_parameters``: glorot weights
    and attention vector, projection biases uniform in ``±1/sqrt(fan_in)``
    (PyG's ``Linear`` default), zero output bias.
    """

    def __init__(
        self,
        in_features,
        out_features,
        heads=1,
        concat=True,
        negative_slope=0.2,
        add_self_loops=True,
        bias=True,
        share_weights=False,
        dtype=np.float32,
        seed=None,
        dropout=0.0,
        residual=False,
        attention_activation="leaky_relu",
        root_weight=None,
        edge_dim=None,
        fill_value="mean",
    ):
        self.in_features, self.in_features_src, self.in_features_dst, self.bipartite = _in_features(in_features)
        self.out_features = V.check_int(out_features, "out_features", 1)
        self.heads = V.check_int(heads, "heads", 1)
        self.concat = bool(concat)
        self.negative_slope = V.check_float(negative_slope, "negative_slope")
        self.add_self_loops = bool(add_self_loops)
        self.bias = bool(bias)
        self.share_weights = bool(share_weights)
        if self.share_weights and self.in_features_src != self.in_features_dst:
            raise ValueError(f"share_weights=True needs F_src == F_dst, got in_features={self.in_features!r}")
        self.dtype = V.check_dtype(dtype)
        self.dropout = V.check_float(dropout, "dropout", 0.0, 1.0, high_open=True)
        self.residual = bool(residual)
        self.attention_activation = V.check_choice(attention_activation, "attention_activation", set(ACTIVATIONS))
        if root_weight not in ROOT_WEIGHTS:
            raise ValueError(f"root_weight must be None, 'theta_r' or 'theta_n', got {root_weight!r}")
        self.root_weight = root_weight
        self.edge_dim = None if edge_dim is None else V.check_int(edge_dim, "edge_dim", 1)
        self.fill_value = check_fill_value(fill_value, self.edge_dim)
        if seed is not None and not isinstance(seed, (numbers.Integral, np.random.Generator)):
            raise TypeError(f"seed must be None, an int or a numpy.random.Generator, got {type(seed).__name__}")
        self._rng = np.random.default_rng(seed)
        # the documented caps (gatfast._validate), before anything is allocated
        V.check_network_size(self.in_features, self.out_features, self.out_features, 1, self.heads, self.heads)
        self.params = ParamDict(self._shapes(), self.dtype)
        self.reset_parameters()
        self._workspace = Workspace()
        self._token = object()
        self.constants = kernel_constants(self)

    def _shapes(self):
        return layer_parameter_shapes(self.in_features, self.out_features, self.heads, self.concat,
                                      self.share_weights, self.residual, self.root_weight, self.bias, self.edge_dim)

    def clear_workspace(self):
        """Free the arrays kept between calls for speed (they are rebuilt on the next call)."""
        self._workspace.clear()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_workspace"] = None  # scratch memory is not part of the layer
        state["_token"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._workspace = Workspace()
        self._token = object()  # caches made before pickling belong to the original
        self.constants = kernel_constants(self)  # made anew: an older gatfast's pickle may lack a field

    # ------------------------------------------------------------------ setup
    @property
    def out_dim(self):
        """Width of the layer output: ``heads * out_features`` if concat else ``out_features``."""
        return self.heads * self.out_features if self.concat else self.out_features

    def reset_parameters(self):
        """Initialise as PyG: glorot weights and ``att``, projection biases ±1/sqrt(fan_in), zero ``bias``."""
        for name, shape in self.params.shapes.items():
            if name.startswith("W_") or name == "att":
                self.params[name] = glorot(self._rng, shape, self.dtype)
            elif name == "bias":
                self.params[name] = np.zeros(shape, self.dtype)
            else:  # b_l, b_r, b_n: PyG's Linear default, uniform in ±1/sqrt(in_channels)
                fan_in = self.in_features_src if name == "b_l" else self.in_features_dst
                self.params[name] = uniform_bias(self._rng, shape, fan_in, self.dtype)

    def __repr__(self):
        extra = f", edge_dim={self.edge_dim}" if self.edge_dim is not None else ""
        return (f"GATv2Layer({self.in_features!r}, {self.out_features}, heads={self.heads}, "
                f"concat={self.concat}{extra})")

    get_config = layer_config

    # PyG's GATv2Conv, both ways (layers/pyg.py)
    from_pyg = classmethod(pyg.layer_from_pyg)
    to_pyg = pyg.layer_to_pyg
    to_pyg_state_dict = pyg.layer_to_pyg_state_dict
    load_pyg_state_dict = pyg.load_pyg_state_dict

    def attention_graph(self, graph):
        """Return the graph the attention runs on, self loops handled as configured.

        Parameters
        ----------
        graph : CSRGraph or scipy.sparse matrix
            CSR by target, as given to :meth:`forward`.

        Returns
        -------
        CSRGraph
            ``graph`` without self loops with ``root_weight``, with one loop per node with
            ``add_self_loops``, else ``graph`` as is; ``cache.alpha`` follows its CSR order.
        """
        graph = V.as_graph(graph)
        if self.root_weight is not None:
            return graph.without_self_loops()
        if self.add_self_loops:
            return graph.with_self_loops()
        return graph

    # ------------------------------------------------------------------ forward
    def forward(self, graph, x, edge_attr=None, *, training=False, rng=None):
        """Compute the layer output.

        Parameters
        ----------
        graph : CSRGraph or scipy.sparse matrix
            CSR by target (row ``i`` = sources of node ``i``), shape
            ``(num_dst, num_src)``.
        x : ndarray or scipy.sparse matrix, or a pair of them
            ``(num_nodes, F)`` features; for a bipartite layer the pair
            ``(x_src, x_dst)`` of shapes ``(num_src, F_src)`` and
            ``(num_dst, F_dst)``. A one-matrix layer given a rectangular
            graph (a sampled block) reads ``num_src`` rows and takes the
            first ``num_dst`` as the targets. Sparse features stay sparse.
        edge_attr : ndarray, shape (graph.nnz, edge_dim), optional
            Edge features **in the graph's CSR order** (see
            ``CSRGraph.from_edge_index(..., edge_attr=...)`` to permute them
            from ``edge_index`` order). Required iff ``edge_dim`` is set.
        training : bool, default False
            Apply attention dropout (when ``dropout > 0``).
        rng : numpy.random.Generator or RandomKeys, optional
            Source of the dropout mask; defaults to the layer's own generator.
            With :class:`~gatfast.RandomKeys` each edge's mask is
            a function of its global id (``rng.for_graph(edge_ids, dst_ids)``).

        Returns
        -------
        out : ndarray, shape (num_dst, out_dim)
            The output: ``out_dim = heads * out_features`` with ``concat``, else ``out_features``.
        cache : LayerCache
            Everything ``backward`` needs; ``cache.alpha`` (shape
            ``(cache.graph.nnz, heads)``) holds the attention in the CSR
            order of ``cache.graph``, the graph the attention ran on.
        """
        return self._forward_checked(graph, x, edge_attr, training, rng, False)

    __call__ = forward

    def output(self, graph, x, edge_attr=None):
        """Compute the evaluation-mode output alone, for inference (PyTorch's ``no_grad``).

        Parameters
        ----------
        graph, x, edge_attr : as in :meth:`forward`
            The graph, the features and (with ``edge_dim``) the edge features, as ``forward`` takes them.

        Returns
        -------
        ndarray, shape (num_dst, out_dim)
            ``forward(graph, x, edge_attr)[0]``, the same bits; no cache is kept, which saves a
            one-scene layer the copy of ``x`` and the cache it would hold for ``backward``.
        """
        return self._forward_checked(graph, x, edge_attr, False, None, False, keep_cache=False)[0]

    def _forward_checked(self, graph, x, edge_attr, training, rng, x_finite, keep_cache=True):
        """:meth:`forward`; ``x_finite`` skips the pass over ``x`` that ``GATv2Network`` already made
        (its input, or a checked layer output after activation and dropout; an overflow there shows in
        this layer's output check). ``keep_cache=False``: the cache may be None (:meth:`output`)."""
        if rng is None or isinstance(rng, (np.random.Generator, RandomKeys)):
            fast = small.forward(self, graph, x, edge_attr, training, keep_cache)
            if fast is not None:
                return fast
        inputs = resolve_inputs(self, graph, x, edge_attr, x_finite)
        self.params.check_shapes()  # finiteness: checked on the output, which any NaN parameter reaches
        if rng is not None and not isinstance(rng, (np.random.Generator, RandomKeys)):
            raise TypeError(f"rng must be a numpy.random.Generator or gatfast RandomKeys, got {type(rng).__name__}")
        work = inputs.x_src.shape[0] * self.in_features_src * self.heads * self.out_features
        with _runtime.blas_single_thread(work), _runtime.compile_notice(("forward", self.dtype.char)):
            return self._forward(inputs, bool(training), rng)

    def _forward(self, inputs, training, rng):
        g = inputs.attention
        H, C = self.heads, self.out_features
        n = g.num_dst
        params = dict(self.params)
        ws = self._workspace
        xl, xr = project_inputs(self, inputs, ws)
        if training and self.dropout > 0.0:
            edge_scale = attention_dropout(self, inputs, self._rng if rng is None else rng, ws)
        else:
            edge_scale = self.constants.no_dropout
        alpha, per_head, finite = attention_forward(self, g, xl, xr, inputs.u, edge_scale, params, ws)
        x_dst = inputs.x_dst
        if self.root_weight == "theta_r":
            per_head += xr
        elif self.root_weight == "theta_n":
            per_head += linear(x_dst, params["W_n"], params.get("b_n")).reshape(n, H, C)
        # per_head belongs to this call: finish the output in place
        # the mean of one head is that head, bit for bit (sum of one value, divided by 1)
        out = per_head.reshape(n, H * C) if self.concat or H == 1 else per_head.mean(axis=1)
        if self.residual:
            out += linear(x_dst, params["W_res"], None)
        if finite is None:  # the kernel did not finish the output (attention_forward)
            finite = add_bias_finite(out, params["bias"] if self.bias else None)
        if not finite:
            self.params.check_finite()  # names a non-finite parameter, if one is the cause
            raise V.NonFiniteError("the layer output contains NaN or inf: an overflow (scale the inputs or the "
                                   "parameters down)")
        small = max(xl.nbytes, xr.nbytes, alpha.nbytes) < Workspace.SMALL  # fresh arrays, not the workspace's
        cache = LayerCache.make(self._token, inputs, xl, xr, alpha, edge_scale, params, owned=small)
        return out, cache

    # ------------------------------------------------------------------ backward
    def backward(self, cache, grad_out, theta_r="linear", input_grad=True):
        """Compute the gradients of a scalar loss ``L`` given ``grad_out = dL/d out``.

        Parameters
        ----------
        cache : LayerCache
            From ``forward`` on this layer (a cache of another layer is refused).
        grad_out : ndarray, shape (num_dst, out_dim)
            The gradient of the loss with respect to the output of :meth:`forward`.
        theta_r : {"linear", "pairwise"}, default "linear"
            Form of the Θ_R term: the O(N)-per-node sum or the paper's
            pairwise O(N²)-per-node sum. Both agree to rounding.
        input_grad : bool, default True
            False when the inputs' gradients are not needed (the first
            layer of a network in training): the products only ``"x"``
            needs are skipped and ``"x"`` may be None; with ``edge_dim``,
            ``"edge_attr"`` is None and its per-edge sums are skipped. The
            other gradients are the same bits.

        Returns
        -------
        grads : dict
            One entry per key of ``params``; ``"x"``, the input gradient
            (None when ``x`` was sparse; a pair ``(grad_x_src, grad_x_dst)``
            for a bipartite layer); and ``"edge_attr"`` with ``edge_dim``
            (shaped and ordered as the ``edge_attr`` given, the path through
            the self-loop fill included; None with ``input_grad=False``).
        """
        return self._backward_checked(cache, grad_out, theta_r, input_grad, False)

    def _backward_checked(self, cache, grad_out, theta_r, input_grad, grad_finite, edge_grad=None):
        """:meth:`backward`; ``grad_finite`` skips the pass over ``grad_out`` for ``GATv2Network`` below
        its last layer (the layer above made it; a non-finite one shows in the parameter gradients).
        ``edge_grad`` (default: ``input_grad``): whether ``"edge_attr"`` is computed; a network needs
        ``"x"`` of its upper layers but their attributes' gradient only when it returns one."""
        if not isinstance(cache, LayerCache):
            raise TypeError(f"cache must be the LayerCache returned by forward, got {type(cache).__name__}")
        cache.check_owner(self._token, self)
        if not isinstance(theta_r, str):
            raise TypeError(f"theta_r must be one of {list(THETA_R_FORMS)!r}, got {type(theta_r).__name__}")
        if theta_r not in THETA_R_FORMS:
            V.check_choice(theta_r, "theta_r", set(THETA_R_FORMS))  # raises, naming the choices
        pairwise = theta_r == "pairwise"
        # a small plain layer takes one kernel call, with grad_out checked as it is read
        grads = small.backward(self, cache, grad_out, pairwise)
        if grads is not None:
            return grads
        with_sums = self.bias and not grad_finite  # the bias gradient's sums check grad_out (attention_backward)
        shape = (cache.graph.num_dst, self.out_dim)
        checked = V.check_dense(grad_out, "grad_out", shape, self.dtype, not (grad_finite or with_sums))
        if checked is not grad_out:  # converted: the small path may take it now
            grads = small.backward(self, cache, checked, pairwise)
            if grads is not None:
                return grads
        work = cache.inputs.x_src.shape[0] * self.in_features_src * self.heads * self.out_features
        with _runtime.blas_single_thread(work), _runtime.compile_notice(("backward", self.dtype.char)):
            edge_grad = bool(input_grad if edge_grad is None else edge_grad)
            args = (self._workspace, bool(input_grad), edge_grad, with_sums)
            grads = attention_backward(self, cache, checked, pairwise, *args)
        keys = list(self.params) + ["x"] + (["edge_attr"] if self.edge_dim is not None else [])
        return {k: grads[k] for k in keys}
