"""Gradient-flow diagnostics: where Θ_R gets no gradient, and why.

In GATv2 the target projection ``r_i = Θ_R h̃_i`` of node ``i`` only enters
node ``i``'s own scores, so ``∂L/∂r_i = P_i`` depends on node ``i``'s row of
the graph alone. ``P_i`` (per head and channel ``d``) is, in the paper's
pairwise form (``docs/MATH.md``),

    P_i^(d) = a^(d) Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij^(d) - s_ik^(d)),

which is zero *for every upstream gradient and every feature value* when

* the row is empty (``"no_edges"``: the node has no attention at all),
* the row has one in-edge (``"single_edge"``: no pairs, ``α = 1`` is constant),
* the row has >= 2 in-edges whose slopes ``s(z_ij^(d))`` are all equal
  (``"same_regime"``), or
* ``a^(d) == 0`` (``"zero_att"``, the whole channel is dead).

Such entries are called *structurally zero*; the test is exact (slopes are
compared for equality, never against a threshold). The definition, and how
it changes for the GAT+ variants, is in ``docs/VARIANTS.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..layers import GATv2Layer, LayerCache

__all__ = [
    "CAUSES",
    "ThetaRFlow",
    "grad_norms",
    "structural_zero_causes",
    "theta_r_flow",
    "theta_r_flow_from_cache",
]


#: Cause names; entry ``k`` of the tuple is code ``k + 1`` in ``ThetaRFlow.cause``
#: (code 0 = the contribution is not structurally zero).
CAUSES = ("no_edges", "single_edge", "same_regime", "zero_att")


@dataclass
class ThetaRFlow:
    """Where node ``i``'s contribution to ``∂L/∂Θ_R`` is structurally zero.

    Attributes
    ----------
    mask : ndarray of bool, shape (num_nodes, heads, out_features)
        True where ``∂ out_i / ∂ r_i^(h, d)`` vanishes identically, i.e.
        node ``i`` sends no gradient to row ``h*C + d`` of Θ_R whatever the
        loss. With ``root_weight="theta_r"`` the root term ``r_i`` itself
        reaches the output, so ``mask`` is all False.
    fraction : ndarray, shape (heads, out_features)
        Fraction of all nodes with ``mask`` True, per head and channel.
    attention_mask : ndarray of bool, shape (num_nodes, heads, out_features)
        The same test for the attention path alone (``P_i``); equal to
        ``mask`` unless ``root_weight="theta_r"``.
    cause : ndarray of int8, shape (num_nodes, heads, out_features)
        0 where the attention path is live, else ``1 + CAUSES.index(name)``.
        Graph causes win over ``"zero_att"``: a single-edge node in a
        channel with ``a == 0`` is counted as ``"single_edge"``.
    fractions : dict of str to ndarray (heads, out_features)
        Fraction of all nodes per cause (attention path). They add up to
        the attention-path dead fraction.
    att_zero : ndarray of bool, shape (heads, out_features)
        Channels whose attention weight ``a^(h, d)`` is exactly zero.
    in_degree : ndarray of int64, shape (num_nodes,)
        Row lengths of the attention graph (self loops included if added).
    grad_norms : dict of str to float
        Frobenius norm of each parameter's gradient (empty if no gradient
        was given); ``"x"`` is left out.
    root_weight : str or None
        The layer's ``root_weight`` setting.
    """

    mask: np.ndarray
    fraction: np.ndarray
    attention_mask: np.ndarray
    cause: np.ndarray
    fractions: dict
    att_zero: np.ndarray
    in_degree: np.ndarray
    grad_norms: dict = field(default_factory=dict)
    root_weight: str | None = None

    @property
    def dead_fraction(self):
        """Fraction of all (node, head, channel) entries with ``mask`` True."""
        return float(self.mask.mean()) if self.mask.size else 0.0

    def summary(self):
        """Summarise the flow in scalars, for logging.

        Returns
        -------
        dict of str to float
            ``dead_fraction`` (Θ_R) and ``attention_dead_fraction``, ``frac_<cause>``
            for every cause and ``grad_norm_<name>`` for every gradient norm.
        """
        out = {"dead_fraction": self.dead_fraction}
        out["attention_dead_fraction"] = (
            float(self.attention_mask.mean()) if self.attention_mask.size else 0.0
        )
        n = max(self.cause.size, 1)
        for k, name in enumerate(CAUSES):
            out[f"frac_{name}"] = float(np.count_nonzero(self.cause == k + 1)) / n
        for name, value in self.grad_norms.items():
            out[f"grad_norm_{name}"] = value
        return out


def structural_zero_causes(indptr, indices, xl, xr, att, negative_slope, attention_activation, u=None, weT=None):
    """Cause code of every (node, head, channel) of the attention path.

    Parameters
    ----------
    indptr, indices : ndarray of int64
        The attention graph, CSR by target.
    xl, xr : ndarray, shapes (num_src, heads, C) and (num_dst, heads, C)
        Source and target projections, exactly as passed to the kernels.
    att : ndarray, shape (heads, C)
        The attention vector.
    negative_slope : float
        LeakyReLU slope ``c``.
    attention_activation : {"leaky_relu", "softplus"}

    u : ndarray, shape (nnz, D), optional
        Edge attributes in the attention graph's CSR order (edge features).
    weT : ndarray, shape (heads, D, C), optional
        The edge weights as the kernels take them (``W_e`` per head, transposed).

    Returns
    -------
    cause : ndarray of int8, shape (num_nodes, heads, C)
        Codes as in :class:`ThetaRFlow`.

    Notes
    -----
    ``z_ij = xr_i + xl_j`` is formed in the arrays' dtype, the same rounding
    as the kernels. For LeakyReLU the slope is ``1 if z > 0 else c`` (the
    kernels' test), so only the sign pattern matters; with ``c == 1`` all
    slopes are equal and every row with >= 2 edges is ``"same_regime"``.
    For softplus the slope ``sigmoid(z)`` is strictly increasing, so slopes
    are equal exactly when the ``z`` values are equal; that is what is
    tested (a sigmoid that rounds to 1.0 for large ``z`` is numerically,
    not structurally, flat and is not reported).
    """
    n, heads, channels = xr.shape
    deg = np.diff(indptr)
    cause = np.zeros((n, heads, channels), dtype=np.int8)
    cause[deg == 0] = 1 + CAUSES.index("no_edges")
    cause[deg == 1] = 1 + CAUSES.index("single_edge")
    multi = np.flatnonzero(deg >= 2)
    if multi.size:
        targets = np.repeat(np.arange(n), deg)
        z = xr[targets] + xl[indices]  # (E, H, C), same dtype and operations as the kernels
        if u is not None and u.shape[0]:
            for d in range(u.shape[1]):  # the edge term, added in the kernels' order (kernels/edge.py)
                z += weT[None, :, d, :] * u[:, d, None, None]
        if attention_activation == "leaky_relu":
            if negative_slope == 1.0:
                key = np.zeros(z.shape, dtype=np.int8)
            else:
                key = (z > 0).astype(np.int8)
        elif attention_activation == "softplus":
            key = z
        else:
            raise ValueError(
                f"attention_activation must be 'leaky_relu' or 'softplus', got {attention_activation!r}"
            )
        # reduceat over the starts of all non-empty rows: each segment then ends
        # exactly where its row ends (empty rows add no start).
        nonempty = np.flatnonzero(deg >= 1)
        starts = indptr[nonempty]
        same = np.maximum.reduceat(key, starts, axis=0) == np.minimum.reduceat(key, starts, axis=0)
        same = same[deg[nonempty] >= 2]
        cause[multi] = np.where(same, 1 + CAUSES.index("same_regime"), 0)
    zero_att = np.asarray(att) == 0
    cause[(cause == 0) & zero_att[None]] = 1 + CAUSES.index("zero_att")
    return cause


def theta_r_flow_from_cache(layer, cache, grads=None):
    """Diagnose a layer from the cache of a forward pass already done.

    Parameters
    ----------
    layer : GATv2Layer
        The layer that made ``cache``.
    cache : LayerCache
        From ``layer.forward``; training-mode caches are fine (attention
        dropout scales the messages but leaves the zero pattern unchanged).
    grads : dict, optional
        From ``layer.backward``; their norms are reported.

    Returns
    -------
    ThetaRFlow
        The masks, causes and norms.
    """
    if not isinstance(layer, GATv2Layer):
        raise TypeError(f"layer must be a gatfast.GATv2Layer, got {type(layer).__name__}")
    if not isinstance(cache, LayerCache):
        raise TypeError(f"cache must be the LayerCache returned by forward, got {type(cache).__name__}")
    g = cache.graph
    weT = None
    if layer.edge_dim is not None:
        H, C = layer.heads, layer.out_features
        weT = np.ascontiguousarray(cache.params["W_e"].reshape(H, C, layer.edge_dim).transpose(0, 2, 1))
    cause = structural_zero_causes(
        g.indptr,
        g.indices,
        cache.xl,
        cache.xr,
        cache.params["att"],
        layer.negative_slope,
        layer.attention_activation,
        cache.inputs.u,
        weT,
    )
    attention_mask = cause != 0
    if layer.root_weight == "theta_r":
        # out_i contains r_i itself: ∂out_i/∂r_i = I + (attention part), never zero for all inputs
        mask = np.zeros_like(attention_mask)
    else:
        mask = attention_mask
    n = g.num_nodes
    denom = max(n, 1)
    fractions = {name: np.count_nonzero(cause == k + 1, axis=0) / denom for k, name in enumerate(CAUSES)}
    return ThetaRFlow(
        mask=mask,
        fraction=np.count_nonzero(mask, axis=0) / denom,
        attention_mask=attention_mask,
        cause=cause,
        fractions=fractions,
        att_zero=np.asarray(cache.params["att"]) == 0,
        in_degree=g.in_degree(),
        grad_norms=grad_norms(grads),
        root_weight=layer.root_weight,
    )


def theta_r_flow(layer, graph, x, grad_out=None, grads=None, edge_attr=None):
    """Per head and channel, which nodes send Θ_R no gradient, and why.

    Runs ``layer.forward(graph, x)`` in evaluation mode and inspects the
    sign pattern of the pre-activation scores ``z_ij = r_i + x_j (+ W_e u_ij)``.

    Parameters
    ----------
    layer : GATv2Layer
        The layer to diagnose.
    graph : CSRGraph or scipy.sparse matrix
        CSR by target, as ``layer.forward`` takes it.
    x : ndarray or scipy.sparse matrix, or a pair of them
        As ``layer.forward`` takes them.
    grad_out : ndarray, shape (num_dst, layer.out_dim), optional
        Upstream gradient; if given, ``layer.backward`` is run and the
        parameter gradient norms are reported.
    grads : dict, optional
        Gradients already computed (``layer.backward`` output); used for the
        norms instead of ``grad_out``.
    edge_attr : ndarray, shape (graph.nnz, edge_dim), optional
        Edge features, for a layer with ``edge_dim`` (in CSR order). The
        edge term moves each edge's ``z`` separately, so it changes which
        rows sit in one regime; the causes themselves stay the same.

    Returns
    -------
    ThetaRFlow
        The masks, causes and norms.

    Examples
    --------
    A path 0 -> 1 -> 2 with self loops: node 0 has only its loop.

    >>> import numpy as np, gatfast
    >>> from gatfast.diagnostics import theta_r_flow
    >>> g = gatfast.CSRGraph.from_edge_index(np.array([[0, 1], [1, 2]]), 3)
    >>> layer = gatfast.GATv2Layer(2, 4, dtype=np.float64, seed=0)
    >>> flow = theta_r_flow(layer, g, np.ones((3, 2)))
    >>> bool(flow.mask[0].all())
    True
    """
    if not isinstance(layer, GATv2Layer):
        raise TypeError(f"layer must be a gatfast.GATv2Layer, got {type(layer).__name__}")
    if grads is not None and grad_out is not None:
        raise ValueError("pass either grad_out or grads, not both")
    out, cache = layer.forward(graph, x, edge_attr, training=False)
    if grad_out is not None:
        grads = layer.backward(cache, grad_out)
    return theta_r_flow_from_cache(layer, cache, grads)


def grad_norms(grads):
    """Frobenius norm of every gradient (``"x"`` and None entries left out)."""
    if grads is None:
        return {}
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of gradient arrays, got {type(grads).__name__}")
    return {
        k: float(np.linalg.norm(np.asarray(v, dtype=np.float64)))
        for k, v in grads.items()
        if k != "x" and v is not None
    }
