"""The ``gatfast`` command line, run in-process through ``main`` (and once as a real process)."""

import argparse
import importlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from gatfast.cli import build_parser, main
from gatfast.data import DATA_DIR
from gatfast.models import GATv2Network
from gatfast.training import load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORA = str(DATA_DIR / "cora.npz")
KARATE = str(DATA_DIR / "karate.npz")
MUTAG = str(DATA_DIR / "mutag.npz")
SMALL = ["--hidden", "4", "--heads", "2"]
# the module that builds the model and optimizer (spied on below)
train_module = importlib.import_module("gatfast.training.run")


pytestmark = pytest.mark.usefixtures("one_numba_thread")


def run(argv, capsys):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def final_metrics(out):
    """The ``name: value`` lines after 'final metrics:'."""
    block = out.split("final metrics:")[1]
    return {m[1]: float(m[2]) for m in re.finditer(r"^\s*(\w+): (\S+)$", block, re.M)}


def read_json(path):
    with open(path) as fh:
        return json.load(fh)


# ---------------------------------------------------------------------- train
def test_train_with_no_options_is_the_karate_recipe(capsys):
    status, out, err = run(["train"], capsys)
    assert status == 0 and err == ""
    assert "dataset karate" in out and "layers=2 hidden=8 heads=8" in out
    assert out.count("\nepoch ") >= 30  # progress every 10 epochs
    assert final_metrics(out)["train_accuracy"] == 1.0


def test_quiet_prints_only_the_final_metrics(capsys):
    status, out, err = run(["train", "--epochs", "3", "--quiet"], capsys)
    assert status == 0 and err == ""
    assert out.startswith("final metrics:") and "epoch " not in out.replace("epochs", "")
    assert set(final_metrics(out)) >= {"train_accuracy", "val_accuracy", "test_accuracy", "epochs", "seconds"}


def test_planetoid_file_defaults_to_the_gat_recipe(capsys, monkeypatch, tmp_path):
    built, optimizers = [], []
    real_optimizer = train_module.make_optimizer

    def spy_model(*args, **kwargs):
        model = GATv2Network(*args, **kwargs)
        built.append(model.get_config())
        return model

    def spy_optimizer(name, params, lr, weight_decay=0.0, *rest):
        optimizers.append((name, lr, weight_decay))
        return real_optimizer(name, params, lr, weight_decay, *rest)

    monkeypatch.setattr(train_module, "GATv2Network", spy_model)
    monkeypatch.setattr(train_module, "make_optimizer", spy_optimizer)
    status, out, _ = run(["train", "--dataset", CORA, "--epochs", "3", "--save", tmp_path / "m.npz"], capsys)
    assert status == 0
    (cfg,) = built
    assert (cfg["in_features"], cfg["out_features"]) == (1433, 7)
    assert (cfg["num_layers"], cfg["heads"], cfg["hidden_features"], cfg["out_heads"]) == (2, 8, 8, 1)
    assert (cfg["dropout"], cfg["attention_dropout"], cfg["activation"]) == (0.6, 0.6, "elu")
    assert optimizers == [("adam", 0.005, 5e-4)]
    assert "patience=100" in out and "epochs=3" in out
    _, meta = load_checkpoint(tmp_path / "m.npz")
    assert meta["preprocessing"] == {"normalize_features": True} and meta["dataset"] == CORA


def test_options_reach_the_model_and_optimizer(capsys, monkeypatch):
    built, optimizers = [], []
    real_optimizer = train_module.make_optimizer

    def spy_model(*args, **kwargs):
        model = GATv2Network(*args, **kwargs)
        built.append(model.get_config())
        return model

    monkeypatch.setattr(train_module, "GATv2Network", spy_model)
    monkeypatch.setattr(train_module, "make_optimizer",
                        lambda *a, **k: optimizers.append(a[:1] + a[2:]) or real_optimizer(*a, **k))
    argv = ["train", "--layers", "3", "--hidden", "5", "--heads", "2", "--dropout", "0.25", "--optimizer", "sgd",
            "--lr", "0.1", "--weight-decay", "0.01", "--momentum", "0.9", "--epochs", "2", "--patience", "1",
            "--attention-activation", "softplus", "--dtype", "float64", "--seed", "7", "--quiet"]
    status, _, _ = run(argv, capsys)
    assert status == 0
    (cfg,) = built
    assert (cfg["num_layers"], cfg["hidden_features"], cfg["heads"], cfg["dropout"]) == (3, 5, 2, 0.25)
    assert (cfg["attention_activation"], cfg["dtype"], cfg["seed"]) == ("softplus", "float64", 7)
    assert optimizers == [("sgd", 0.1, 0.01, 0.9, False)]


