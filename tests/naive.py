"""Plain-numpy reference for GATv2 and a few test utilities. Tests only.

The reference follows ``docs/MATH.md`` literally: Python loops over the edges
of a CSR-by-target graph, one head at a time, nothing fused and nothing
vectorised beyond a dot product, so that a reader can check it line by line
against the formulas. It is slow on purpose; keep graphs small.

Self loops are the caller's business: pass the graph the attention runs on
(``layer.attention_graph(graph)``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import gatfast

# ---------------------------------------------------------------------- activations


def act(z, activation, slope):
    """The attention activation applied to one pre-activation array ``z``."""
    if activation == "leaky_relu":
        return np.where(z > 0, z, slope * z)
    if activation == "softplus":
        return np.logaddexp(0.0, z)
    raise ValueError(activation)


def act_slope(z, activation, slope):
    """Derivative of :func:`act`: ``s(z)`` in MATH.md (1 or c for LeakyReLU)."""
    if activation == "leaky_relu":
        return np.where(z > 0, 1.0, slope)
    if activation == "softplus":
        return 0.5 * (1.0 + np.tanh(0.5 * z))  # sigmoid without overflow
    raise ValueError(activation)


# ---------------------------------------------------------------------- forward


def _project(x, W, b):
    y = x @ W.T
    return y if b is None else y + b


def projections(x, params):
    """``x_l = Θ_L h̃`` and ``x_r = Θ_R h̃`` as (n, H*C); shared weights if no ``W_r``."""
    xl = _project(x, params["W_l"], params.get("b_l"))
    if "W_r" in params:
        xr = _project(x, params["W_r"], params.get("b_r"))
    else:
        xr = xl
    return xl, xr


def attention(indptr, indices, xl3, xr3, att, slope, activation="leaky_relu"):
    """Softmax weights ``α`` (E, H), one edge at a time."""
    n = len(indptr) - 1
    heads = att.shape[0]
    alpha = np.zeros((len(indices), heads))
    for h in range(heads):
        for i in range(n):
            edges = range(indptr[i], indptr[i + 1])
            if len(edges) == 0:
                continue
            e_ij = {}
            for e in edges:
                z = xr3[i, h] + xl3[indices[e], h]
                e_ij[e] = float(att[h] @ act(z, activation, slope))
            m = max(e_ij.values())
            denom = sum(np.exp(v - m) for v in e_ij.values())
            for e in edges:
                alpha[e, h] = np.exp(e_ij[e] - m) / denom
    return alpha


def forward(
    indptr,
    indices,
    x,
    params,
    heads,
    concat=True,
    negative_slope=0.2,
    activation="leaky_relu",
    root_weight=None,
):
    """Reference GATv2 forward.

    Parameters follow ``GATv2Layer``; ``params`` is a dict with the layer's
    keys (``W_r`` absent means shared weights, ``W_res`` present means a
    residual, ``bias`` absent means no bias). ``x`` is dense.

    Returns
    -------
    out : (n, out_dim)
    alpha : (E, H)
    xl3, xr3 : (n, H, C) projections
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(indptr) - 1
    C = params["att"].shape[1]
    xl, xr = projections(x, params)
    xl3 = xl.reshape(n, heads, C)
    xr3 = xr.reshape(n, heads, C)
    alpha = attention(indptr, indices, xl3, xr3, params["att"], negative_slope, activation)
    per_head = np.zeros((n, heads, C))
    for h in range(heads):
        for i in range(n):
            for e in range(indptr[i], indptr[i + 1]):
                per_head[i, h] += alpha[e, h] * xl3[indices[e], h]
    if root_weight == "theta_r":
        per_head += xr3
    elif root_weight == "theta_n":
        per_head += _project(x, params["W_n"], params.get("b_n")).reshape(n, heads, C)
    out = per_head.reshape(n, heads * C) if concat else per_head.mean(axis=1)
    if "W_res" in params:
        out = out + x @ params["W_res"].T
    if "bias" in params:
        out = out + params["bias"]
    return out, alpha, xl3, xr3


