"""The training loop: train() and fit() on node, graph and regression datasets."""

import numpy as np
import pytest

import gatfast
from gatfast.data import GraphDataset, load_dataset, make_csbm, make_traffic_scenes
from gatfast.graph import CSRGraph
from gatfast.models import GATv2Network
from gatfast.optim import make_optimizer
from gatfast.training import TrainingDiverged, evaluate, fit, train

SMALL = dict(hidden=4, heads=2, dropout=0.0, attention_dropout=0.0)


pytestmark = pytest.mark.usefixtures("one_numba_thread")


def params_of(model):
    return {k: v.copy() for k, v in model.parameters().items()}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def without_seconds(metrics):
    return {k: v for k, v in metrics.items() if k != "seconds"}


def toy_graphs(num_graphs=24, seed=0):
    """Graph classification any GNN solves: the class is written in every node's features."""
    rng = np.random.default_rng(seed)
    graphs, xs, ys = [], [], []
    for g in range(num_graphs):
        n = int(rng.integers(2, 6))
        src = np.arange(n - 1)
        ei = np.concatenate([np.stack([src, src + 1]), np.stack([src + 1, src])], axis=1)
        label = g % 2
        x = rng.normal(scale=0.1, size=(n, 3))
        x[:, label] += 1.0
        graphs.append(CSRGraph.from_edge_index(ei, n))
        xs.append(x.astype(np.float32))
        ys.append(label)
    return GraphDataset(name="toy", graphs=graphs, xs=xs, y=np.array(ys, dtype=np.int64), num_classes=2)


def small_csbm(seed=1):
    return make_csbm(num_nodes=100, num_features=8, avg_degree=3, seed=seed, train_frac=0.3, val_frac=0.3)


# ---------------------------------------------------------------------- train() on karate
def test_karate_defaults_fit_the_training_set():
    result = train("karate", quiet=True)
    m = result.metrics
    assert m["train_accuracy"] == 1.0
    assert m["epochs"] == len(result.history) and 1 <= m["best_epoch"] <= m["epochs"]
    assert {"train_accuracy", "val_accuracy", "test_accuracy", "epochs", "seconds"} <= set(m)
    # the defaults are the GAT recipe
    cfg = result.model.get_config()
    assert (cfg["num_layers"], cfg["heads"], cfg["hidden_features"], cfg["dropout"]) == (2, 8, 8, 0.6)
    assert result.splits is None


def test_same_seed_same_run_bit_for_bit():
    a = train("karate", epochs=15, seed=3, quiet=True)
    b = train("karate", epochs=15, seed=3, quiet=True)
    assert a.history == b.history
    assert without_seconds(a.metrics) == without_seconds(b.metrics)
    assert_same_params(a.model.parameters(), b.model.parameters())
    c = train("karate", epochs=15, seed=4, quiet=True)
    assert [r["loss"] for r in c.history] != [r["loss"] for r in a.history]
    assert not np.array_equal(c.model.parameters()["layers.0.W_l"], a.model.parameters()["layers.0.W_l"])


def test_theta_r_forms_give_the_same_trajectory():
    runs = [train("karate", epochs=5, dtype=np.float64, theta_r=form, quiet=True) for form in ("linear", "pairwise")]
    for ra, rb in zip(runs[0].history, runs[1].history):
        for key in ra:
            assert ra[key] == pytest.approx(rb[key], rel=1e-10, abs=1e-12), key
    pa, pb = runs[0].model.parameters(), runs[1].model.parameters()
    for k in pa:
        np.testing.assert_allclose(pa[k], pb[k], rtol=1e-10, atol=1e-12, err_msg=k)
    assert runs[0].history[-1]["train_loss"] < runs[0].history[0]["train_loss"]  # it did train (no dropout noise)


