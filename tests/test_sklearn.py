"""The estimators inside scikit-learn: check_estimator, clone, cross-validation over nodes and
graphs, grid search, pickling, and scikit-learn staying optional."""

import pickle
import subprocess
import sys
import warnings

import joblib
import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn import clone  # noqa: E402
from sklearn.base import is_classifier  # noqa: E402
from sklearn.exceptions import DataConversionWarning  # noqa: E402
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score, train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils import estimator_checks  # noqa: E402

from gatfast import CSRGraph, GATv2Classifier, GATv2GraphClassifier, TrainConfig  # noqa: E402
from gatfast.data import load_dataset, load_karate  # noqa: E402
from gatfast.estimators.checks import GRAPH_API_CHECKS, NODE_EXPECTED_FAILED_CHECKS  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_numba_thread")
FAST = dict(hidden=4, heads=2, epochs=20, dropout=0.0, attention_dropout=0.0, lr=0.02)
NODES = np.arange(34).reshape(-1, 1)


@pytest.fixture(scope="module")
def karate():
    return load_karate()


@pytest.fixture(scope="module")
def mutag():
    return load_dataset("mutag")


# ---------------------------------------------------------------------- check_estimator
def test_check_estimator_fails_exactly_the_checks_that_feed_feature_matrices(karate):
    est = GATv2Classifier(graph=karate.graph, node_features=karate.x, epochs=3, hidden=2, heads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = estimator_checks.check_estimator(est, expected_failed_checks=NODE_EXPECTED_FAILED_CHECKS,
                                                   on_fail=None)
    status = {}
    for r in results:
        status.setdefault(r["check_name"], set()).add(r["status"])
    unexpected = {k: v for k, v in status.items() if k not in NODE_EXPECTED_FAILED_CHECKS and v - {"passed", "skipped"}}
    assert not unexpected
    assert {k: status[k] for k in NODE_EXPECTED_FAILED_CHECKS} == dict.fromkeys(NODE_EXPECTED_FAILED_CHECKS, {"xfail"})
    assert sum("passed" in v for v in status.values()) >= 25
    # and in raise mode nothing else fails
    estimator_checks.check_estimator(est, expected_failed_checks=NODE_EXPECTED_FAILED_CHECKS)


@pytest.mark.parametrize("check", GRAPH_API_CHECKS)
def test_graph_classifier_passes_the_checks_that_need_no_feature_matrix(check):
    getattr(estimator_checks, check)("GATv2GraphClassifier", GATv2GraphClassifier(epochs=2))


def test_graph_classifier_says_its_input_is_not_a_matrix():
    with pytest.warns(estimator_checks.SkipTestWarning, match="input"):
        estimator_checks.check_estimator(GATv2GraphClassifier(), on_fail=None)


# ---------------------------------------------------------------------- the properties those checks test, on node ids
def test_node_id_versions_of_the_data_checks(karate):
    clf = GATv2Classifier(graph=karate.graph, node_features=karate.x, **FAST)
    X, y = NODES[::2], karate.y[::2]
    assert clf.fit(X, y) is clf  # check_estimators_fit_returns_self
    proba = clf.predict_proba(NODES)
    # check_estimators_dtypes: ids as int32 / int64 / float
    for dtype in (np.int32, np.int64, np.float32, np.float64):
        np.testing.assert_array_equal(clone(clf).fit(X.astype(dtype), y).predict_proba(NODES.astype(dtype)), proba)
    # check_supervised_y_2d: a column y warns and gives the same model
    with pytest.warns(DataConversionWarning):
        two_d = clone(clf).fit(X, y[:, None])
    np.testing.assert_array_equal(two_d.predict_proba(NODES), proba)
    # check_decision_proba_consistency: the scores rank nodes as the probabilities do
    np.testing.assert_array_equal(np.argsort(clf.decision_function(NODES)), np.argsort(proba[:, 1]))
    # check_pipeline_consistency
    pipe = make_pipeline(FunctionTransformer(), clone(clf)).fit(X, y)
    np.testing.assert_array_equal(pipe.predict_proba(NODES), proba)
    # check_estimators_overwrite_params / check_dont_overwrite_parameters
    twin = clone(clf)
    before = twin.get_params()
    assert all(v is before[k] for k, v in twin.fit(X, y).get_params().items())
    # check_n_features_in: one column of ids
    assert clf.n_features_in_ == 1
    with pytest.raises(ValueError, match="X has 2 features, but GATv2Classifier is expecting 1"):
        clf.predict(np.c_[NODES, NODES])


# ---------------------------------------------------------------------- clone, CV, grid search, pickling
def test_clone_get_params_set_params(karate):
    clf = GATv2Classifier(graph=karate.graph, node_features=karate.x, lr=0.1)
    twin = clone(clf)
    assert is_classifier(twin) and twin.get_params()["lr"] == 0.1
    assert twin.graph is karate.graph  # immutable: shared, with its cached orders
    assert twin.node_features is not karate.x
    np.testing.assert_array_equal(twin.node_features, karate.x)
    assert twin.set_params(heads=2, epochs=5) is twin and twin.heads == 2 and clf.heads == 8
    with pytest.raises(ValueError, match="Invalid parameter 'colour'"):
        twin.set_params(colour="red")


def test_cross_validation_and_grid_search_split_nodes(karate):
    clf = GATv2Classifier(graph=karate.graph, node_features=karate.x, **FAST)
    scores = cross_val_score(clf, NODES, karate.y, cv=StratifiedKFold(3, shuffle=True, random_state=0))
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1)) and scores.mean() > 0.6
    search = GridSearchCV(clf, {"lr": [0.005, 0.02], "heads": [1, 2]}, cv=3).fit(NODES, karate.y)
    assert set(search.best_params_) == {"lr", "heads"}
    assert search.best_estimator_.predict(NODES).shape == (34,)
    X_train, X_test, y_train, y_test = train_test_split(NODES, karate.y, test_size=0.3, random_state=0,
                                                        stratify=karate.y)
    assert 0 <= clone(clf).fit(X_train, y_train).score(X_test, y_test) <= 1


