"""The scikit-learn-style GATv2Classifier."""

import inspect

import numpy as np
import pytest
import scipy.sparse as sp

from gatfast import GATv2Classifier
from gatfast.data import load_karate, make_csbm
from gatfast.training import TrainingDiverged

LEARNED = {"model_", "classes_", "n_features_in_", "history_"}
FAST = dict(hidden=4, heads=2, epochs=30, dropout=0.0, attention_dropout=0.0, lr=0.02)


pytestmark = pytest.mark.usefixtures("one_numba_thread")


@pytest.fixture(scope="module")
def karate():
    return load_karate()


def learned(clf):
    return {k for k in vars(clf) if k.endswith("_") and not k.startswith("_")}


# ---------------------------------------------------------------------- fitting and predicting
def test_defaults_fit_karate(karate):
    clf = GATv2Classifier()
    assert clf.fit(karate.graph, karate.x, karate.y) is clf
    assert clf.score(karate.graph, karate.x, karate.y) == 1.0
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    assert clf.n_features_in_ == 34 and len(clf.history_) == 300
    pred = clf.predict(karate.graph, karate.x)
    assert pred.shape == (34,) and pred.dtype == karate.y.dtype
    proba = clf.predict_proba(karate.graph, karate.x)
    assert proba.shape == (34, 2) and np.all(proba >= 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], pred)


def test_csbm_with_train_and_validation_masks():
    ds = make_csbm(num_nodes=200, num_features=8, avg_degree=3, seed=0, homophily=0.9, feature_signal=2.0)
    clf = GATv2Classifier(hidden=4, heads=2, epochs=100, lr=0.02, seed=0)
    clf.fit(ds.graph, ds.x, ds.y, mask=ds.train_mask, val_mask=ds.val_mask)
    assert clf.score(ds.graph, ds.x, ds.y, mask=ds.test_mask) > 0.9  # chance is 0.5
    assert {"train_accuracy", "val_accuracy"} <= set(clf.history_[0]) and "test_accuracy" not in clf.history_[0]
    # the classifier's parameters are those of the best validation epoch
    best = max(clf.history_, key=lambda r: (r["val_accuracy"], -r["val_loss"]))
    assert clf.score(ds.graph, ds.x, ds.y, mask=ds.val_mask) == pytest.approx(best["val_accuracy"])


def test_string_labels_and_ignored_unlabelled_nodes(karate):
    names = np.array(["Mr. Hi", "Officer"], dtype=object)[karate.y]
    mask = np.zeros(34, bool)
    mask[::2] = True
    y = names.copy()
    y[~mask] = None  # outside the mask labels may be anything
    clf = GATv2Classifier(**FAST).fit(karate.graph, karate.x, y, mask=mask)
    np.testing.assert_array_equal(clf.classes_, ["Mr. Hi", "Officer"])
    pred = clf.predict(karate.graph, karate.x)
    assert set(pred) <= {"Mr. Hi", "Officer"}
    assert clf.score(karate.graph, karate.x, names, mask=mask) == np.mean(pred[mask] == names[mask])
    assert y[1] is None  # the input is not modified


def test_labels_need_not_be_0_to_k():
    ds = make_csbm(num_nodes=60, num_classes=3, num_features=6, avg_degree=2, seed=2, feature_signal=2.0)
    y = np.array([-5, 10, 42])[ds.y]
    clf = GATv2Classifier(**FAST).fit(ds.graph, ds.x, y, mask=ds.train_mask)
    np.testing.assert_array_equal(clf.classes_, [-5, 10, 42])
    assert set(clf.predict(ds.graph, ds.x)) <= {-5, 10, 42}
    assert clf.predict_proba(ds.graph, ds.x).shape == (60, 3)


def test_same_seed_same_predictions_and_sparse_input(karate):
    a = GATv2Classifier(**FAST, seed=3).fit(karate.graph, karate.x, karate.y)
    b = GATv2Classifier(**FAST, seed=3).fit(karate.graph, karate.x, karate.y)
    np.testing.assert_array_equal(a.predict_proba(karate.graph, karate.x), b.predict_proba(karate.graph, karate.x))
    assert a.history_ == b.history_
    c = GATv2Classifier(**FAST, seed=3).fit(karate.graph.to_scipy(), sp.csr_array(karate.x), karate.y)
    np.testing.assert_allclose(c.predict_proba(karate.graph, karate.x), a.predict_proba(karate.graph, karate.x),
                               rtol=1e-5, atol=1e-6)