# ---------------------------------------------------------------------- backward


def head_grads(grad_out, heads, concat):
    """Upstream gradient per head (n, H, C): the head's slice, or ``g / H`` for the mean."""
    n = grad_out.shape[0]
    if concat:
        return grad_out.reshape(n, heads, -1)
    return np.repeat(grad_out[:, None, :] / heads, heads, axis=1)


def upstream(indptr, indices, xl3, g3):
    """``A_ij = g_i · x_j`` per edge and head (E, H): ∂L/∂α_ij."""
    heads = xl3.shape[1]
    A = np.zeros((len(indices), heads))
    for h in range(heads):
        for i in range(len(indptr) - 1):
            for e in range(indptr[i], indptr[i + 1]):
                A[e, h] = g3[i, h] @ xl3[indices[e], h]
    return A


def score_grads(indptr, alpha, A):
    """``δ_ik = α_ik (A_ik - Ā_i)`` (E, H): ∂L/∂e_ik."""
    delta = np.zeros_like(alpha)
    for h in range(alpha.shape[1]):
        for i in range(len(indptr) - 1):
            edges = range(indptr[i], indptr[i + 1])
            a_bar = sum(alpha[e, h] * A[e, h] for e in edges)
            for e in edges:
                delta[e, h] = alpha[e, h] * (A[e, h] - a_bar)
    return delta


def theta_r_linear(indptr, indices, xl3, xr3, att, alpha, A, slope, activation="leaky_relu"):
    """``P_i = a ⊙ Σ_k s_ik δ_ik``: the Θ_R term in its O(N)-per-node form (n, H, C)."""
    delta = score_grads(indptr, alpha, A)
    n, heads, C = xr3.shape
    P = np.zeros((n, heads, C))
    for h in range(heads):
        for i in range(n):
            for e in range(indptr[i], indptr[i + 1]):
                s = act_slope(xr3[i, h] + xl3[indices[e], h], activation, slope)
                P[i, h] += delta[e, h] * s
            P[i, h] *= att[h]
    return P


def theta_r_pairwise(indptr, indices, xl3, xr3, att, alpha, A, slope, activation="leaky_relu"):
    """``P_i = a ⊙ Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij - s_ik)``: the paper's O(N²) form."""
    n, heads, C = xr3.shape
    P = np.zeros((n, heads, C))
    for h in range(heads):
        for i in range(n):
            edges = list(range(indptr[i], indptr[i + 1]))
            for p, e1 in enumerate(edges):
                s1 = act_slope(xr3[i, h] + xl3[indices[e1], h], activation, slope)
                for e2 in edges[p + 1 :]:
                    s2 = act_slope(xr3[i, h] + xl3[indices[e2], h], activation, slope)
                    P[i, h] += alpha[e1, h] * alpha[e2, h] * (A[e1, h] - A[e2, h]) * (s1 - s2)
            P[i, h] *= att[h]
    return P