def test_metrics_json_for_classification_and_save_then_evaluate(tmp_path, capsys):
    model, metrics = tmp_path / "m.npz", tmp_path / "train.json"
    status, out, _ = run(["train", "--epochs", "5", "--save", model, "--metrics-json", metrics], capsys)
    assert status == 0 and f"model saved to {model}" in out
    m = read_json(metrics)
    assert {"train_accuracy", "val_accuracy", "test_accuracy", "epochs", "seconds"} <= set(m)
    assert m["epochs"] == 5 and all(isinstance(v, (int, float)) for v in m.values())
    assert m == pytest.approx(final_metrics(out), abs=5e-5)  # the printed values, rounded
    again = tmp_path / "eval.json"
    status, out, _ = run(["evaluate", model, "--metrics-json", again], capsys)
    assert status == 0 and "on karate" in out
    e = read_json(again)
    assert e == {k: v for k, v in m.items() if k.endswith(("_accuracy", "_loss"))}


def test_graph_dataset_save_then_evaluate_uses_the_same_splits(tmp_path, capsys):
    model, metrics, again = tmp_path / "m.npz", tmp_path / "train.json", tmp_path / "eval.json"
    argv = ["train", "--dataset", MUTAG, "--epochs", "2", "--layers", "1", *SMALL, "--quiet", "--save", model,
            "--metrics-json", metrics]
    assert run(argv, capsys)[0] == 0
    m = read_json(metrics)
    assert {"train_accuracy", "val_accuracy", "test_accuracy", "epochs", "seconds"} <= set(m)
    status, out, _ = run(["evaluate", model, "--metrics-json", again], capsys)
    assert status == 0 and "all graphs" not in out
    assert read_json(again) == {k: v for k, v in m.items() if k.endswith(("_accuracy", "_loss"))}
    # on another file: every graph is scored as test
    status, out, _ = run(["evaluate", model, "--dataset", "mutag"], capsys)
    assert status == 0 and "all graphs as the test split" in out and "train_accuracy" not in out


def test_regression_metrics_json_has_losses_only(tmp_path, capsys):
    model, metrics, again = tmp_path / "m.npz", tmp_path / "train.json", tmp_path / "eval.json"
    argv = ["train", "--dataset", "traffic_scenes", "--epochs", "2", "--layers", "1", *SMALL, "--batch-size",
            "64", "--quiet", "--save", model, "--metrics-json", metrics]
    assert run(argv, capsys)[0] == 0
    m = read_json(metrics)
    assert {"train_loss", "val_loss", "test_loss", "epochs", "seconds"} <= set(m)
    assert not any("accuracy" in k for k in m)
    assert run(["evaluate", model, "--metrics-json", again], capsys)[0] == 0
    assert read_json(again) == {k: m[k] for k in ("train_loss", "val_loss", "test_loss")}


