"""Pickling: layers, networks, the estimator and datasets survive pickle and other processes.

``joblib`` and ``multiprocessing`` (spawn, forkserver) move objects between
processes with pickle; a round trip must give the same predictions to the bit.
"""

import multiprocessing
import pickle

import numpy as np
import pytest

from gatfast import GATv2Classifier, GATv2Layer, GATv2Network
from gatfast.data import DATA_DIR, load_karate, load_tu

pytestmark = pytest.mark.usefixtures("one_numba_thread")


def round_trip(obj):
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


@pytest.fixture(scope="module")
def karate():
    return load_karate()


@pytest.fixture(scope="module")
def mutag():
    return load_tu(DATA_DIR / "mutag.npz")


def test_layer_round_trip_predicts_bit_for_bit(karate):
    layer = GATv2Layer(34, 4, heads=2, seed=0, residual=True, root_weight="theta_n")
    out, _ = layer.forward(karate.graph, karate.x)
    copy = round_trip(layer)
    again, _ = copy.forward(karate.graph, karate.x)
    np.testing.assert_array_equal(again, out)
    assert copy.params.shapes == layer.params.shapes
    # the copy's parameters stay checked and independent of the original
    with pytest.raises(ValueError, match="shape"):
        copy.params["W_l"] = np.zeros((1, 1), np.float32)
    copy.params["att"] = np.zeros_like(copy.params["att"])
    assert np.any(layer.params["att"] != 0)


def test_a_layer_pickled_with_constants_of_another_shape_rebuilds_them(karate):
    """An older gatfast's pickle holds the kernels' constants as that version made them (fewer fields):
    unpickling makes them anew, so the layer runs as one made now."""
    layer = GATv2Layer(34, 4, heads=2, seed=0)
    out, cache = layer.forward(karate.graph, karate.x)
    grads = layer.backward(cache, np.ones_like(out))
    state = layer.__getstate__()
    state["constants"] = tuple(state["constants"])[:-1]  # a namedtuple of an older field list
    copy = GATv2Layer.__new__(GATv2Layer)
    copy.__setstate__(state)
    again, cache = copy.forward(karate.graph, karate.x)
    np.testing.assert_array_equal(again, out)
    for key, value in copy.backward(cache, np.ones_like(out)).items():
        np.testing.assert_array_equal(value, grads[key], err_msg=key)


def test_node_level_network_round_trip(karate):
    model = GATv2Network(34, 4, 2, heads=2, seed=0)
    copy = round_trip(model)
    np.testing.assert_array_equal(copy.output(karate.graph, karate.x), model.output(karate.graph, karate.x))
    # training-mode output (dropout) continues the same random stream
    a, _ = model.forward(karate.graph, karate.x, training=True)
    b, _ = copy.forward(karate.graph, karate.x, training=True)
    np.testing.assert_array_equal(a, b)


def test_graph_level_network_round_trip(mutag):
    model = GATv2Network(mutag.num_features, 4, 2, heads=2, readout="sum", seed=0)
    graph, x, ptr, _ = mutag.batch(np.arange(20))
    copy = round_trip(model)
    np.testing.assert_array_equal(copy.output(graph, x, ptr), model.output(graph, x, ptr))


def test_fitted_classifier_round_trip(karate):
    nodes = np.arange(karate.num_nodes)[:, None]
    clf = GATv2Classifier(graph=karate.graph, node_features=karate.x, hidden=4, heads=2, epochs=5, seed=0)
    clf.fit(nodes, karate.y)
    copy = round_trip(clf)
    np.testing.assert_array_equal(copy.predict_proba(nodes), clf.predict_proba(nodes))
    np.testing.assert_array_equal(copy.classes_, clf.classes_)


def test_datasets_round_trip(karate, mutag):
    node = round_trip(karate)
    np.testing.assert_array_equal(node.graph.indptr, karate.graph.indptr)
    np.testing.assert_array_equal(node.graph.indices, karate.graph.indices)
    np.testing.assert_array_equal(node.x, karate.x)
    np.testing.assert_array_equal(node.y, karate.y)
    graphs = round_trip(mutag)
    assert len(graphs) == len(mutag)
    for a, b in zip(graphs.batch(np.arange(len(mutag))), mutag.batch(np.arange(len(mutag)))):
        np.testing.assert_array_equal(getattr(a, "indptr", a), getattr(b, "indptr", b))
    model = GATv2Network(34, 4, 2, heads=2, seed=0)
    np.testing.assert_array_equal(model.output(node.graph, node.x), model.output(karate.graph, karate.x))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_prediction_in_a_child_process(method, karate):
    """A model and a dataset sent to a fresh interpreter predict the same bits there."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method on this platform")
    model = GATv2Network(34, 4, 2, heads=2, seed=0)
    expected = model.output(karate.graph, karate.x)
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(1) as pool:
        # a bound method pickles its instance: the child unpickles model and dataset
        got = pool.apply_async(model.predict, (karate.graph, karate.x)).get(timeout=240)
    np.testing.assert_array_equal(got, expected)