def backward(
    indptr,
    indices,
    x,
    params,
    grad_out,
    heads,
    concat=True,
    negative_slope=0.2,
    activation="leaky_relu",
    root_weight=None,
    theta_r="linear",
):
    """Reference closed-form gradients of ``L`` given ``grad_out = ∂L/∂out``.

    Returns a dict with one entry per parameter in ``params`` plus ``"x"``.
    """
    x = np.asarray(x, dtype=np.float64)
    grad_out = np.asarray(grad_out, dtype=np.float64)
    n = len(indptr) - 1
    att = params["att"]
    C = att.shape[1]
    _, alpha, xl3, xr3 = forward(
        indptr, indices, x, params, heads, concat, negative_slope, activation, root_weight
    )
    g3 = head_grads(grad_out, heads, concat)
    A = upstream(indptr, indices, xl3, g3)
    delta = score_grads(indptr, alpha, A)
    if theta_r == "linear":
        P = theta_r_linear(indptr, indices, xl3, xr3, att, alpha, A, negative_slope, activation)
    elif theta_r == "pairwise":
        P = theta_r_pairwise(indptr, indices, xl3, xr3, att, alpha, A, negative_slope, activation)
    else:
        raise ValueError(theta_r)

    # Q_j = Σ_{i: j∈N(i)} (q_ij + α_ij g_i) and ∂L/∂a = Σ δ_ik act(z_ik), edge by edge
    Q = np.zeros((n, heads, C))
    d_att = np.zeros_like(att)
    for h in range(heads):
        for i in range(n):
            for e in range(indptr[i], indptr[i + 1]):
                j = indices[e]
                z = xr3[i, h] + xl3[j, h]
                Q[j, h] += delta[e, h] * att[h] * act_slope(z, activation, negative_slope)
                Q[j, h] += alpha[e, h] * g3[i, h]
                d_att[h] += delta[e, h] * act(z, activation, negative_slope)

    grad_xl = Q.reshape(n, heads * C)
    grad_xr = P.reshape(n, heads * C)
    if root_weight == "theta_r":
        grad_xr = grad_xr + g3.reshape(n, heads * C)
    grads = {"att": d_att}
    if "W_r" in params:
        grads["W_l"] = grad_xl.T @ x
        grads["W_r"] = grad_xr.T @ x
        grad_x = grad_xl @ params["W_l"] + grad_xr @ params["W_r"]
        if "b_l" in params:
            grads["b_l"] = grad_xl.sum(axis=0)
            grads["b_r"] = grad_xr.sum(axis=0)
    else:
        grads["W_l"] = (grad_xl + grad_xr).T @ x
        grad_x = (grad_xl + grad_xr) @ params["W_l"]
        if "b_l" in params:
            grads["b_l"] = (grad_xl + grad_xr).sum(axis=0)
    if root_weight == "theta_n":
        gn = g3.reshape(n, heads * C)
        grads["W_n"] = gn.T @ x
        grad_x = grad_x + gn @ params["W_n"]
        if "b_n" in params:
            grads["b_n"] = gn.sum(axis=0)
    if "W_res" in params:
        grads["W_res"] = grad_out.T @ x
        grad_x = grad_x + grad_out @ params["W_res"]
    if "bias" in params:
        grads["bias"] = grad_out.sum(axis=0)
    grads["x"] = grad_x
    return grads


# ---------------------------------------------------------------------- the paper's literal forms


def paper_a7(indptr, indices, xl3):
    """The paper's ``A_7,ij = Σ_d (Θ_L h̃_j)^(d)`` (E, H): ``A_ij`` for an all-ones upstream."""
    heads = xl3.shape[1]
    A7 = np.zeros((len(indices), heads))
    for h in range(heads):
        for i in range(len(indptr) - 1):
            for e in range(indptr[i], indptr[i + 1]):
                A7[e, h] = sum(xl3[indices[e], h, d] for d in range(xl3.shape[2]))
    return A7


def paper_s(indptr, alpha, A7):
    """The paper's ``S_k = Σ_j (δ_kj - α_ij) A_7,ij`` per edge ``(i, k)`` (E, H), O(N²)."""
    S = np.zeros_like(alpha)
    for h in range(alpha.shape[1]):
        for i in range(len(indptr) - 1):
            edges = range(indptr[i], indptr[i + 1])
            for k in edges:
                S[k, h] = sum(((1.0 if j == k else 0.0) - alpha[j, h]) * A7[j, h] for j in edges)
    return S