def test_theta_r_pairwise_option_trains(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = ["train", "--epochs", "3", "--quiet", "--dtype", "float64"]
    assert run([*base, "--metrics-json", a], capsys)[0] == 0
    assert run([*base, "--theta-r", "pairwise", "--metrics-json", b], capsys)[0] == 0
    ma, mb = read_json(a), read_json(b)
    for k in ("train_loss", "val_loss", "test_loss"):
        assert ma[k] == pytest.approx(mb[k], rel=1e-10)


# ---------------------------------------------------------------------- gradcheck
@pytest.mark.parametrize(
    "options",
    [[], ["--theta-r", "pairwise"], ["--mean"], ["--attention-activation", "softplus"],
     ["--root-weight", "theta_n", "--heads", "1", "--seed", "3"]],
)
def test_gradcheck_prints_a_small_worst_error(capsys, options):
    status, out, _ = run(["gradcheck", "--nodes", "6", *options], capsys)
    assert status == 0
    worst = float(re.search(r"worst relative error: (\S+)", out)[1])
    assert 0.0 <= worst < 1e-6
    assert all(name in out for name in ("W_l", "W_r", "att", "x"))


def test_gradcheck_fails_when_above_tolerance(capsys):
    status, out, _ = run(["gradcheck", "--nodes", "4", "--tolerance", "1e-300"], capsys)
    assert status == 1 and "worst relative error" in out


# ---------------------------------------------------------------------- help and argument errors
def subparsers():
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


@pytest.mark.parametrize("command", ["train", "evaluate", "gradcheck", "experiment"])
def test_help_explains_every_option(command, capsys):
    sub = subparsers()[command]
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for action in sub._actions:
        assert action.help, f"{command}: {action.option_strings or action.dest} has no help"
        names = action.option_strings or [action.metavar or action.dest]
        if not action.option_strings and action.choices:
            names.append("{" + ",".join(action.choices) + "}")
        assert any(n in text for n in names), names


def test_top_level_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and all(c in out for c in ("train", "evaluate", "gradcheck"))


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["train", "--optimizer", "foo"], "--optimizer"),
        (["train", "--theta-r", "quadratic"], "--theta-r"),
        (["train", "--dropout", "1.5"], "--dropout"),
        (["train", "--dropout", "half"], "--dropout"),
        (["train", "--epochs", "0"], "--epochs"),
        (["train", "--epochs", "2.5"], "--epochs"),
        (["train", "--lr", "-1"], "--lr"),
        (["train", "--lr", "nan"], "--lr"),
        (["train", "--patience", "-1"], "--patience"),
        (["train", "--dtype", "float16"], "--dtype"),
        (["train", "--colour", "red"], "unrecognized arguments"),
        (["train", "--out", "x"], "unrecognized arguments"),  # a prefix of --out-heads, not an abbreviation
        (["gradcheck", "--node", "5"], "unrecognized arguments"),
        (["gradcheck", "--theta-r", "cubic"], "--theta-r"),
        (["evaluate"], "checkpoint"),
        (["fly"], "invalid choice"),
        ([], "COMMAND"),
    ],
)
def test_bad_option_values_exit_2_with_a_message(argv, fragment, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert fragment in capsys.readouterr().err


def test_usage_errors_found_after_parsing(capsys):
    status, _, err = run(["train", "--folds", "3", "--epochs", "1"], capsys)
    assert status == 2 and "folds" in err and "Traceback" not in err
    status, _, err = run(["gradcheck", "--nodes", "1"], capsys)
    assert status == 2 and "--nodes" in err
    status, _, err = run(["train", "--dataset", "karate", "--readout", "mean", "--epochs", "1"], capsys)
    assert status == 2 and "readout" in err


# ---------------------------------------------------------------------- bad dataset files
def test_missing_and_unknown_datasets(tmp_path, capsys):
    status, out, err = run(["train", "--dataset", tmp_path / "missing.npz", "--epochs", "1"], capsys)
    assert status == 2 and "dataset file not found" in err and "missing.npz" in err
    assert "Traceback" not in err and "final metrics" not in out
    status, _, err = run(["train", "--dataset", "no-such-dataset", "--epochs", "1"], capsys)
    assert status == 2 and "no-such-dataset" in err


def karate_arrays():
    with np.load(KARATE) as z:
        return {k: z[k] for k in z.files}


def mutag_arrays():
    with np.load(MUTAG) as z:
        return {k: z[k] for k in z.files}


def _edit(base, **changes):
    def make():
        arrays = base()
        for k, v in changes.items():
            if v is None:
                arrays.pop(k)
            else:
                arrays[k] = v(arrays) if callable(v) else v
        return arrays

    return make


@pytest.mark.parametrize(
    "make, fragment",
    [
        (_edit(karate_arrays, y=lambda a: a["y"] - 1), "'y' must be >= 0"),
        (_edit(karate_arrays, y=lambda a: a["y"][:20]), "'y'"),
        (_edit(karate_arrays, y=lambda a: a["y"].astype(float)), "integer"),
        (_edit(karate_arrays, train_mask=np.ones(33, bool)), "'train_mask' must have shape (34"),
        (_edit(karate_arrays, val_mask=np.ones(34, np.int64)), "'val_mask' must be a bool array"),
        (_edit(karate_arrays, edge_index=lambda a: a["edge_index"] + 1), "'edge_index' must be < 34"),
        (_edit(karate_arrays, edge_index=lambda a: a["edge_index"][0]), "'edge_index' must have shape (2, *)"),
        (_edit(karate_arrays, x_indices=lambda a: a["x_indices"] + 100), "'x_indices'"),
        (_edit(karate_arrays, x_data=lambda a: np.full_like(a["x_data"], np.nan)), "finite"),
        (_edit(karate_arrays, test_mask=None), "unknown dataset format; expected Planetoid keys"),
        (_edit(mutag_arrays, graph_labels=lambda a: a["graph_labels"] + 5), "'graph_labels' must be < 2"),
        (_edit(mutag_arrays, graph_indicator=lambda a: a["graph_indicator"][::-1].copy()), "'graph_indicator'"),
        (lambda: {"weights": np.zeros(3)}, "unknown dataset format"),
    ],
)
def test_malformed_dataset_files(tmp_path, capsys, make, fragment):
    path = tmp_path / "bad.npz"
    np.savez(path, **make())
    save = tmp_path / "model.npz"
    save.write_bytes(b"an older model")
    status, out, err = run(["train", "--dataset", path, "--epochs", "1", "--save", save, "--metrics-json",
                            tmp_path / "m.json"], capsys)
    assert status == 2, out
    assert fragment in err and str(path) in err and "Traceback" not in err
    assert err.startswith("gatfast train: error:")
    assert save.read_bytes() == b"an older model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "model.npz"]


def test_not_an_npz_file(tmp_path, capsys):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"\x00\x01 random junk")
    status, _, err = run(["train", "--dataset", path, "--epochs", "1"], capsys)
    assert status == 2 and "bad.npz" in err and "Traceback" not in err
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, y=np.array([{"a": 1}], dtype=object))
    status, _, err = run(["train", "--dataset", pickled, "--epochs", "1"], capsys)
    assert status == 2 and "pickle" in err


