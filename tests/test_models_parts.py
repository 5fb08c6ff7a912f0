"""Tests for the models floor (activations, dropout, losses, pooling, Linear): finite differences in float64, torch cross-checks, bad input."""

import numpy as np
import pytest
import scipy.sparse as sp

from gatfast._validate import check_graph_ptr
from gatfast.models import (
    ACTIVATIONS,
    Linear,
    accuracy,
    activation_backward,
    activation_forward,
    apply_dropout,
    dropout_backward,
    dropout_mask,
    global_pool,
    global_pool_backward,
    mse_loss,
    softmax_cross_entropy,
)


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar f() with respect to the array x (perturbed in place)."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        fp = f()
        x[i] = old - eps
        fm = f()
        x[i] = old
        g[i] = (fp - fm) / (2 * eps)
    return g


def away_from_zero(rng, shape, margin=1e-2):
    x = rng.normal(size=shape)
    return np.where(np.abs(x) < margin, margin * np.sign(x) + margin * (x == 0), x)


# ---------------------------------------------------------------------- activations
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_gradient_matches_finite_differences(name):
    rng = np.random.default_rng(0)
    x = away_from_zero(rng, (5, 4)) * 2
    r = rng.normal(size=x.shape)
    y = activation_forward(name, x)
    grad = activation_backward(name, x, y, r)
    num = numeric_grad(lambda: np.sum(r * activation_forward(name, x)), x)
    np.testing.assert_allclose(grad, num, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_keeps_dtype_and_input(name):
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    x0 = x.copy()
    y = activation_forward(name, x)
    assert y.dtype == np.float32
    g = activation_backward(name, x, y, np.ones_like(y))
    assert g.dtype == np.float32
    np.testing.assert_array_equal(x, x0)
    assert y is not x


def test_relu_and_identity_values():
    x = np.array([[-2.0, -0.5, 0.0, 0.5, 2.0]])
    np.testing.assert_array_equal(activation_forward("relu", x), np.maximum(x, 0))
    np.testing.assert_array_equal(activation_forward("identity", x), x)


def test_elu_large_inputs_do_not_overflow():
    x = np.array([-1e4, -50.0, 1e4, 700.0, 800.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = activation_forward("elu", x)
        g = activation_backward("elu", x, y, np.ones_like(x))
    np.testing.assert_array_equal(y[2:], x[2:])
    assert y[0] == -1.0
    np.testing.assert_array_equal(g[2:], 1.0)


def test_elu_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 5)) * 3
    r = rng.normal(size=x.shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.elu(xt)
    (yt * torch.tensor(r)).sum().backward()
    y = activation_forward("elu", x)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(activation_backward("elu", x, y, r), xt.grad.numpy(), rtol=1e-14, atol=1e-15)


def test_activation_bad_input():
    x = np.ones((2, 2))
    with pytest.raises(ValueError, match="name must be one of"):
        activation_forward("gelu", x)
    with pytest.raises(TypeError, match="x must have a floating-point dtype"):
        activation_forward("elu", np.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="x must be finite"):
        activation_forward("relu", np.array([np.nan]))
    with pytest.raises(TypeError, match="x must be a dense array"):
        activation_forward("relu", sp.csr_array(x))
    with pytest.raises(ValueError, match="grad_y must have the shape of x"):
        activation_backward("elu", x, x, np.ones((2, 3)))
    with pytest.raises(ValueError, match="y must have the shape of x"):
        activation_backward("elu", x, np.ones(4), x)


# ---------------------------------------------------------------------- dropout
def test_dropout_mask_values_and_rate():
    rng = np.random.default_rng(0)
    m = dropout_mask(rng, (400, 50), 0.6, np.float32)
    assert m.dtype == np.float32 and m.shape == (400, 50)
    assert set(np.unique(m).tolist()) == {0.0, np.float32(1 / 0.4)}
    assert abs((m == 0).mean() - 0.6) < 0.02
    # the same seed reproduces the same mask; the keep rule is random() >= p
    again = dropout_mask(np.random.default_rng(0), (400, 50), 0.6, np.float32)
    np.testing.assert_array_equal(m, again)
    ref = np.random.default_rng(0).random((400, 50)) >= 0.6
    np.testing.assert_array_equal(m != 0, ref)


def test_dropout_mask_p_zero_is_ones_and_does_not_advance_rng():
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    m = dropout_mask(rng, 7, 0.0, np.float64)
    np.testing.assert_array_equal(m, np.ones(7))
    assert rng.bit_generator.state == state


def test_apply_dropout_dense():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 6))
    x0 = x.copy()
    y, mask = apply_dropout(x, 0.5, np.random.default_rng(5))
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, x * mask)
    assert (mask == 0).any() and (mask == 2.0).any()
    g = rng.normal(size=x.shape)
    np.testing.assert_array_equal(dropout_backward(g, mask), g * mask)
    y0, m0 = apply_dropout(x, 0.0, rng)
    np.testing.assert_array_equal(y0, x)
    np.testing.assert_array_equal(m0, np.ones_like(x))


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
def test_apply_dropout_sparse_masks_stored_values_only(fmt):
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(30, 40)) * (rng.random((30, 40)) < 0.1)
    x = getattr(sp, f"{fmt}_array")(dense)
    data0 = x.data.copy()
    y, mask = apply_dropout(x, 0.4, np.random.default_rng(2))
    assert sp.issparse(y)
    assert mask.shape == (y.nnz,)
    np.testing.assert_array_equal(x.data, data0)  # input untouched
    csr = sp.csr_array(x)
    np.testing.assert_array_equal(y.indptr, csr.indptr)
    np.testing.assert_array_equal(y.indices, csr.indices)
    np.testing.assert_array_equal(y.data, csr.data * mask)
    assert (mask == 0).any()
    # the dropped matrix equals the dense input times a mask that is zero off the pattern
    full = np.zeros(dense.shape)
    full[csr.nonzero()] = mask
    np.testing.assert_allclose(y.toarray(), dense * full)