def paper_theta_r_grad(indptr, indices, x, xl3, xr3, att, alpha, slope):
    """The paper's final ``∂L/∂Θ_R`` (weights and bias) for one head and ``∂L/∂h' = 1``.

    ``h_i^(t) a^(t) Σ_{j,k ∈ S_i} α_ij α_ik (A_7,ij - A_7,ik)(s_ij^(t) - s_ik^(t))``
    summed over nodes, with ``t`` read as (channel, input feature).
    """
    A7 = paper_a7(indptr, indices, xl3)
    n, C = xr3.shape[0], xr3.shape[2]
    dW = np.zeros((C, x.shape[1]))
    db = np.zeros(C)
    for i in range(n):
        edges = list(range(indptr[i], indptr[i + 1]))
        term = np.zeros(C)
        for p, j in enumerate(edges):
            for k in edges[p + 1 :]:
                s_j = act_slope(xr3[i, 0] + xl3[indices[j], 0], "leaky_relu", slope)
                s_k = act_slope(xr3[i, 0] + xl3[indices[k], 0], "leaky_relu", slope)
                term += alpha[j, 0] * alpha[k, 0] * (A7[j, 0] - A7[k, 0]) * (s_j - s_k)
        term *= att[0]
        dW += np.outer(term, x[i])
        db += term
    return dW, db


# ---------------------------------------------------------------------- layer adapters


def layer_reference(layer, graph, x, grad_out=None, theta_r="linear"):
    """Run the reference with ``layer``'s configuration and parameters.

    Returns ``(out, alpha, grads)`` in float64; ``grads`` is None without ``grad_out``.
    """
    g = layer.attention_graph(graph)
    x = x.toarray() if sp.issparse(x) else np.asarray(x)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in layer.params.items()}
    kw = dict(
        heads=layer.heads,
        concat=layer.concat,
        negative_slope=layer.negative_slope,
        activation=layer.attention_activation,
        root_weight=layer.root_weight,
    )
    out, alpha, _, _ = forward(g.indptr, g.indices, x, params, **kw)
    grads = None
    if grad_out is not None:
        grads = backward(g.indptr, g.indices, x, params, grad_out, theta_r=theta_r, **kw)
    return out, alpha, grads


# ---------------------------------------------------------------------- test utilities


