"""GATv2Classifier: node ids as X, the graph as parameters; the deprecated whole-graph calls."""

import inspect
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("sklearn")
from sklearn.exceptions import NotFittedError  # noqa: E402

from gatfast import GATv2Classifier, TrainConfig  # noqa: E402
from gatfast.data import load_karate, make_csbm  # noqa: E402
from gatfast.training import TrainingDiverged  # noqa: E402

LEARNED = {"model_", "classes_", "n_features_in_", "history_", "n_iter_", "best_epoch_", "config_"}
FAST = dict(hidden=4, heads=2, epochs=30, dropout=0.0, attention_dropout=0.0, lr=0.02)
NODES = np.arange(34).reshape(-1, 1)

pytestmark = pytest.mark.usefixtures("one_numba_thread")


@pytest.fixture(scope="module")
def karate():
    return load_karate()


def make(karate, **params):
    return GATv2Classifier(**{"graph": karate.graph, "node_features": karate.x, **FAST, **params})


def learned(clf):
    return {k for k in vars(clf) if k.endswith("_") and not k.startswith("_")}


# ---------------------------------------------------------------------- fitting and predicting
def test_defaults_fit_karate(karate):
    clf = GATv2Classifier(graph=karate.graph, node_features=karate.x)
    assert clf.fit(NODES, karate.y) is clf
    assert clf.score(NODES, karate.y) > 0.95  # 2 of the 34 nodes were held out for validation
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    assert clf.n_features_in_ == 1 and clf.n_iter_ == len(clf.history_) == 300
    pred = clf.predict(NODES)
    assert pred.shape == (34,) and pred.dtype == karate.y.dtype
    proba = clf.predict_proba(NODES.ravel())  # 1-D ids work too
    assert proba.shape == (34, 2) and np.all(proba >= 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], pred)
    # two classes: decision_function is the logit difference, positive for classes_[1]
    scores = clf.decision_function(NODES)
    assert scores.shape == (34,)
    np.testing.assert_array_equal(clf.classes_[(scores > 0).astype(int)], pred)
    # the default holds out 10 % of each class for model selection
    assert clf.config_ == TrainConfig(quiet=True) and "val_accuracy" in clf.history_[0]


def test_csbm_node_split_and_validation_fraction():
    ds = make_csbm(num_nodes=200, num_features=8, avg_degree=3, seed=0, homophily=0.9, feature_signal=2.0)
    train, test = np.flatnonzero(ds.train_mask | ds.val_mask), np.flatnonzero(ds.test_mask)
    clf = GATv2Classifier(graph=ds.graph, node_features=ds.x, hidden=4, heads=2, epochs=100, lr=0.02)
    clf.fit(train, ds.y[train])
    assert clf.score(test, ds.y[test]) > 0.9  # chance is 0.5
    # the parameters are those of the best validation epoch
    best = max(clf.history_, key=lambda r: (r["val_accuracy"], -r["val_loss"]))
    assert clf.best_epoch_ == best["epoch"] and "test_accuracy" not in clf.history_[0]
    # no validation split: selection on the training nodes
    clf.set_params(validation_fraction=None).fit(train, ds.y[train])
    assert "val_accuracy" not in clf.history_[0]


def test_string_labels_and_unlabelled_nodes_stay_out(karate):
    names = np.array(["Mr. Hi", "Officer"], dtype=object)[karate.y]
    X = NODES[::2]
    clf = make(karate).fit(X, names[::2])
    np.testing.assert_array_equal(clf.classes_, ["Mr. Hi", "Officer"])
    pred = clf.predict(NODES[1::2])
    assert set(pred) <= {"Mr. Hi", "Officer"}
    assert clf.score(NODES[1::2], names[1::2]) == np.mean(pred == names[1::2])


def test_labels_need_not_be_0_to_k_and_multiclass_scores_are_logits():
    ds = make_csbm(num_nodes=60, num_classes=3, num_features=6, avg_degree=2, seed=2, feature_signal=2.0)
    y = np.array([-5, 10, 42])[ds.y]
    ids = np.flatnonzero(ds.train_mask)
    clf = GATv2Classifier(graph=ds.graph, node_features=ds.x, **FAST).fit(ids, y[ids])
    np.testing.assert_array_equal(clf.classes_, [-5, 10, 42])
    assert set(clf.predict(np.arange(60))) <= {-5, 10, 42}
    assert clf.predict_proba(np.arange(60)).shape == clf.decision_function(np.arange(60)).shape == (60, 3)


def test_same_seed_same_predictions_and_sparse_input(karate):
    a = make(karate, seed=3).fit(NODES, karate.y)
    b = make(karate, seed=3).fit(NODES, karate.y)
    np.testing.assert_array_equal(a.predict_proba(NODES), b.predict_proba(NODES))
    assert a.history_ == b.history_
    c = GATv2Classifier(graph=karate.graph.to_scipy(), node_features=sp.csr_array(karate.x), seed=3, **FAST)
    c.fit(NODES, karate.y)
    np.testing.assert_allclose(c.predict_proba(NODES), a.predict_proba(NODES), rtol=1e-5, atol=1e-6)