def test_cross_validation_when_every_node_is_labelled_keeps_the_features_whole(karate):
    # passed as fit parameters, features with one row per sample would be sliced per fold;
    # as estimator parameters they are not
    clf = GATv2Classifier(graph=karate.graph, node_features=karate.x, **FAST)
    scores = cross_val_score(clf, NODES, karate.y, cv=2)
    assert scores.shape == (2,)


@pytest.mark.parametrize("save", ["pickle", "joblib"])
def test_pickled_estimators_predict_the_same(karate, mutag, tmp_path, save):
    attr = np.random.default_rng(0).normal(size=(karate.graph.nnz, 2))
    node = GATv2Classifier(graph=karate.graph, node_features=karate.x, edge_attr=attr, **FAST).fit(NODES, karate.y)
    graph = GATv2GraphClassifier(epochs=3, hidden=4, heads=2).fit(mutag, mutag.y)
    for est, X in ((node, NODES), (graph, mutag)):
        if save == "pickle":
            back = pickle.loads(pickle.dumps(est))
        else:
            joblib.dump(est, tmp_path / "est.joblib")
            back = joblib.load(tmp_path / "est.joblib")
        np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
        np.testing.assert_array_equal(back.predict(X), est.predict(X))


# ---------------------------------------------------------------------- graph classification
def test_graph_classifier_defaults_are_the_tu_preset():
    params = GATv2GraphClassifier().get_params()
    tu = TrainConfig.preset("tu")
    for name, value in params.items():
        if name not in ("validation_fraction", "verbose"):
            assert value == getattr(tu, name), name
    assert params["readout"] == "sum" and params["layers"] == 3


def test_graph_classifier_on_mutag_lists_and_cross_validation(mutag):
    clf = GATv2GraphClassifier(epochs=5, hidden=4, heads=2, seed=1)
    items = list(mutag)
    assert len(items[0]) == 3  # MUTAG has bond types as edge features
    clf.fit(items[:150], mutag.y[:150])
    assert clf.model_.readout == "sum" and clf.model_.edge_dim == 4
    proba = clf.predict_proba(items[150:])
    assert proba.shape == (38, 2)
    np.testing.assert_array_equal(clf.predict(mutag)[150:], clf.classes_[proba.argmax(axis=1)])
    assert clf.decision_function(items[:3]).shape == (3,)
    scores = cross_val_score(clone(clf), mutag, mutag.y, cv=3)  # a GraphDataset splits like a list
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1))
    search = GridSearchCV(clone(clf), {"readout": ["sum", "mean"]}, cv=2).fit(items, mutag.y)
    assert search.best_params_["readout"] in ("sum", "mean")