def rel_err(a, b):
    """Normwise relative difference ``|a - b| / max(|a|, |b|)`` (0 for two zero arrays)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(np.linalg.norm(a), np.linalg.norm(b))
    return 0.0 if scale == 0 else float(np.linalg.norm(a - b) / scale)


def rows_graph(rows, num_nodes=None):
    """CSRGraph from a list of rows: ``rows[i]`` = the sources of node ``i``, kept in that order."""
    n = len(rows) if num_nodes is None else num_nodes
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1 : len(rows) + 1] = np.cumsum([len(r) for r in rows])
    indptr[len(rows) + 1 :] = indptr[len(rows)]
    indices = np.array([j for r in rows for j in r], dtype=np.int64)
    return gatfast.CSRGraph(indptr, indices, n)


def random_graph(rng, n, max_degree, self_loops=False, duplicates=False, empty_rows=0):
    """A random graph whose rows are unsorted; the first ``empty_rows`` nodes get no in-edges."""
    rows = []
    for i in range(n):
        if i < empty_rows:
            rows.append([])
            continue
        deg = int(rng.integers(0, max_degree + 1))
        src = rng.choice(n, size=min(deg, n), replace=duplicates).tolist()
        if not self_loops:
            src = [j for j in src if j != i]
        rows.append(src)
    return rows_graph(rows)


def mixed_graph(rng, n=12, hub_degree=8):
    """Node 0 has no in-edge, node 1 one, node 2 ``hub_degree``; the rest 0-4, all rows unsorted.

    Node 3 has a duplicated edge and node 4 a self loop (replaced when loops are added).
    """
    rows = [[], [int(rng.integers(2, n))]]
    hub = rng.permutation(np.arange(3, n))[: hub_degree - 1].tolist() + [0]
    rows.append(rng.permutation(hub).tolist())
    rows.append([5, 7, 5, 1])
    rows.append([4, 9, 2])
    for i in range(5, n):
        deg = int(rng.integers(0, 5))
        rows.append(rng.permutation([j for j in range(n) if j != i])[:deg].tolist())
    return rows_graph(rows)


def randomize_params(layer, rng, scale=1.0):
    """Give every parameter (biases included, which start at zero) random values."""
    for name, arr in layer.params.items():
        layer.params[name] = scale * rng.standard_normal(arr.shape)


# ---------------------------------------------------------------------- edge features and bipartite input


def general_forward(indptr, indices, x_src, x_dst, params, heads, concat=True, negative_slope=0.2,
                    activation="leaky_relu", root_weight=None, u=None):
    """Reference forward with separate source/target features and edge attributes.

    ``x_src`` (n_src, F_src) feeds ``W_l``, ``x_dst`` (n_dst, F_dst) feeds
    ``W_r`` (``W_l`` if absent), the root weights and the residual; ``u`` (E, D)
    are the attention graph's edge attributes, ``W_e`` (H*C, D) their weights:
    ``z_ij = r_i + x_j + W_e u_ij`` per head. Returns ``(out, alpha, xl3, xr3, ee)``.
    """
    att = params["att"]
    C = att.shape[1]
    n_src, n_dst = x_src.shape[0], x_dst.shape[0]
    xl3 = _project(x_src, params["W_l"], params.get("b_l")).reshape(n_src, heads, C)
    W_r, b_r = (params["W_r"], params.get("b_r")) if "W_r" in params else (params["W_l"], params.get("b_l"))
    xr3 = _project(x_dst, W_r, b_r).reshape(n_dst, heads, C)
    ee = np.zeros((len(indices), heads, C))
    if u is not None and "W_e" in params:
        ee = (u @ params["W_e"].T).reshape(len(indices), heads, C)
    alpha = np.zeros((len(indices), heads))
    per_head = np.zeros((n_dst, heads, C))
    for h in range(heads):
        for i in range(n_dst):
            edges = range(indptr[i], indptr[i + 1])
            if len(edges) == 0:
                continue
            scores = {e: float(att[h] @ act(xr3[i, h] + xl3[indices[e], h] + ee[e, h], activation, negative_slope))
                      for e in edges}
            m = max(scores.values())
            denom = sum(np.exp(v - m) for v in scores.values())
            for e in edges:
                alpha[e, h] = np.exp(scores[e] - m) / denom
                per_head[i, h] += alpha[e, h] * xl3[indices[e], h]
    if root_weight == "theta_r":
        per_head += xr3
    elif root_weight == "theta_n":
        per_head += _project(x_dst, params["W_n"], params.get("b_n")).reshape(n_dst, heads, C)
    out = per_head.reshape(n_dst, heads * C) if concat else per_head.mean(axis=1)
    if "W_res" in params:
        out = out + x_dst @ params["W_res"].T
    if "bias" in params:
        out = out + params["bias"]
    return out, alpha, xl3, xr3, ee


def general_backward(indptr, indices, x_src, x_dst, params, grad_out, heads, concat=True, negative_slope=0.2,
                     activation="leaky_relu", root_weight=None, u=None):
    """Closed-form gradients for :func:`general_forward`, edge by edge.

    Returns every parameter's gradient, ``"x_src"``, ``"x_dst"`` and, with
    ``u``, ``"u"`` (E, D): the gradient of the attention graph's attributes.
    """
    att = params["att"]
    C = att.shape[1]
    n_src, n_dst = x_src.shape[0], x_dst.shape[0]
    _, alpha, xl3, xr3, ee = general_forward(indptr, indices, x_src, x_dst, params, heads, concat,
                                              negative_slope, activation, root_weight, u)
    g3 = head_grads(grad_out, heads, concat)
    P = np.zeros((n_dst, heads, C))
    Q = np.zeros((n_src, heads, C))
    d_att = np.zeros_like(att)
    d_ee = np.zeros_like(ee)
    for h in range(heads):
        for i in range(n_dst):
            edges = list(range(indptr[i], indptr[i + 1]))
            A = {e: g3[i, h] @ xl3[indices[e], h] for e in edges}
            a_bar = sum(alpha[e, h] * A[e] for e in edges)
            for e in edges:
                j = indices[e]
                z = xr3[i, h] + xl3[j, h] + ee[e, h]
                delta = alpha[e, h] * (A[e] - a_bar)
                q = delta * att[h] * act_slope(z, activation, negative_slope)
                P[i, h] += q
                Q[j, h] += q + alpha[e, h] * g3[i, h]
                d_ee[e, h] = q
                d_att[h] += delta * act(z, activation, negative_slope)
    grad_xl = Q.reshape(n_src, heads * C)
    grad_xr = P.reshape(n_dst, heads * C)
    if root_weight == "theta_r":
        grad_xr = grad_xr + g3.reshape(n_dst, heads * C)
    grads = {"att": d_att}
    if "W_r" in params:
        grads["W_l"], grads["W_r"] = grad_xl.T @ x_src, grad_xr.T @ x_dst
        gx_src, gx_dst = grad_xl @ params["W_l"], grad_xr @ params["W_r"]
        if "b_l" in params:
            grads["b_l"], grads["b_r"] = grad_xl.sum(axis=0), grad_xr.sum(axis=0)
    else:
        grads["W_l"] = grad_xl.T @ x_src + grad_xr.T @ x_dst
        gx_src, gx_dst = grad_xl @ params["W_l"], grad_xr @ params["W_l"]
        if "b_l" in params:
            grads["b_l"] = grad_xl.sum(axis=0) + grad_xr.sum(axis=0)
    if root_weight == "theta_n":
        gn = g3.reshape(n_dst, heads * C)
        grads["W_n"] = gn.T @ x_dst
        gx_dst = gx_dst + gn @ params["W_n"]
        if "b_n" in params:
            grads["b_n"] = gn.sum(axis=0)
    if "W_res" in params:
        grads["W_res"] = grad_out.T @ x_dst
        gx_dst = gx_dst + grad_out @ params["W_res"]
    if "bias" in params:
        grads["bias"] = grad_out.sum(axis=0)
    if u is not None and "W_e" in params:
        flat = d_ee.reshape(len(indices), heads * C)
        grads["W_e"] = flat.T @ u
        grads["u"] = flat @ params["W_e"]
    grads["x_src"], grads["x_dst"] = gx_src, gx_dst
    return grads


# ---------------------------------------------------------------------- neighbour sampling


_MASK64 = (1 << 64) - 1


def splitmix(z):
    """SplitMix64's finaliser of ``z + golden ratio``, on Python ints (an independent reimplementation)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def keyed_uniform(key, ident, column):
    """``U(key, ident, column)`` as in gatfast/kernels/random.py."""
    h = splitmix(key ^ splitmix((ident * 0x100000001B3 + column) & _MASK64))
    return (h >> 11) / 2.0**53