# ---------------------------------------------------------------------- divergence
def test_divergence_exits_non_zero_and_keeps_files(tmp_path, capsys):
    save, metrics = tmp_path / "m.npz", tmp_path / "m.json"
    assert run(["train", "--epochs", "2", "--quiet", "--save", save], capsys)[0] == 0
    before = save.read_bytes()
    with np.errstate(all="ignore"):
        status, out, err = run(["train", "--lr", "1e30", "--epochs", "20", "--save", save, "--metrics-json",
                                metrics], capsys)
    assert status != 0
    assert re.search(r"gatfast train: error: training diverged at epoch \d+", err)
    assert "Traceback" not in err and "final metrics" not in out
    assert save.read_bytes() == before and not metrics.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


def test_nan_gradient_names_the_epoch(tmp_path, capsys, monkeypatch):
    real_backward = GATv2Network.backward
    calls = {"n": 0}

    def poisoned(self, cache, grad_out, theta_r="linear", input_grad=True):
        grads = real_backward(self, cache, grad_out, theta_r=theta_r, input_grad=input_grad)
        calls["n"] += 1
        if calls["n"] == 4:
            grads["layers.0.W_r"][0, 0] = np.nan
        return grads

    monkeypatch.setattr(GATv2Network, "backward", poisoned)
    status, _, err = run(["train", "--epochs", "10", "--save", tmp_path / "m.npz"], capsys)
    assert status != 0 and "diverged at epoch 4" in err and "layers.0.W_r" in err
    assert not (tmp_path / "m.npz").exists()


def test_unwritable_output_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    status, _, err = run(["train", "--epochs", "1", "--quiet", "--save", blocker / "m.npz"], capsys)
    assert status == 2 and "Traceback" not in err and str(blocker) in err