def test_predictions_do_not_depend_on_which_or_how_many_nodes_are_asked(karate):
    clf = make(karate).fit(NODES[::2], karate.y[::2])
    full = clf.predict_proba(NODES)
    order = np.random.default_rng(0).permutation(34)
    np.testing.assert_array_equal(clf.predict_proba(NODES[order]), full[order])
    np.testing.assert_array_equal(clf.predict_proba(NODES[5:9]), full[5:9])
    for ids in (NODES.astype(np.int32), NODES.astype(float), np.asfortranarray(NODES), NODES.tolist()):
        np.testing.assert_array_equal(clf.predict_proba(ids), full)
    readonly = NODES.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(clf.predict_proba(readonly), full)


def test_fit_is_idempotent_and_leaves_inputs_and_parameters_alone(karate):
    x = karate.x.copy()
    X, y = NODES[::2].copy(), karate.y[::2].copy()
    clf = GATv2Classifier(graph=karate.graph, node_features=x, **FAST)
    params = clf.get_params()
    first = clf.fit(X, y).predict_proba(NODES)
    state = dict(vars(clf))
    clf.predict(NODES), clf.predict_proba(NODES), clf.decision_function(NODES), clf.score(X, y)
    assert set(vars(clf)) == set(state) and all(vars(clf)[k] is v for k, v in state.items())
    np.testing.assert_array_equal(clf.fit(X, y).predict_proba(NODES), first)
    assert clf.get_params() == params and clf.get_params()["node_features"] is x
    np.testing.assert_array_equal(x, karate.x)
    np.testing.assert_array_equal(X, NODES[::2])
    np.testing.assert_array_equal(y, karate.y[::2])


def test_repeated_nodes_with_one_label_are_allowed(karate):
    boot = np.random.default_rng(1).integers(0, 34, 34)
    clf = make(karate).fit(boot, karate.y[boot])
    assert clf.predict(NODES).shape == (34,)
    y = karate.y[[0, 0, 1, 2]].copy()
    y[1] = 1 - y[0]
    with pytest.raises(ValueError, match="node 0 more than once with different labels"):
        make(karate).fit([0, 0, 1, 2], y)


def test_edge_features(karate):
    attr = np.random.default_rng(0).normal(size=(karate.graph.nnz, 3)).astype(np.float32)
    clf = make(karate, edge_attr=attr).fit(NODES[::2], karate.y[::2])
    assert clf.model_.edge_dim == 3
    assert 0.0 <= clf.score(NODES[1::2], karate.y[1::2]) <= 1.0
    with pytest.raises(TypeError, match="graph must be a CSRGraph when edge_attr is given"):
        GATv2Classifier(graph=karate.graph.to_scipy(), node_features=karate.x, edge_attr=attr).fit(NODES, karate.y)
    with pytest.raises(ValueError, match=r"edge_attr must have shape \(156, \*\)"):
        make(karate, edge_attr=attr[:10]).fit(NODES, karate.y)


def test_verbose_prints_progress_and_default_is_silent(karate, capsys):
    make(karate).fit(NODES, karate.y)
    assert capsys.readouterr().out == ""
    make(karate, verbose=True).fit(NODES, karate.y)
    assert "epoch" in capsys.readouterr().out


# ---------------------------------------------------------------------- learned state
def test_learned_attributes_end_with_underscore_and_only_exist_after_fit(karate):
    clf = make(karate)
    assert learned(clf) == set()
    for method in (clf.predict, clf.predict_proba, clf.decision_function):
        with pytest.raises(NotFittedError, match="not fitted"):
            method(NODES)
    with pytest.raises(NotFittedError, match="not fitted"):
        clf.score(NODES, karate.y)
    clf.fit(NODES, karate.y)
    assert learned(clf) == LEARNED
    assert {k for k in vars(clf) if not k.endswith("_")} == set(clf.get_params())