# ---------------------------------------------------------------------- early stopping
def test_early_stopping_restores_the_best_validation_epoch():
    ds = small_csbm()
    snapshots = {}

    def keep(epoch, model, grads, row):
        snapshots[epoch] = params_of(model)

    patience = 10
    result = train(ds, epochs=200, patience=patience, lr=0.05, seed=0, quiet=True, callback=keep, **SMALL)
    hist, m = result.history, result.metrics
    assert m["epochs"] == len(hist) < 200  # stopped early
    # best epoch: highest validation accuracy, ties broken by the lowest validation loss
    best = max(hist, key=lambda r: (r["val_accuracy"], -r["val_loss"]))
    assert m["best_epoch"] == best["epoch"] < len(hist)
    assert m["val_accuracy"] == best["val_accuracy"] and m["val_loss"] == best["val_loss"]
    assert_same_params(result.model.parameters(), snapshots[best["epoch"]])
    assert not np.array_equal(result.model.parameters()["layers.0.W_l"], snapshots[len(hist)]["layers.0.W_l"])
    # GAT's rule: the last `patience` epochs improved neither the accuracy nor the loss
    before = hist[: -patience]
    best_acc = max(r["val_accuracy"] for r in before)
    best_loss = min(r["val_loss"] for r in before)
    for r in hist[-patience:]:
        assert r["val_accuracy"] < best_acc and r["val_loss"] > best_loss
    # and the epoch before those did improve one of them
    prior = hist[: -patience - 1]
    r = hist[-patience - 1]
    assert r["val_accuracy"] >= max(p["val_accuracy"] for p in prior) or r["val_loss"] <= min(
        p["val_loss"] for p in prior)


def test_final_metrics_are_the_best_epochs_evaluation_not_a_second_one(monkeypatch):
    import gatfast.training.loop as loop

    calls = []
    real = loop.evaluate_splits
    monkeypatch.setattr(loop, "evaluate_splits", lambda *a, **k: calls.append(1) or real(*a, **k))
    ds = small_csbm()
    result = train(ds, epochs=6, lr=0.05, seed=0, quiet=True, **SMALL)
    assert len(calls) == 6  # one per epoch: the best epoch's is reused, not recomputed
    fresh = evaluate(result.model, ds)
    m = result.metrics
    for key in ("train_accuracy", "val_accuracy", "test_accuracy", "train_loss", "val_loss", "test_loss"):
        assert m[key] == fresh[key], key
    best = result.history[m["best_epoch"] - 1]
    assert m["val_loss"] == best["val_loss"]


def test_a_callback_that_changes_parameters_gets_them_evaluated_again(monkeypatch):
    import gatfast.training.loop as loop

    calls = []
    real = loop.evaluate_splits
    monkeypatch.setattr(loop, "evaluate_splits", lambda *a, **k: calls.append(1) or real(*a, **k))

    def shrink(epoch, model, grads, row):  # runs after the epoch's evaluation, before the snapshot
        model.load_parameters({k: v * 0.5 for k, v in model.parameters().items()})

    ds = small_csbm()
    result = train(ds, epochs=3, lr=0.05, seed=0, quiet=True, callback=shrink, **SMALL)
    assert len(calls) == 4
    fresh = evaluate(result.model, ds)
    assert result.metrics["val_loss"] == fresh["val_loss"]
    assert result.metrics["train_loss"] == fresh["train_loss"]


def test_patience_zero_or_none_disables_early_stopping():
    ds = small_csbm()
    assert train(ds, epochs=40, patience=0, lr=0.05, quiet=True, **SMALL).metrics["epochs"] == 40
    model = GATv2Network(8, 4, 2, heads=2, dropout=0.0, attention_dropout=0.0, seed=0)
    res = fit(model, ds, make_optimizer("adam", model.parameters(), 0.05), epochs=40, patience=None, quiet=True)
    assert res.metrics["epochs"] == 40


# ---------------------------------------------------------------------- progress output
def test_quiet_prints_nothing(capsys):
    train("karate", epochs=3, quiet=True)
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_progress_lines_per_epoch(capsys):
    train("karate", epochs=4, log_every=1, quiet=False)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("epoch")]
    assert [int(line.split("|")[0].split()[1]) for line in lines] == [1, 2, 3, 4]
    assert all("loss" in line and "val acc" in line for line in lines)
    assert "dataset karate" in out and "layers=2 hidden=8 heads=8" in out