def sample_row(indptr, t, fanout, key):
    """Floyd's algorithm: ``fanout`` of target ``t``'s in-edge positions, sorted (all if fewer)."""
    lo, deg = int(indptr[t]), int(indptr[t + 1] - indptr[t])
    if fanout < 0 or deg <= fanout:
        return list(range(lo, lo + deg))
    chosen = []
    for j in range(deg - fanout, deg):
        r = min(int(keyed_uniform(key, t, j) * (j + 1)), j)
        chosen.append(j if r in chosen else r)
    return [lo + c for c in sorted(chosen)]


def sample_blocks(graph, seeds, fanouts, layer_keys):
    """Plain-Python sampler: ``[(src_ids, rows, edge_ids)]`` per layer, input layer first.

    ``rows[r]`` lists the local source ids of target ``r``; ``layer_keys[l]``
    is the uint64 key of layer ``l``.
    """
    targets = [int(s) for s in seeds]
    out = []
    for layer in range(len(fanouts) - 1, -1, -1):
        src_ids = list(targets)
        local = {t: k for k, t in enumerate(targets)}
        rows, edges = [], []
        for t in targets:
            picks = sample_row(graph.indptr, t, fanouts[layer], layer_keys[layer])
            row = []
            for e in picks:
                s = int(graph.indices[e])
                if s not in local:
                    local[s] = len(src_ids)
                    src_ids.append(s)
                row.append(local[s])
            rows.append(row)
            edges += picks
        out.append((src_ids, rows, edges))
        targets = src_ids
    return out[::-1]