def test_dropout_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="p must be < 1"):
        dropout_mask(rng, 3, 1.0, np.float32)
    with pytest.raises(ValueError, match="p must be >= 0"):
        apply_dropout(np.ones(3), -0.1, rng)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        dropout_mask(0, 3, 0.5, np.float32)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        apply_dropout(np.ones(3), 0.5, np.random.RandomState(0))
    with pytest.raises(TypeError, match="shape must be an int or a tuple"):
        dropout_mask(rng, [3, 2], 0.5, np.float32)
    with pytest.raises(ValueError, match=r"shape\[1\] must be >= 0"):
        dropout_mask(rng, (3, -2), 0.5, np.float32)
    with pytest.raises(TypeError, match="dtype must be numpy.float32 or numpy.float64"):
        dropout_mask(rng, 3, 0.5, np.int32)
    with pytest.raises(TypeError, match="x must have a floating-point dtype"):
        apply_dropout(np.ones(3, dtype=int), 0.5, rng)
    with pytest.raises(ValueError, match="x must be finite"):
        apply_dropout(sp.csr_array(np.array([[np.inf, 0.0]])), 0.5, rng)
    with pytest.raises(ValueError, match="mask must have the shape of grad_y"):
        dropout_backward(np.ones(3), np.ones(4))


# ---------------------------------------------------------------------- losses
def test_cross_entropy_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(9, 4)) * 2
    y = rng.integers(0, 4, 9)
    mask = rng.random(9) < 0.6
    mask[0] = True
    loss, grad = softmax_cross_entropy(logits, y, mask)
    num = numeric_grad(lambda: softmax_cross_entropy(logits, y, mask)[0], logits)
    np.testing.assert_allclose(grad, num, rtol=1e-7, atol=1e-10)
    assert np.all(grad[~mask] == 0)
    # integer indices select the same rows
    loss_i, grad_i = softmax_cross_entropy(logits, y, np.flatnonzero(mask))
    assert loss_i == loss
    np.testing.assert_array_equal(grad_i, grad)


@pytest.mark.parametrize("use_mask", [False, True])
def test_cross_entropy_matches_torch(use_mask):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(12, 5)) * 4
    y = rng.integers(0, 5, 12)
    mask = rng.random(12) < 0.5 if use_mask else np.ones(12, bool)
    mask[3] = True
    y_masked = np.where(mask, y, -1)  # labels outside the mask are ignored
    loss, grad = softmax_cross_entropy(logits, y_masked, mask if use_mask else None)
    lt = torch.tensor(logits, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(lt[torch.tensor(mask)], torch.tensor(y[mask]))
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-14)
    np.testing.assert_allclose(grad, lt.grad.numpy(), rtol=1e-12, atol=1e-16)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1e4, 0.0, -1e4], [5e3, 5e3 + 1.0, 0.0]], dtype=np.float32)
    y = np.array([1, 1])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss, grad = softmax_cross_entropy(logits, y)
    shifted = logits - logits.max(axis=1, keepdims=True)
    ref, ref_grad = softmax_cross_entropy(shifted.astype(np.float64), y)
    assert np.isfinite(loss) and grad.dtype == np.float32
    assert loss == pytest.approx(ref, rel=1e-6)
    np.testing.assert_allclose(grad, ref_grad, atol=1e-7)