def test_progress_every_n_epochs_and_last(capsys):
    train("karate", epochs=7, log_every=3, quiet=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert [int(line.split("|")[0].split()[1]) for line in lines] == [3, 6, 7]


# ---------------------------------------------------------------------- graph-level tasks
def test_graph_classification_learns_with_shuffled_mini_batches(monkeypatch):
    ds = toy_graphs()
    splits = {"train": np.arange(16), "val": np.arange(16, 20), "test": np.arange(20, 24)}
    batches = []
    real_batch = GraphDataset.batch

    def spy(self, indices):
        batches.append(np.asarray(indices).copy())
        return real_batch(self, indices)

    monkeypatch.setattr(GraphDataset, "batch", spy)
    model = GATv2Network(3, 4, 2, num_layers=2, heads=2, dropout=0.0, attention_dropout=0.0, readout="mean",
                         seed=0)
    opt = make_optimizer("adam", model.parameters(), 0.05)
    result = fit(model, ds, opt, epochs=30, patience=None, batch_size=5, splits=splits, seed=0, quiet=True)
    m = result.metrics
    assert m["train_accuracy"] == 1.0 and m["val_accuracy"] == 1.0 and m["test_accuracy"] == 1.0
    assert {k for k in m if k.endswith("_loss")} == {"train_loss", "val_loss", "test_loss"}
    # training batches: 4 per epoch (16 graphs by 5), partition the train split, order reshuffled
    train_batches = [b for b in batches if len(b) <= 5 and set(b.tolist()) <= set(range(16))]
    epochs = [train_batches[i : i + 4] for i in range(0, 4 * 30, 4)]
    assert len(train_batches) >= 4 * 30
    for ep in epochs[:3]:
        assert [len(b) for b in ep] == [5, 5, 5, 1]
        assert sorted(np.concatenate(ep).tolist()) == list(range(16))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(epochs, epochs[1:]))
    for key, idx in splits.items():
        np.testing.assert_array_equal(result.splits[key], idx)
    # evaluate() with the run's splits reproduces the final metrics exactly
    again = evaluate(result.model, ds, splits=result.splits)
    assert again == {k: v for k, v in m.items() if k.endswith(("_accuracy", "_loss"))}


def test_graph_classification_default_splits_and_mutag_subset():
    full = load_dataset("mutag")
    idx = np.arange(0, 188, 6)  # 32 molecules of both classes
    sub = GraphDataset(name="mutag32", graphs=[full.graphs[i] for i in idx], xs=[full.xs[i] for i in idx],
                       y=np.asarray(full.y)[idx], num_classes=full.num_classes)
    result = train(sub, epochs=3, layers=2, batch_size=8, quiet=True, **SMALL)
    s = result.splits
    every = np.concatenate([s["train"], s["val"], s["test"]])
    assert sorted(every.tolist()) == list(range(len(sub)))  # disjoint and complete
    assert len(s["val"]) >= 1 and len(s["test"]) >= 1
    m = result.metrics
    for split in ("train", "val", "test"):
        acc = m[f"{split}_accuracy"]
        assert 0.0 <= acc <= 1.0 and acc * len(s[split]) == pytest.approx(round(acc * len(s[split])))
    assert len(result.history) == 3 and all("test_accuracy" in r for r in result.history)


def test_no_validation_split_selects_on_training_loss_without_faking_val_metrics():
    ds = toy_graphs(12)
    model = GATv2Network(3, 4, 2, heads=2, dropout=0.0, attention_dropout=0.0, readout="mean", seed=0)
    opt = make_optimizer("sgd", model.parameters(), 0.5)
    result = fit(model, ds, opt, epochs=8, patience=None, splits={"train": np.arange(12)}, quiet=True)
    assert all(not any(k.startswith("val_") for k in r) for r in result.history)
    assert not any(k.startswith(("val_", "test_")) for k in result.metrics)
    best = max(result.history, key=lambda r: (r["train_accuracy"], -r["train_loss"]))
    assert result.metrics["best_epoch"] == best["epoch"]
    assert result.metrics["train_loss"] == best["train_loss"]


def test_k_fold_cross_validation_reports_mean_std_and_folds(capsys):
    ds = toy_graphs(18)
    result = train(ds, folds=3, epochs=3, layers=1, batch_size=4, **SMALL)
    assert len(result.folds) == 3
    accs = np.array([f["test_accuracy"] for f in result.folds])
    assert result.metrics["test_accuracy"] == pytest.approx(accs.mean())
    assert result.metrics["test_accuracy_std"] == pytest.approx(accs.std())
    assert result.metrics["folds"] == 3
    assert capsys.readouterr().out.count("fold ") == 3
    with pytest.raises(ValueError, match="folds"):
        train("karate", folds=3, epochs=1, quiet=True)