def source_major(indices, num_src):
    """Edge ids grouped by source, stably: a stable argsort."""
    indices = np.asarray(indices)
    return np.cumsum(np.r_[0, np.bincount(indices, minlength=num_src)]), np.argsort(indices, kind="stable")


def loop_layout(indptr, indices, num_dst, num_src):
    """PyG's remove-then-add self loops with boolean masks: ``(indptr, indices, kept, loop_slots, looped_kept)``."""
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    loops = min(num_src, num_dst)
    targets = np.repeat(np.arange(num_dst), np.diff(indptr))
    keep = indices != targets
    per_row = np.bincount(targets[keep], minlength=num_dst)
    per_row[:loops] += 1
    new_indptr = np.r_[0, np.cumsum(per_row)]
    loop_slots = new_indptr[1 : loops + 1] - 1
    is_loop = np.zeros(new_indptr[-1], dtype=bool)
    is_loop[loop_slots] = True
    new_indices = np.empty(new_indptr[-1], dtype=np.int64)
    new_indices[~is_loop] = indices[keep]
    new_indices[loop_slots] = np.arange(loops)
    return new_indptr, new_indices, np.flatnonzero(keep), loop_slots, np.flatnonzero(~is_loop)


def keyed_attention_draws(keys, graph, attention, heads, loops_removed):
    """The uniform draws (E_att, heads) behind keyed attention dropout, in the attention graph's order.

    An edge of ``graph`` draws under its global id (``keys.edge_ids``,
    default its position); a self loop the layer adds draws under its
    target's id (``keys.dst_ids``) with the ``LOOPS`` child key; with
    ``loops_removed`` (root weights) the graph's loops are left out and none
    is added. Plain masking and scattering of ``RandomKeys.uniform`` draws.
    """
    from gatfast._random import LOOPS

    edge_ids = np.arange(graph.nnz) if keys.edge_ids is None else np.asarray(keys.edge_ids)
    dst_ids = np.arange(graph.num_dst) if keys.dst_ids is None else np.asarray(keys.dst_ids)
    not_loop = graph.indices != np.repeat(np.arange(graph.num_dst), np.diff(graph.indptr))
    if attention is graph:
        return keys.uniform(edge_ids, heads)
    if loops_removed:
        return keys.uniform(edge_ids[not_loop], heads)
    draw = np.empty((attention.nnz, heads))
    att_targets = np.repeat(np.arange(attention.num_dst), np.diff(attention.indptr))
    att_loop = attention.indices == att_targets
    draw[~att_loop] = keys.uniform(edge_ids[not_loop], heads)  # each row keeps its other edges in order
    loops = np.flatnonzero(att_loop)  # one per target i < min(num_src, num_dst), in row order
    draw[loops] = keys.child(LOOPS).uniform(dst_ids[att_targets[loops]], heads)
    return draw


def records_of(z, alpha, edge_scale, delta):
    """The source records (``kernels/records.py``) of edges whose pre-activations are ``z`` (E, H, C), made in
    NumPy: the weight (times the dropout multiplier) and ``delta`` of each head, then the signs as bits, each
    head's in ``ceil(C / 8)`` bytes, bit ``c mod 8`` of byte ``c // 8``; the padding zero."""
    edges, heads, channels = z.shape
    records = np.zeros((edges, gatfast.kernels.record_bytes(heads, channels, alpha.itemsize)), np.uint8)
    floats = records.view(alpha.dtype)
    floats[:, :heads] = alpha * edge_scale if edge_scale.shape[0] else alpha
    floats[:, heads : 2 * heads] = delta
    bits = np.packbits(z > 0, axis=2, bitorder="little").reshape(edges, -1)
    base = 2 * heads * alpha.itemsize
    records[:, base : base + bits.shape[1]] = bits
    return records


def written_part(records, heads, channels, itemsize):
    """The bytes of each record the target pass writes (not the padding)."""
    return np.ascontiguousarray(records[:, : 2 * heads * itemsize + heads * -(-channels // 8)])