def test_verbose_prints_progress_and_default_is_silent(karate, capsys):
    GATv2Classifier(**FAST).fit(karate.graph, karate.x, karate.y)
    assert capsys.readouterr().out == ""
    GATv2Classifier(**FAST, verbose=True).fit(karate.graph, karate.x, karate.y)
    assert "epoch" in capsys.readouterr().out


# ---------------------------------------------------------------------- learned state
def test_learned_attributes_end_with_underscore_and_only_exist_after_fit(karate):
    clf = GATv2Classifier(**FAST)
    assert learned(clf) == set()
    params = clf.get_params()
    for method in (clf.predict, clf.predict_proba, clf.decision_function):
        with pytest.raises(ValueError, match="not fitted"):
            method(karate.graph, karate.x)
    with pytest.raises(ValueError, match="not fitted"):
        clf.score(karate.graph, karate.x, karate.y)
    clf.fit(karate.graph, karate.x, karate.y)
    assert learned(clf) == LEARNED
    assert clf.get_params() == params  # fit does not touch the hyperparameters
    assert {k for k in vars(clf) if not k.endswith("_")} == set(params)


def test_failed_refit_keeps_the_previous_state(karate):
    names = np.array(["a", "b"])[karate.y]
    clf = GATv2Classifier(**FAST).fit(karate.graph, karate.x, names)
    before = clf.predict(karate.graph, karate.x)
    model = clf.model_
    with pytest.raises(ValueError, match="two classes"):
        clf.fit(karate.graph, karate.x, np.zeros(34, int))
    clf.set_params(lr=1e30)
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match="epoch"):
        clf.fit(karate.graph, karate.x, karate.y)
    assert clf.model_ is model and list(clf.classes_) == ["a", "b"]
    np.testing.assert_array_equal(clf.predict(karate.graph, karate.x), before)


# ---------------------------------------------------------------------- bad input
def test_bad_shapes_and_masks(karate):
    g, x, y = karate.graph, karate.x, karate.y
    clf = GATv2Classifier(**FAST)
    with pytest.raises(ValueError, match=r"y must have shape \(34,\)"):
        clf.fit(g, x, y[:30])
    with pytest.raises(ValueError, match=r"y must have shape \(34,\)"):
        clf.fit(g, x, y.reshape(34, 1))
    with pytest.raises(ValueError, match=r"mask must be a boolean array of shape \(34,\)"):
        clf.fit(g, x, y, mask=np.ones(33, bool))
    with pytest.raises(ValueError, match="mask must be a boolean array"):
        clf.fit(g, x, y, mask=np.ones(34, int))
    with pytest.raises(ValueError, match="val_mask"):
        clf.fit(g, x, y, val_mask=np.ones(35, bool))
    with pytest.raises(ValueError, match="mask must select at least one node"):
        clf.fit(g, x, y, mask=np.zeros(34, bool))
    with pytest.raises(ValueError, match="x must"):
        clf.fit(g, x[:30], y)
    with pytest.raises(ValueError, match="x must be 2-D"):
        clf.fit(g, x[:, 0], y)
    with pytest.raises(ValueError, match="optimizer"):
        GATv2Classifier(**{**FAST, "optimizer": "foo"}).fit(g, x, y)
    assert learned(clf) == set()
    clf.fit(g, x, y)
    with pytest.raises(ValueError, match="in_features = 34"):
        clf.predict(g, x[:, :10])
    with pytest.raises(ValueError, match=r"y must have shape \(34,\)"):
        clf.score(g, x, y[:10])


# ---------------------------------------------------------------------- hyperparameters
def test_get_and_set_params():
    clf = GATv2Classifier(hidden=3, lr=0.1)
    params = clf.get_params()
    assert set(params) == set(inspect.signature(GATv2Classifier).parameters)
    assert params["hidden"] == 3 and params["lr"] == 0.1 and params["heads"] == 8
    assert GATv2Classifier(**params).get_params() == params  # what sklearn.base.clone does
    assert clf.set_params(heads=2, epochs=5) is clf
    assert clf.get_params()["heads"] == 2 and clf.epochs == 5
    with pytest.raises(ValueError, match="invalid parameter 'colour'"):
        clf.set_params(colour="red")