def test_node_regression_on_traffic_scenes_reports_losses_only():
    ds = make_traffic_scenes(num_graphs=40, seed=0)
    result = train(ds, epochs=12, layers=2, batch_size=8, quiet=True, **SMALL)
    m = result.metrics
    assert {k for k in m if k.endswith("_loss")} == {"train_loss", "val_loss", "test_loss"}
    assert not any("accuracy" in k for k in m) and not any("accuracy" in k for r in result.history for k in r)
    assert all(np.isfinite(m[k]) for k in ("train_loss", "val_loss", "test_loss"))
    assert result.model.readout is None and result.model.get_config()["out_features"] == 2
    assert m["val_loss"] == min(r["val_loss"] for r in result.history)  # best epoch restored
    assert result.history[-1]["loss"] < result.history[0]["loss"]


# ---------------------------------------------------------------------- callback
def test_callback_once_per_epoch_with_row_and_batch():
    seen = []

    def cb(epoch, model, grads, row):
        seen.append((epoch, row, grads))

    train("karate", epochs=3, quiet=True, callback=cb)
    assert [e for e, _, _ in seen] == [1, 2, 3]
    for _, row, grads in seen:
        assert {"loss", "train_accuracy", "graph", "x"} <= set(row)
        assert row["graph"].num_nodes == 34 and "layers.0.W_l" in grads
    seen.clear()
    ds = toy_graphs(12)
    result = train(ds, epochs=2, layers=1, batch_size=4, quiet=True, callback=cb, **SMALL)
    assert [e for e, _, _ in seen] == [1, 2]
    for (_, row, grads), hist in zip(seen, result.history):
        assert {k: row[k] for k in hist} == hist  # the history row, plus the batch
        assert len(row["graph_ptr"]) - 1 <= 4 and row["x"].shape[0] == row["graph"].num_nodes
        assert "head.weight" in grads
    with pytest.raises(TypeError, match="callback"):
        train("karate", epochs=1, quiet=True, callback="print")


# ---------------------------------------------------------------------- divergence
def test_nan_gradient_stops_with_the_epoch_and_keeps_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    train("karate", epochs=2, quiet=True, save=path)
    before = path.read_bytes()
    real_backward = GATv2Network.backward
    calls = {"n": 0}

    def poisoned(self, cache, grad_out, theta_r="linear", input_grad=True):
        grads = real_backward(self, cache, grad_out, theta_r=theta_r, input_grad=input_grad)
        calls["n"] += 1
        if calls["n"] == 3:
            grads["layers.1.att"] = np.full_like(grads["layers.1.att"], np.nan)
        return grads

    monkeypatch.setattr(GATv2Network, "backward", poisoned)
    with pytest.raises(TrainingDiverged, match="epoch 3") as info:
        train("karate", epochs=10, quiet=True, save=path)
    assert info.value.epoch == 3 and "layers.1.att" in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


@pytest.mark.parametrize("bad_call", [1, 4])
def test_after_divergence_the_model_holds_the_best_earlier_parameters(monkeypatch, bad_call):
    ds = small_csbm()
    model = GATv2Network(8, 4, 2, heads=2, dropout=0.0, attention_dropout=0.0, seed=0)
    initial = params_of(model)
    snapshots, rows = {}, []

    def keep(epoch, model, grads, row):
        snapshots[epoch] = params_of(model)
        rows.append(row)

    real_backward = GATv2Network.backward
    calls = {"n": 0}

    def poisoned(self, cache, grad_out, theta_r="linear", input_grad=True):
        grads = real_backward(self, cache, grad_out, theta_r=theta_r, input_grad=input_grad)
        calls["n"] += 1
        if calls["n"] == bad_call:
            grads["layers.0.W_l"][:] = np.inf
        return grads

    monkeypatch.setattr(GATv2Network, "backward", poisoned)
    opt = make_optimizer("adam", model.parameters(), 0.05)
    with pytest.raises(TrainingDiverged, match=f"epoch {bad_call}"):
        fit(model, ds, opt, epochs=10, quiet=True, callback=keep)
    if bad_call == 1:
        assert_same_params(model.parameters(), initial)
    else:
        best = max(rows, key=lambda r: (r["val_accuracy"], -r["val_loss"]))
        assert_same_params(model.parameters(), snapshots[best["epoch"]])