def test_mse_gradient_and_torch():
    rng = np.random.default_rng(2)
    pred = rng.normal(size=(7, 3))
    target = rng.normal(size=(7, 3))
    rows = np.array([0, 2, 3, 6])
    elems = rng.random((7, 3)) < 0.5
    for mask in (None, rows, elems):
        loss, grad = mse_loss(pred, target, mask)
        num = numeric_grad(lambda m=mask: mse_loss(pred, target, m)[0], pred)
        np.testing.assert_allclose(grad, num, rtol=1e-7, atol=1e-10)
    big = np.random.default_rng(5).normal(size=(2, 1000, 37))
    for dtype, order in ((np.float32, "C"), (np.float64, "C"), (np.float32, "F"), (np.float64, "F")):
        # no mask: the same bits as a mask that selects everything (Fortran order too: the sum's order)
        p, t = np.array(big[0] * 1e3, dtype, order=order), np.array(big[1], dtype, order=order)
        p[0, 0] = -0.0
        t[0, 0] = 0.0
        for reduction in ("mean", "sum"):
            loss, grad = mse_loss(p, t, reduction=reduction)
            want_loss, want_grad = mse_loss(p, t, np.ones(p.shape, bool), reduction=reduction)
            assert loss == want_loss and grad.dtype == want_grad.dtype == dtype
            assert grad.tobytes() == want_grad.tobytes()
    with pytest.raises(ValueError, match="at least one element"):
        mse_loss(np.zeros((0, 3)), np.zeros((0, 3)))
    torch = pytest.importorskip("torch")
    loss, _ = mse_loss(pred, target, rows)
    ref = torch.nn.functional.mse_loss(torch.tensor(pred[rows]), torch.tensor(target[rows]))
    assert loss == pytest.approx(ref.item(), rel=1e-14)
    loss, _ = mse_loss(pred, target, elems)
    ref = torch.nn.functional.mse_loss(torch.tensor(pred[elems]), torch.tensor(target[elems]))
    assert loss == pytest.approx(ref.item(), rel=1e-14)


def test_accuracy_counts_argmax_hits():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(50, 4))
    y = rng.integers(0, 4, 50)
    hits = np.argmax(logits, axis=1) == y
    assert accuracy(logits, y) == pytest.approx(hits.mean())
    mask = rng.random(50) < 0.5
    assert accuracy(logits, y, mask) == pytest.approx(hits[mask].mean())
    # a row of ties counts as its first class
    assert accuracy(np.zeros((2, 3)), np.array([0, 1])) == 0.5


def test_loss_bad_input():
    logits = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"y must lie in \[0, num_classes=2\)"):
        softmax_cross_entropy(logits, np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="y must be an integer array"):
        softmax_cross_entropy(logits, np.array([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match=r"y must have shape \(3,\)"):
        softmax_cross_entropy(logits, np.array([0, 1]))
    with pytest.raises(ValueError, match="logits must be 2-D"):
        softmax_cross_entropy(np.zeros(3), np.array([0, 1, 0]))
    with pytest.raises(ValueError, match="mask must select at least one row"):
        softmax_cross_entropy(logits, np.array([0, 1, 0]), np.zeros(3, bool))
    with pytest.raises(ValueError, match=r"mask must be a boolean array of shape \(3,\)"):
        softmax_cross_entropy(logits, np.array([0, 1, 0]), np.ones(4, bool))
    with pytest.raises(ValueError, match="mask indices must be unique"):
        softmax_cross_entropy(logits, np.array([0, 1, 0]), np.array([1, 1]))
    with pytest.raises(ValueError, match=r"mask indices must lie in \[0, 3\)"):
        softmax_cross_entropy(logits, np.array([0, 1, 0]), np.array([3]))
    with pytest.raises(TypeError, match="mask must be a boolean mask or an integer index array"):
        softmax_cross_entropy(logits, np.array([0, 1, 0]), np.array([0.5]))
    with pytest.raises(ValueError, match="logits must be finite"):
        softmax_cross_entropy(np.array([[np.nan, 0.0]]), np.array([0]))
    with pytest.raises(ValueError, match="target must have the shape of pred"):
        mse_loss(np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="mask must select at least one element"):
        mse_loss(np.zeros((3, 2)), np.zeros((3, 2)), np.zeros((3, 2), bool))
    with pytest.raises(ValueError, match="mask must select at least one row"):
        accuracy(logits, np.array([0, 1, 0]), np.array([], dtype=np.int64))


# ---------------------------------------------------------------------- readout
PTR = np.array([0, 3, 3, 7, 8])  # graph 1 is empty


@pytest.mark.parametrize("mode", ["mean", "sum", "max"])
def test_global_pool_gradient_matches_finite_differences(mode):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3))
    r = rng.normal(size=(4, 3))
    pooled, cache = global_pool(x, PTR, mode)
    assert pooled.shape == (4, 3)
    np.testing.assert_array_equal(pooled[1], 0.0)
    grad = global_pool_backward(r, cache)
    num = numeric_grad(lambda: np.sum(r * global_pool(x, PTR, mode)[0]), x)
    np.testing.assert_allclose(grad, num, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("mode", ["mean", "sum", "max"])
def test_global_pool_matches_reference(mode):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 5)).astype(np.float32)
    pooled, _ = global_pool(x, PTR, mode)
    assert pooled.dtype == np.float32
    reduce = {"mean": np.mean, "sum": np.sum, "max": np.max}[mode]
    for g in range(4):
        rows = x[PTR[g] : PTR[g + 1]]
        ref = reduce(rows, axis=0) if len(rows) else np.zeros(5)
        np.testing.assert_allclose(pooled[g], ref, rtol=1e-6)