def test_graph_classifier_without_edge_features_and_with_string_labels(mutag):
    items = [(g, x) for g, x, _ in mutag][:60]
    y = np.array(["no", "yes"])[mutag.y[:60]]
    clf = GATv2GraphClassifier(epochs=3, hidden=4, heads=2, validation_fraction=None).fit(items, y)
    assert clf.model_.edge_dim is None and set(clf.predict(items)) <= {"no", "yes"}
    assert "val_accuracy" not in clf.history_[0]
    with pytest.raises(ValueError, match=r"X\[0\] has edge features, unlike the fitted model"):
        clf.predict(list(mutag)[:2])


@pytest.mark.parametrize(
    "X, exc, fragment",
    [
        (np.ones((5, 3)), TypeError, "list .* of \\(graph, x\\)"),
        ([np.ones((3, 3))] * 5, TypeError, r"X\[0\] is a ndarray"),
        ([(None, np.ones((3, 3)))] * 5, TypeError, r"X\[0\]\[0\] \(the graph\) must be"),
        ("graphs", TypeError, "got str"),
    ],
)
def test_graph_classifier_bad_items(X, exc, fragment):
    with pytest.raises(exc, match=fragment):
        GATv2GraphClassifier(epochs=1).fit(X, [0, 1, 0, 1, 0])


def test_graph_classifier_item_errors_name_the_item(mutag):
    items = [(g, x) for g, x, _ in mutag][:6]
    items[4] = (items[4][0], items[4][1][:, :3])
    with pytest.raises(ValueError, match=r"X\[4\]\[1\] \(the node features\) must have in_features = 7"):
        GATv2GraphClassifier(epochs=1).fit(items, mutag.y[:6])
    with pytest.raises(ValueError, match="readout must be"):
        GATv2GraphClassifier(readout=None).fit(items[:4], mutag.y[:4])
    square = CSRGraph.from_edge_index(np.array([[0], [1]]), size=(3, 2))
    with pytest.raises(ValueError, match=r"X\[0\]\[0\] \(the graph\) must be square"):
        GATv2GraphClassifier(epochs=1).fit([(square, np.ones((2, 7)))] * 2, [0, 1])


# ---------------------------------------------------------------------- scikit-learn stays optional
def test_import_gatfast_loads_neither_sklearn_nor_torch():
    code = ("import sys, gatfast, gatfast.estimators\n"
            "assert 'sklearn' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
            "gatfast.GATv2Classifier\n"
            "assert 'sklearn' in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_without_sklearn_the_estimators_say_what_to_install():
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import gatfast\n"
        "from gatfast import *\n"
        "for name in ('GATv2Classifier', 'GATv2GraphClassifier'):\n"
        "    cls = getattr(gatfast, name)\n"
        "    try:\n"
        "        cls(epochs=3)\n"
        "    except ImportError as exc:\n"
        "        assert str(exc) == \"gatfast's estimators need scikit-learn: pip install gatfast[sklearn]\", exc\n"
        "    else:\n"
        "        raise AssertionError(name)\n"
        "try:\n"
        "    import gatfast.estimators.node\n"
        "except ImportError as exc:\n"
        "    assert 'pip install gatfast[sklearn]' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_validation_split_is_stratified_seeded_and_keeps_every_class_in_training():
    from gatfast.estimators.base import stratified_split

    codes = np.array([0] * 20 + [1] * 10 + [2] * 1)
    train, val = stratified_split(codes, 0.1, seed=0)
    assert np.bincount(codes[val], minlength=3).tolist() == [2, 1, 0]
    assert set(codes[train]) == {0, 1, 2} and np.union1d(train, val).size == codes.size
    np.testing.assert_array_equal(stratified_split(codes, 0.1, seed=0)[1], val)
    assert stratified_split(codes, None, seed=0)[1].size == 0
    assert stratified_split(codes, 0.99, seed=0)[0].size == 3  # one training sample per class is kept
