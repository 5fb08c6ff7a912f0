"""The parameter shapes of a GATv2 layer, from its arguments alone (no arrays allocated)."""

from __future__ import annotations

__all__ = ["layer_parameter_shapes"]


def layer_parameter_shapes(in_features, out_features, heads, concat, share_weights=False, residual=False,
                           root_weight=None, bias=True, edge_dim=None):
    """``{name: shape}`` of :class:`~gatfast.layers.GATv2Layer`, in its ``params`` order.

    ``in_features`` is an int or a pair ``(F_src, F_dst)``.
    """
    f_src, f_dst = in_features if isinstance(in_features, (tuple, list)) else (in_features, in_features)
    hc = heads * out_features
    out_dim = hc if concat else out_features
    shapes = {"W_l": (hc, f_src)}
    if bias:
        shapes["b_l"] = (hc,)
    if not share_weights:
        shapes["W_r"] = (hc, f_dst)
        if bias:
            shapes["b_r"] = (hc,)
    shapes["att"] = (heads, out_features)
    if edge_dim is not None:
        shapes["W_e"] = (hc, edge_dim)
    if root_weight == "theta_n":
        shapes["W_n"] = (hc, f_dst)
        if bias:
            shapes["b_n"] = (hc,)
    if residual:
        shapes["W_res"] = (out_dim, f_dst)
    if bias:
        shapes["bias"] = (out_dim,)
    return shapes