@pytest.mark.parametrize("mode", ["mean", "sum", "max"])
def test_global_pool_matches_pyg(mode):
    torch = pytest.importorskip("torch")
    pyg_pool = pytest.importorskip("torch_geometric.nn.pool")
    rng = np.random.default_rng(2)
    ptr = np.array([0, 4, 5, 9])
    x = rng.normal(size=(9, 3))
    batch = torch.tensor(np.repeat(np.arange(3), np.diff(ptr)))
    fn = getattr(pyg_pool, f"global_{'add' if mode == 'sum' else mode}_pool")
    ref = fn(torch.tensor(x), batch).numpy()
    np.testing.assert_allclose(global_pool(x, ptr, mode)[0], ref, rtol=1e-14)


def test_global_max_pool_gradient_goes_to_first_argmax():
    x = np.array([[1.0, 5.0], [3.0, 5.0], [3.0, 2.0], [0.0, -1.0]])
    ptr = np.array([0, 3, 4])
    pooled, cache = global_pool(x, ptr, "max")
    np.testing.assert_array_equal(pooled, [[3.0, 5.0], [0.0, -1.0]])
    grad = global_pool_backward(np.array([[10.0, 20.0], [30.0, 40.0]]), cache)
    np.testing.assert_array_equal(grad, [[0.0, 20.0], [10.0, 0.0], [0.0, 0.0], [30.0, 40.0]])


def test_global_pool_bad_input():
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="mode must be one of"):
        global_pool(x, np.array([0, 4]), "min")
    with pytest.raises(ValueError, match="graph_ptr must end at num_nodes = 4"):
        global_pool(x, np.array([0, 3]), "sum")
    with pytest.raises(ValueError, match="graph_ptr must start at 0"):
        global_pool(x, np.array([1, 4]), "sum")
    with pytest.raises(ValueError, match="graph_ptr must be non-decreasing"):
        global_pool(x, np.array([0, 3, 2, 4]), "sum")
    with pytest.raises(TypeError, match="graph_ptr must be an integer array"):
        global_pool(x, np.array([0.0, 4.0]), "sum")
    with pytest.raises(ValueError, match="graph_ptr must be 1-D"):
        check_graph_ptr(np.array([0]), 0)
    with pytest.raises(ValueError, match="x must be 2-D"):
        global_pool(np.zeros(4), np.array([0, 4]), "sum")
    _, cache = global_pool(x, np.array([0, 2, 4]), "max")
    with pytest.raises(ValueError, match=r"grad_pooled must have shape \(2, 2\)"):
        global_pool_backward(np.zeros((3, 2)), cache)
    with pytest.raises(TypeError, match="cache must be the PoolCache"):
        global_pool_backward(np.zeros((2, 2)), {})