def test_failed_refit_keeps_the_previous_state(karate):
    names = np.array(["a", "b"])[karate.y]
    clf = make(karate).fit(NODES, names)
    before = clf.predict(NODES)
    model = clf.model_
    with pytest.raises(ValueError, match="two classes"):
        clf.fit(NODES, np.zeros(34, int))
    clf.set_params(lr=1e30)
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match="epoch"):
        clf.fit(NODES, karate.y)
    assert clf.model_ is model and list(clf.classes_) == ["a", "b"]
    np.testing.assert_array_equal(clf.predict(NODES), before)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "X, y, exc, fragment",
    [
        (NODES[:30], "y34", ValueError, "inconsistent numbers of samples"),
        (np.c_[NODES, NODES], "y34", ValueError, "X has 2 features, but GATv2Classifier is expecting 1"),
        (NODES + 0.5, "y34", ValueError, "integer node ids.*node_features"),
        (NODES + 1, "y34", ValueError, "node id 34 but the graph has 34 nodes"),
        (NODES - 1, "y34", ValueError, "Negative values"),
        (np.full((34, 1), np.nan), "y34", ValueError, "NaN"),
        (sp.csr_array(NODES), "y34", TypeError, "sparse"),
        (np.array([["a"]] * 34), "y34", TypeError, "dtype <U1"),
        (NODES, None, ValueError, "requires y"),
        (NODES, np.linspace(0, 1, 34), ValueError, "Unknown label type"),
    ],
)
def test_bad_node_ids_and_labels(karate, X, y, exc, fragment):
    y = karate.y if isinstance(y, str) else y
    clf = make(karate)
    with pytest.raises(exc, match=fragment):
        clf.fit(X, y)
    assert learned(clf) == set()


@pytest.mark.parametrize(
    "params, exc, fragment",
    [
        (dict(graph=None), ValueError, "needs the graph= and node_features= parameters"),
        (dict(node_features=np.ones((30, 4))), ValueError, "node_features must have one row per node"),
        (dict(graph=np.eye(34)), TypeError, "graph must be a gatfast.CSRGraph"),
        (dict(optimizer="foo"), ValueError, "optimizer"),
        (dict(lr="fast"), TypeError, "lr must be a number"),
        (dict(layers=0), ValueError, "layers must be >= 1"),
        (dict(dtype="float16"), ValueError, "dtype"),
        (dict(validation_fraction=1.0), ValueError, r"validation_fraction must be in \[0, 1\)"),
        (dict(verbose="yes"), TypeError, "verbose must be True or False"),
    ],
)
def test_bad_parameters_are_named(karate, params, exc, fragment):
    with pytest.raises(exc, match=fragment):
        make(karate, **params).fit(NODES, karate.y)


def test_wrong_ids_after_fit(karate):
    clf = make(karate).fit(NODES, karate.y)
    with pytest.raises(ValueError, match="node id 40"):
        clf.predict([[40]])
    with pytest.raises(TypeError, match="the graph is the graph= parameter"):
        clf.predict(karate.graph)


# ---------------------------------------------------------------------- hyperparameters
def test_parameters_are_the_train_config_options_with_its_defaults():
    params = GATv2Classifier().get_params()
    assert set(params) == set(inspect.signature(GATv2Classifier).parameters)
    own = {"graph", "node_features", "edge_attr", "validation_fraction", "verbose", "num_layers"}
    defaults = TrainConfig.preset("gat")
    for name, value in params.items():
        if name not in own:
            assert value == getattr(defaults, name), name
    assert {"layers", "hidden", "heads", "lr", "seed", "dtype", "threads"} <= set(params)
    assert all(p.kind is p.KEYWORD_ONLY for p in inspect.signature(GATv2Classifier).parameters.values())


def test_num_layers_still_works_for_one_release(karate):
    clf = make(karate, num_layers=3, epochs=2)
    with pytest.warns(FutureWarning, match="num_layers.*layers"):
        clf.fit(NODES, karate.y)
    assert clf.model_.num_layers == 3 and clf.get_params()["num_layers"] == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(karate, layers=3, epochs=2).fit(NODES, karate.y)


# ---------------------------------------------------------------------- the deprecated whole-graph calls
def test_deprecated_whole_graph_calls_warn_and_match_the_new_convention(karate):
    g, x, y = karate.graph, karate.x, karate.y
    mask = np.zeros(34, bool)
    mask[::2] = True
    old = GATv2Classifier(**FAST)
    with pytest.warns(FutureWarning, match=r"graph=graph, node_features=x.*np.flatnonzero\(mask\)"):
        old.fit(g, x, y, mask=mask)
    with pytest.warns(FutureWarning, match="deprecated"):
        logits = old.decision_function(g, x)
    with pytest.warns(FutureWarning):
        proba = old.predict_proba(g, x)
    with pytest.warns(FutureWarning):
        pred = old.predict(g, x)
    with pytest.warns(FutureWarning):
        score = old.score(g, x, y, mask=~mask)
    assert logits.shape == (34, 2) and old.n_features_in_ == 34
    assert score == np.mean(pred[~mask] == y[~mask])
    # the old default (validation on the training nodes) is validation_fraction=None here
    new = make(karate, validation_fraction=None).fit(np.flatnonzero(mask), y[mask])
    np.testing.assert_array_equal(new.predict_proba(NODES), proba)
    with pytest.raises(ValueError, match=r"mask must be a boolean array of shape \(34,\)"), \
            pytest.warns(FutureWarning):
        GATv2Classifier(**FAST).fit(g, x, y, mask=np.ones(33, bool))
    with pytest.raises(TypeError, match="belong to the deprecated"):
        make(karate).fit(NODES, y, mask=mask)