def test_huge_learning_rate_diverges_with_a_clear_error(tmp_path):
    path = tmp_path / "model.npz"
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match=r"diverged at epoch \d+") as info:
        train("karate", epochs=20, lr=1e30, quiet=True, save=path)
    assert info.value.epoch >= 1
    assert not path.exists()


def test_non_finite_parameters_after_a_step_are_never_selected(monkeypatch):
    ds = small_csbm()
    model = GATv2Network(8, 4, 2, heads=2, dropout=0.0, attention_dropout=0.0, seed=0)
    opt = make_optimizer("adam", model.parameters(), 0.01)
    real_step = type(opt).step

    def step(self, grads):
        real_step(self, grads)
        self.params["layers.0.bias"][0] = np.inf

    monkeypatch.setattr(type(opt), "step", step)
    with pytest.raises(TrainingDiverged, match="epoch 1: parameter layers.0.bias"):
        fit(model, ds, opt, epochs=3, quiet=True)


# ---------------------------------------------------------------------- bad arguments
def test_fit_rejects_bad_arguments():
    ds = small_csbm()
    model = GATv2Network(8, 4, 2, heads=2, seed=0)
    opt = make_optimizer("adam", model.parameters(), 0.01)
    with pytest.raises(ValueError, match="epochs"):
        fit(model, ds, opt, epochs=0)
    with pytest.raises(ValueError, match="theta_r"):
        fit(model, ds, opt, epochs=1, theta_r="quadratic")
    with pytest.raises(ValueError, match="input features"):
        fit(GATv2Network(5, 4, 2, seed=0), ds, opt, epochs=1)
    with pytest.raises(ValueError, match="classes"):
        fit(GATv2Network(8, 4, 3, seed=0), ds, opt, epochs=1)
    graphs = toy_graphs(6)
    gmodel = GATv2Network(3, 4, 2, readout="mean", seed=0)
    gopt = make_optimizer("adam", gmodel.parameters(), 0.01)
    with pytest.raises(ValueError, match=r"splits\['train'\]"):
        fit(gmodel, graphs, gopt, epochs=1, splits={"train": [0, 99]})
    with pytest.raises(ValueError, match=r"splits\['train'\] must contain"):
        fit(gmodel, graphs, gopt, epochs=1, splits={"val": [0]})
    with pytest.raises(ValueError, match="readout"):
        fit(GATv2Network(3, 4, 2, seed=0), graphs, gopt, epochs=1)
    with pytest.raises(ValueError, match="optimizer"):
        train("karate", optimizer="foo", epochs=1, quiet=True)


def test_train_does_not_modify_the_dataset():
    ds = small_csbm()
    x, y, mask = ds.x.copy(), ds.y.copy(), ds.train_mask.copy()
    train(ds, epochs=2, quiet=True, **SMALL)
    np.testing.assert_array_equal(ds.x, x)
    np.testing.assert_array_equal(ds.y, y)
    np.testing.assert_array_equal(ds.train_mask, mask)


def test_public_api_exports():
    assert gatfast.train is train and gatfast.fit is fit and gatfast.evaluate is evaluate
    assert isinstance(train("karate", epochs=1, quiet=True), gatfast.TrainResult)


def test_train_takes_the_graph_split_for_one_run():
    ds = load_dataset("mutag")
    splits = {"train": np.arange(0, 150), "val": np.arange(150, 170)}
    result = train(ds, epochs=2, quiet=True, splits=splits)
    assert set(result.splits) == {"train", "val"}
    np.testing.assert_array_equal(result.splits["val"], splits["val"])
    assert "val_accuracy" in result.metrics and "test_accuracy" not in result.metrics
    with pytest.raises(ValueError, match="splits is for one run on a graph dataset"):
        train(ds, epochs=2, quiet=True, folds=3, splits=splits)
    with pytest.raises(ValueError, match="splits is for one run on a graph dataset"):
        train("karate", epochs=2, quiet=True, splits=splits)