# ---------------------------------------------------------------------- linear
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradient_matches_finite_differences(bias):
    rng = np.random.default_rng(0)
    lin = Linear(4, 3, bias=bias, dtype=np.float64, seed=0)
    if bias:
        lin.params["bias"][:] = rng.normal(size=3)
    x = rng.normal(size=(6, 4))
    r = rng.normal(size=(6, 3))
    y, cache = lin.forward(x)
    grads = lin.backward(cache, r)
    assert set(grads) == set(lin.params) | {"x"}
    for name, arr in list(lin.params.items()) + [("x", x)]:
        num = numeric_grad(lambda: np.sum(r * lin.forward(x)[0]), arr)
        np.testing.assert_allclose(grads[name], num, rtol=1e-7, atol=1e-10, err_msg=name)


def test_linear_sparse_input_matches_dense_and_init():
    rng = np.random.default_rng(1)
    lin = Linear(10, 5, seed=3)
    bound = np.sqrt(6 / 15)
    assert np.all(np.abs(lin.params["weight"]) <= bound) and lin.params["weight"].std() > 0
    np.testing.assert_array_equal(lin.params["bias"], 0)
    np.testing.assert_array_equal(Linear(10, 5, seed=3).params["weight"], lin.params["weight"])
    dense = (rng.normal(size=(8, 10)) * (rng.random((8, 10)) < 0.3)).astype(np.float32)
    y_d, c_d = lin.forward(dense)
    y_s, c_s = lin.forward(sp.csr_array(dense))
    np.testing.assert_allclose(y_s, y_d, rtol=1e-6, atol=1e-6)
    g = rng.normal(size=(8, 5)).astype(np.float32)
    gd, gs = lin.backward(c_d, g), lin.backward(c_s, g)
    np.testing.assert_allclose(gs["weight"], gd["weight"], rtol=1e-5, atol=1e-6)
    assert gs["x"] is None and gd["x"].shape == (8, 10)


def test_linear_bad_input():
    with pytest.raises(ValueError, match="in_features must be >= 1"):
        Linear(0, 3)
    with pytest.raises(TypeError, match="dtype must be numpy.float32 or numpy.float64"):
        Linear(2, 3, dtype=np.int64)
    lin = Linear(2, 3)
    with pytest.raises(ValueError, match="x must have in_features = 2 columns"):
        lin.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="x must be 2-D"):
        lin.forward(np.zeros(4))
    _, cache = lin.forward(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"grad must have shape \(4, 3\)"):
        lin.backward(cache, np.zeros((4, 2)))
    with pytest.raises(TypeError, match="cache must be the LinearCache"):
        lin.backward(None, np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"params\['weight'\] must have shape"):
        lin.params["weight"] = np.zeros((2, 3))


@pytest.mark.parametrize("name", ["elu", "relu", "identity"])
def test_check_finite_false_skips_only_the_nan_check(name):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 9)).astype(np.float32)
    g = rng.standard_normal((5, 9)).astype(np.float32)
    y = activation_forward(name, x)
    assert activation_forward(name, x, check_finite=False).tobytes() == y.tobytes()
    want = activation_backward(name, x, y, g)
    assert activation_backward(name, x, y, g, check_finite=False).tobytes() == want.tobytes()
    bad = x.copy()
    bad[4, 8] = np.nan
    with pytest.raises(ValueError, match="x must be finite"):
        activation_forward(name, bad)
    with pytest.raises(ValueError, match="grad_y must be finite"):
        activation_backward(name, x, y, np.where(x > 0, np.inf, g))
    assert np.isnan(activation_forward(name, bad, check_finite=False)[4, 8])  # passed through, not refused
    with pytest.raises(TypeError, match="floating-point"):  # the other checks stay
        activation_forward(name, x.astype(np.int64), check_finite=False)


def test_apply_dropout_check_finite_false_gives_the_same_result():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 4))
    for given in (x, sp.csr_array(x * (x > 0))):
        y, m = apply_dropout(given, 0.5, np.random.default_rng(2))
        y2, m2 = apply_dropout(given, 0.5, np.random.default_rng(2), check_finite=False)
        assert np.array_equal(m, m2)
        assert np.array_equal(y.toarray() if sp.issparse(y) else y, y2.toarray() if sp.issparse(y2) else y2)
    bad = x.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="x must be finite"):
        apply_dropout(bad, 0.5, np.random.default_rng(2))
    with pytest.raises(ValueError, match="x must be finite"):
        apply_dropout(sp.csr_array(bad), 0.5, np.random.default_rng(2))
    with pytest.raises(ValueError, match="p must be"):
        apply_dropout(x, 1.5, np.random.default_rng(2), check_finite=False)