# ---------------------------------------------------------------------- the real entry point
def test_python_m_gatfast_subprocess(tmp_path):
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "gatfast", "train", "--epochs", "5", "--quiet"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("final metrics:") and "train_accuracy" in proc.stdout
    assert final_metrics(proc.stdout)["epochs"] == 5
    proc = subprocess.run([sys.executable, "-m", "gatfast", "train", "--epochs", "0"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--epochs" in proc.stderr


def test_the_program_runs_exit_handlers_and_flushes_before_its_quick_exit(tmp_path):
    # gatfast.cli.run ends with os._exit (no interpreter teardown): what an exit must do still happens
    code = (
        "import atexit, sys\n"
        "from gatfast.cli import run\n"
        "atexit.register(lambda: print('exit handler ran'))\n"
        "sys.stdout.write('unflushed ')\n"
        "sys.argv = ['gatfast', 'train', '--epochs', '2', '--quiet', '--metrics-json', 'm.json']\n"
        "run()\n"
        "print('never reached')\n"
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("unflushed final metrics:") and proc.stdout.endswith("exit handler ran\n")
    assert "never reached" not in proc.stdout
    assert json.loads((tmp_path / "m.json").read_text())["epochs"] == 2
    code = code.replace("'--epochs', '2'", "'--epochs', '0'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "--epochs" in proc.stderr and "exit handler ran" in proc.stdout


def test_a_reader_that_leaves_early_stops_the_command_quietly(tmp_path):
    # gatfast train | head -1: no error line, no traceback, the status of a SIGPIPE death (as git)
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "gatfast", "train", "--epochs", "300", "--log-every", "1"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert first.startswith(b"dataset karate") and "Broken pipe" not in err and "Traceback" not in err


def test_generator_flags_shape_the_dataset_and_evaluate_makes_it_again(tmp_path, capsys):
    save, metrics = tmp_path / "m.npz", tmp_path / "m.json"
    status, out, _ = run(["train", "--dataset", "csbm", "--nodes", 300, "--avg-degree", 6, "--features", 7,
                          "--classes", 3, "--epochs", 2, "--save", save, "--metrics-json", metrics, *SMALL],
                         capsys)
    assert status == 0
    model, meta = load_checkpoint(save)
    assert meta["dataset_options"] == {"num_nodes": 300, "avg_degree": 6.0, "num_features": 7, "num_classes": 3}
    assert model.in_features == 7 and model.out_features == 3
    status, out, _ = run(["evaluate", save], capsys)
    assert status == 0
    trained = json.loads(metrics.read_text())
    evaluated = {m[1]: float(m[2]) for m in re.finditer(r"^\s*(\w+): (\S+)$", out, re.M)}
    assert evaluated["test_accuracy"] == pytest.approx(trained["test_accuracy"], abs=1e-4)


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset", "karate", "--nodes", "10"], "--dataset karate is not one"),
    (["--dataset", CORA, "--features", "3"], "is not one"),
    (["--dataset", "csbm", "--graphs", "5"], "--graphs is an option of --dataset traffic_scenes, not csbm"),
    (["--dataset", "traffic_scenes", "--avg-degree", "3"], "--avg-degree is an option of --dataset csbm"),
    (["--dataset", "csbm", "--nodes", "0"], "--nodes"),
])
def test_generator_flags_are_refused_where_they_do_not_apply(argv, fragment, capsys):
    try:
        status = main(["train", "--epochs", "1", *argv])
    except SystemExit as exc:  # refused by the parser itself
        status = exc.code
    assert status == 2
    assert fragment in capsys.readouterr().err


def test_train_dataset_options_in_python():
    from gatfast.training import train

    result = train("traffic_scenes", dataset_options={"num_graphs": 12}, epochs=1, quiet=True)
    assert result.metrics["train_loss"] > 0
    with pytest.raises(ValueError, match="unknown option"):
        train("csbm", dataset_options={"num_graph": 3}, epochs=1, quiet=True)
    with pytest.raises(ValueError, match="generated datasets"):
        train("karate", dataset_options={"num_nodes": 3}, epochs=1, quiet=True)
    with pytest.raises(TypeError, match="dict"):
        train("csbm", dataset_options=[("num_nodes", 3)], epochs=1, quiet=True)
