"""Silent wrong results: overflow in the dtype cast, replaced parameters, infinite norms, one class, blow-up."""

import numpy as np
import pytest

from gatfast import GATv2Layer, NonFiniteError
from gatfast._validate import check_dense, check_features
from gatfast.cli import main
from gatfast.data import load_karate, make_csbm
from gatfast.graph import CSRGraph
from gatfast.models import GATv2Network
from gatfast.optim import SGD, Adam, clip_grad_norm, make_optimizer
from gatfast.training import TrainingDiverged, fit, train
from gatfast.training.loop import BLOWUP_FACTOR, blown_up

pytestmark = pytest.mark.usefixtures("one_numba_thread")


# ---------------------------------------------------------------------- finiteness after the cast
def test_float64_values_beyond_float32_are_refused_not_turned_into_inf():
    big = np.array([[1e39, 1.0]])
    with pytest.raises(NonFiniteError, match=r"x .*outside the range of float32"):
        check_dense(big, "x", (None, 2), np.float32)
    with pytest.raises(NonFiniteError, match=r"x .*outside the range of float32"):
        check_features(big, "x", 1, 2, np.float32)
    import scipy.sparse as sp

    with pytest.raises(NonFiniteError, match=r"x .*outside the range of float32"):
        check_features(sp.csr_array(big), "x", 1, 2, np.float32)
    assert np.array_equal(check_dense(big, "x", (None, 2), np.float64), big)  # fine in float64
    assert big[0, 0] == 1e39  # the input is not modified


def test_layer_refuses_float64_features_that_overflow_float32():
    g = CSRGraph.from_edge_index(np.array([[0, 1], [1, 0]]), 2)
    layer = GATv2Layer(2, 2, seed=0)
    with pytest.raises(NonFiniteError, match="float32"):
        layer.forward(g, np.array([[1e39, 0.0], [0.0, 1.0]]))
    with pytest.raises(NonFiniteError, match="float32"):
        layer.params["W_l"] = np.full((2, 2), 1e300)


# ---------------------------------------------------------------------- a replaced parameter keeps training
@pytest.mark.parametrize("make", [lambda p: Adam(p, lr=0.1), lambda p: SGD(p, lr=0.1, momentum=0.9)])
def test_optimizer_trains_a_parameter_assigned_after_it_was_built(make):
    model = GATv2Network(3, 2, 2, heads=1, seed=0)
    opt = make(model.parameters())
    new = np.full_like(model.layers[0].params["W_l"], 0.25)
    model.layers[0].params["W_l"] = new
    assert model.layers[0].params["W_l"] is opt.params["layers.0.W_l"]  # the same array, new values
    np.testing.assert_array_equal(opt.params["layers.0.W_l"], new)
    grads = {k: np.ones_like(v) for k, v in model.parameters().items()}
    opt.step(grads)
    assert np.all(model.layers[0].params["W_l"] < 0.25)  # the new values were trained
    assert np.all(new == 0.25)  # the caller's array is not touched


# ---------------------------------------------------------------------- clipping an infinite norm
def test_clip_grad_norm_with_an_infinite_norm():
    grads = {"a": np.array([np.inf, 1.0]), "b": np.array([2.0])}
    with pytest.raises(NonFiniteError, match="total norm .* is inf"):
        clip_grad_norm(grads, 1.0)
    np.testing.assert_array_equal(grads["a"], [np.inf, 1.0])  # unchanged, no NaN
    total = clip_grad_norm(grads, 1.0, error_if_nonfinite=False)
    assert total == np.inf
    np.testing.assert_array_equal(grads["a"], [np.inf, 1.0])
    np.testing.assert_array_equal(grads["b"], [2.0])
    nan = {"a": np.array([np.nan])}
    assert np.isnan(clip_grad_norm(nan, 1.0, error_if_nonfinite=False))


def test_clip_grad_norm_of_large_finite_float32_values_is_finite():
    grads = {"a": np.full(1000, 1e30, np.float32)}  # the sum of squares overflows float32
    total = clip_grad_norm(grads, 1.0)
    assert total == pytest.approx(1e30 * np.sqrt(1000), rel=1e-6)
    assert np.all(np.isfinite(grads["a"])) and np.linalg.norm(grads["a"].astype(np.float64)) < 1.0 + 1e-5


def test_torch_raises_the_same_way():
    torch = pytest.importorskip("torch")
    t = torch.tensor([float("inf"), 1.0], requires_grad=True)
    t.grad = torch.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_([t], 1.0, error_if_nonfinite=True)


# ---------------------------------------------------------------------- one class
def test_a_single_class_is_a_clear_error():
    ds = load_karate()
    ds.y[:] = 0
    with pytest.raises(ValueError, match="single class"):
        train(ds, epochs=1, quiet=True)
    ds = load_karate()
    ds.train_mask[:] = ds.y == 1
    with pytest.raises(ValueError, match=r"single class \(1\) among its training labels"):
        train(ds, epochs=1, quiet=True)


# ---------------------------------------------------------------------- a blown-up loss stops training
def test_blown_up_rule():
    assert not blown_up(10.0, first=1.0, constant=0.7)
    assert blown_up(BLOWUP_FACTOR * 1.0 * 1.01, first=1.0, constant=0.7)
    # a near-perfect first epoch does not make the bound tiny: the constant predictor's loss floors it
    assert not blown_up(1.0, first=1e-9, constant=0.69)
    assert blown_up(np.inf, first=1.0, constant=1.0)


def test_huge_learning_rate_stops_with_a_clear_error(tmp_path, capsys):
    with np.errstate(all="ignore"):
        status = main(["train", "--lr", "1e6", "--epochs", "50", "--save", str(tmp_path / "m.npz")])
    err = capsys.readouterr().err
    assert status == 2 and "training diverged at epoch" in err and "blew up" in err, err
    assert not (tmp_path / "m.npz").exists()


def test_normal_training_never_trips_the_blow_up_check():
    ds = make_csbm(num_nodes=100, num_features=8, avg_degree=3, seed=1, train_frac=0.3, val_frac=0.3)
    model = GATv2Network(8, 4, 2, heads=2, seed=0)
    result = fit(model, ds, make_optimizer("adam", model.parameters(), 0.05), epochs=60, quiet=True)
    assert len(result.history) == 60 or result.metrics["best_epoch"] > 0


def test_blow_up_in_regression_uses_the_target_variance():
    from gatfast.data import make_traffic_scenes

    ds = make_traffic_scenes(num_graphs=12, seed=0)
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match="blew up"):
        train(ds, epochs=30, lr=1e4, optimizer="sgd", quiet=True, layers=1, hidden=4, heads=1)
