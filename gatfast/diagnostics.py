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

import csv
import os
from dataclasses import dataclass, field

import numpy as np

from . import _validate as V
from ._io import atomic_save_figure, atomic_write
from .layer import GATv2Layer, LayerCache

__all__ = [
    "CAUSES",
    "ThetaRFlow",
    "ThetaRFlowRecorder",
    "structural_zero_causes",
    "theta_r_flow",
    "theta_r_flow_from_cache",
    "theta_r_flow_network",
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
        """Scalars for logging: dead fraction (Θ_R and attention path), per cause, grad norms."""
        out = {"dead_fraction": self.dead_fraction}
        out["attention_dead_fraction"] = float(self.attention_mask.mean()) if self.attention_mask.size else 0.0
        n = max(self.cause.size, 1)
        for k, name in enumerate(CAUSES):
            out[f"frac_{name}"] = float(np.count_nonzero(self.cause == k + 1)) / n
        for name, value in self.grad_norms.items():
            out[f"grad_norm_{name}"] = value
        return out


def structural_zero_causes(indptr, indices, xl, xr, att, negative_slope, attention_activation):
    """Cause code of every (node, head, channel) of the attention path.

    Parameters
    ----------
    indptr, indices : ndarray of int64
        The attention graph, CSR by target.
    xl, xr : ndarray, shape (num_nodes, heads, C)
        Source and target projections, exactly as passed to the kernels.
    att : ndarray, shape (heads, C)
    negative_slope : float
        LeakyReLU slope ``c``.
    attention_activation : {"leaky_relu", "softplus"}

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
        z = xr[targets] + xl[indices]  # (E, H, C), same dtype as the kernels
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
    cache : LayerCache
        From ``layer.forward``; training-mode caches are fine (attention
        dropout scales the messages but leaves the zero pattern unchanged).
    grads : dict, optional
        From ``layer.backward``; their norms are reported.

    Returns
    -------
    ThetaRFlow
    """
    if not isinstance(layer, GATv2Layer):
        raise TypeError(f"layer must be a gatfast.GATv2Layer, got {type(layer).__name__}")
    if not isinstance(cache, LayerCache):
        raise TypeError(f"cache must be the LayerCache returned by forward, got {type(cache).__name__}")
    g = cache.graph
    cause = structural_zero_causes(
        g.indptr, g.indices, cache.xl, cache.xr, cache.params["att"],
        layer.negative_slope, layer.attention_activation,
    )
    attention_mask = cause != 0
    if layer.root_weight == "theta_r":
        # out_i contains r_i itself: ∂out_i/∂r_i = I + (attention part), never zero for all inputs
        mask = np.zeros_like(attention_mask)
    else:
        mask = attention_mask
    n = g.num_nodes
    denom = max(n, 1)
    fractions = {
        name: np.count_nonzero(cause == k + 1, axis=0) / denom for k, name in enumerate(CAUSES)
    }
    return ThetaRFlow(
        mask=mask,
        fraction=np.count_nonzero(mask, axis=0) / denom,
        attention_mask=attention_mask,
        cause=cause,
        fractions=fractions,
        att_zero=np.asarray(cache.params["att"]) == 0,
        in_degree=g.in_degree(),
        grad_norms=_grad_norms(grads),
        root_weight=layer.root_weight,
    )


def theta_r_flow(layer, graph, x, grad_out=None, grads=None):
    """Per head and channel, which nodes send Θ_R no gradient, and why.

    Runs ``layer.forward(graph, x)`` in evaluation mode and inspects the
    sign pattern of the pre-activation scores ``z_ij = r_i + x_j``.

    Parameters
    ----------
    layer : GATv2Layer
    graph : CSRGraph or scipy.sparse matrix
    x : ndarray or scipy.sparse matrix, shape (num_nodes, in_features)
    grad_out : ndarray, shape (num_nodes, layer.out_dim), optional
        Upstream gradient; if given, ``layer.backward`` is run and the
        parameter gradient norms are reported.
    grads : dict, optional
        Gradients already computed (``layer.backward`` output); used for the
        norms instead of ``grad_out``.

    Returns
    -------
    ThetaRFlow

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
    out, cache = layer.forward(graph, x, training=False)
    if grad_out is not None:
        grads = layer.backward(cache, grad_out)
    return theta_r_flow_from_cache(layer, cache, grads)


def theta_r_flow_network(model, graph, x, grads=None, graph_ptr=None):
    """:func:`theta_r_flow` for every layer of a network.

    Parameters
    ----------
    model : object with ``layers`` and ``forward(graph, x, training=False)``
        E.g. ``gatfast.model.GATv2Network``. Its forward cache must expose the
        per-layer :class:`LayerCache` objects (see :func:`_layer_caches`).
    graph : CSRGraph or scipy.sparse matrix
    x : ndarray or scipy.sparse matrix
    grads : dict or list of dict, optional
        The model's gradients (``GATv2Network.backward``: keys
        ``"layers.<l>.<name>"``) or one dict per layer; only used for the norms.
    graph_ptr : ndarray, optional
        For models with a readout; defaults to one graph holding every node
        (the layers do not depend on it).

    Returns
    -------
    list of ThetaRFlow
        One per attention layer, in order.
    """
    _attention_layers(model)  # fail early with a clear message
    if graph_ptr is None and getattr(model, "readout", None) is not None:
        # the readout only pools the last layer; pooling per graph is irrelevant to the layers
        graph_ptr = np.array([0, V.as_graph(graph).num_nodes], dtype=np.int64)
    kwargs = {} if graph_ptr is None else {"graph_ptr": graph_ptr}
    _, cache = model.forward(graph, x, training=False, **kwargs)
    return flows_from_model_cache(model, cache, grads)


def flows_from_model_cache(model, cache, grads=None):
    """Diagnose every layer of ``model`` from one forward cache of it."""
    layers = _attention_layers(model)
    caches = _layer_caches(cache, len(layers))
    layer_grads = _per_layer_grads(grads, len(layers))
    return [
        theta_r_flow_from_cache(layer, c, lg) for layer, c, lg in zip(layers, caches, layer_grads)
    ]


# ---------------------------------------------------------------------- recorder


class ThetaRFlowRecorder:
    """Record the Θ_R gradient flow once per epoch, to CSV and to a plot.

    Each call to :meth:`record` adds one row per attention layer with the
    dead fraction (overall and per cause) and the gradient norm of every
    parameter, then rewrites the CSV atomically (temp file + ``os.replace``),
    so an interrupted run leaves a valid file.

    Parameters
    ----------
    path_csv : str or path-like
        Where to write the CSV (its directory must exist).

    Examples
    --------
    >>> rec = ThetaRFlowRecorder("run/theta_r_flow.csv")      # doctest: +SKIP
    >>> for epoch in range(epochs):                            # doctest: +SKIP
    ...     grads = ...  # the model's per-layer gradients this epoch
    ...     rec.record(epoch, model, graph, x, grads)
    >>> rec.plot("run/theta_r_flow.png")                       # doctest: +SKIP
    """

    BASE_COLUMNS = ["epoch", "layer", "dead_fraction", "attention_dead_fraction"] + [
        f"frac_{c}" for c in CAUSES
    ]
    #: Parameters whose gradient norm is plotted (all of them are in the CSV).
    PLOT_GRADS = ("W_r", "W_l", "att", "W_n")

    def __init__(self, path_csv):
        self.path_csv = os.fspath(path_csv)
        directory = os.path.dirname(os.path.abspath(self.path_csv))
        if not os.path.isdir(directory):
            raise ValueError(f"path_csv must be in an existing directory, got {self.path_csv!r}")
        self.rows = []

    @property
    def path(self):
        """The CSV path (same as ``path_csv``)."""
        return self.path_csv

    def fit_callback(self, dataset=None):
        """A ``callback(epoch, model, grads, row)`` for :func:`gatfast.train.fit`.

        Graph datasets: ``fit`` passes the epoch's first training batch in
        ``row["graph"]``/``row["x"]``. Node datasets: pass ``dataset``; its
        whole graph is diagnosed. Note that ``fit`` calls back after the
        optimizer step, so the mask describes the updated parameters while
        the norms are those of the step's gradients.
        """

        def callback(epoch, model, grads, row):
            if "graph" in row:
                graph, x = row["graph"], row["x"]
            elif dataset is not None:
                graph, x = dataset.graph, dataset.x
            else:
                raise ValueError("pass the NodeDataset to fit_callback(dataset) for node-level training")
            self.record(epoch, model, graph, x, grads)

        return callback

    def record(self, epoch, model, graph, x, grads=None):
        """Diagnose ``model`` on ``(graph, x)`` and append the rows for ``epoch``.

        Parameters
        ----------
        epoch : int
        model : network with ``layers`` (see :func:`theta_r_flow_network`) or a GATv2Layer
        graph, x : the graph and features to diagnose (e.g. the training batch)
        grads : per-layer gradients of this epoch (list of dicts), optional

        Returns
        -------
        list of ThetaRFlow
        """
        if isinstance(model, GATv2Layer):
            flows = [theta_r_flow(model, graph, x, grads=grads)]
        else:
            flows = theta_r_flow_network(model, graph, x, grads)
        for k, flow in enumerate(flows):
            row = {"epoch": int(epoch), "layer": k}
            row.update(flow.summary())
            self.rows.append(row)
        self._write()
        return flows

    @property
    def columns(self):
        extra = []
        for row in self.rows:
            for key in row:
                if key not in self.BASE_COLUMNS and key not in extra:
                    extra.append(key)
        return self.BASE_COLUMNS + extra

    def _write(self):
        cols = self.columns

        def write(f):
            writer = csv.DictWriter(f, fieldnames=cols, restval="", lineterminator="\n")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: _fmt(v) for k, v in row.items()})

        atomic_write(self.path_csv, write, text=True)

    def plot(self, path_png):
        """Plot the dead fraction and the gradient norms over epochs (needs matplotlib)."""
        if not self.rows:
            raise ValueError("nothing recorded yet: call record() before plot()")
        plt = _pyplot()
        layers = sorted({r["layer"] for r in self.rows})
        fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
        for k in layers:
            rows = [r for r in self.rows if r["layer"] == k]
            ep = [r["epoch"] for r in rows]
            ax0.plot(ep, [r["dead_fraction"] for r in rows], label=f"layer {k}")
            for key in rows[0]:
                if key.startswith("grad_norm_") and key[len("grad_norm_"):] in self.PLOT_GRADS:
                    ax1.plot(ep, [max(r.get(key, np.nan), 1e-30) for r in rows],
                             label=f"layer {k} {key[len('grad_norm_'):]}")
        ax0.set_xlabel("epoch")
        ax0.set_ylabel("dead Θ_R fraction (node, head, channel)")
        ax0.set_ylim(-0.02, 1.02)
        ax0.legend()
        ax1.set_xlabel("epoch")
        ax1.set_ylabel("gradient norm")
        ax1.set_yscale("log")
        ax1.legend(fontsize="small", ncol=2)
        fig.tight_layout()
        atomic_save_figure(fig, path_png)
        plt.close(fig)


# ---------------------------------------------------------------------- helpers


def _grad_norms(grads):
    if grads is None:
        return {}
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of gradient arrays, got {type(grads).__name__}")
    return {
        k: float(np.linalg.norm(np.asarray(v, dtype=np.float64)))
        for k, v in grads.items()
        if k != "x" and v is not None
    }


def _attention_layers(model):
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"model must have a 'layers' attribute, got {type(model).__name__}")
    return [layer for layer in layers if isinstance(layer, GATv2Layer)]


def _layer_caches(cache, count):
    """The LayerCache objects inside a model's forward cache, in order.

    ``GATv2Network``'s cache has them in ``layer_caches``; other containers
    (a list, a dict or object with ``layers``/``layer_caches``) are searched.
    """
    direct = getattr(cache, "layer_caches", None)
    if isinstance(direct, list) and len(direct) == count and all(isinstance(c, LayerCache) for c in direct):
        return direct
    found = []

    def walk(obj, depth=0):
        if depth > 3:
            return
        if isinstance(obj, LayerCache):
            found.append(obj)
        elif isinstance(obj, dict):
            for key in ("layers", "layer_caches", "caches"):
                if key in obj:
                    walk(obj[key], depth + 1)
                    return
            for v in obj.values():
                walk(v, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, depth + 1)
        elif hasattr(obj, "__dict__"):
            d = vars(obj)
            for key in ("layers", "layer_caches", "caches"):
                if key in d:
                    walk(d[key], depth + 1)
                    return
            for v in d.values():
                walk(v, depth + 1)

    walk(cache)
    if len(found) != count:
        raise ValueError(
            f"the model's forward cache must hold one LayerCache per attention layer "
            f"({count}), found {len(found)}"
        )
    return found


def _per_layer_grads(grads, count):
    """Split gradients into one dict per layer.

    Accepts a list of per-layer dicts, or the flat dict of
    ``GATv2Network.backward`` (keys ``"layers.<l>.<name>"``; other keys such
    as ``"x"`` or ``"head.weight"`` are ignored).
    """
    if grads is None:
        return [None] * count
    if isinstance(grads, dict):
        per = [{} for _ in range(count)]
        for key, value in grads.items():
            parts = key.split(".")
            if len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and int(parts[1]) < count:
                per[int(parts[1])][parts[2]] = value
        if all(per):
            return per
    elif isinstance(grads, (list, tuple)) and len(grads) == count and all(isinstance(g, dict) for g in grads):
        return list(grads)
    raise ValueError(
        f"grads must be the model's gradient dict (keys 'layers.<l>.<name>') or a list of one "
        f"dict per attention layer ({count}), got {type(grads).__name__}"
    )


def _fmt(v):
    if isinstance(v, float):
        return repr(v)
    return v


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:  # optional extra
        raise ImportError(
            "plotting needs matplotlib: pip install 'gatfast[plot]'"
        ) from exc
    return plt
