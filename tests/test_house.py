"""The shape of the code base: floors, private names, module sizes, import side effects, one config."""

import ast
import dataclasses
import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gatfast
from gatfast.cli import build_parser
from gatfast.training.config import PRESETS, TrainConfig

PACKAGE = Path(gatfast.__file__).resolve().parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 400

# each floor may import only the floors listed for it (and the shared private modules)
FLOORS = {
    "kernels": set(),
    "graph": {"kernels"},
    "layers": {"kernels", "graph"},
    "models": {"layers", "kernels", "graph"},
    "optim": {"kernels"},
    "data": {"graph"},
    "sampling": {"graph", "kernels"},
    "training": {"models", "layers", "optim", "data", "graph", "sampling", "diagnostics"},
    "diagnostics": {"models", "layers", "optim", "data", "graph", "training", "kernels"},
    "distributed": {"training", "models", "layers", "optim", "data", "graph", "sampling"},
    "estimators": {"training", "models", "layers", "optim", "data", "graph"},
}
SHARED = {"_validate", "_paths", "_runtime", "_io", "_hooks"}


def _module_name(path):
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path):
    """(module imported, names) for every import inside the gatfast package, absolute names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "gatfast":
                yield module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "gatfast":
                    yield a.name, []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_400_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines: split it by job"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_names_imported_from_another_module(path):
    for module, names in _imports(path):
        private = [n for n in names if n.startswith("_") and n != "__version__"]
        # importing a private *module* (gatfast._validate) is fine; its names are its API
        private = [n for n in private if f"{module}.{n}".split(".")[-1] not in SHARED]
        assert not private, f"{path.relative_to(PACKAGE)} imports private {private} from {module}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_floors_import_only_the_floors_below(path):
    parts = _module_name(path).split(".")
    if len(parts) < 2 or parts[1] not in FLOORS:
        return
    floor = parts[1]
    for module, names in _imports(path):
        target = module.split(".")
        if len(target) < 2:  # "from gatfast import x": a top-level module or subpackage
            used = set(names)
        else:
            used = {target[1]}
        for other in used:
            if other == floor or other in SHARED or other.startswith("_"):
                continue
            assert other in FLOORS[floor], f"{floor} (in {path.name}) must not import gatfast.{other}"


def test_import_gatfast_loads_nothing_heavy():
    # gatfast train starts its compile helper before the library (and Numba) loads
    code = "import sys, gatfast, gatfast.cli; print(sorted(m for m in ('numba', 'scipy', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        gatfast.nothing_here  # noqa: B018
    code = "import gatfast; print(gatfast.training.train is gatfast.train, gatfast.sampling.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "gatfast.sampling"], out.stderr  # subpackages as attributes


def test_import_has_no_side_effects():
    code = (
        "import os, numba\n"
        "before = dict(os.environ)\n"
        "threads = numba.get_num_threads()\n"
        "import gatfast\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "assert numba.get_num_threads() == threads\n"
        "import numpy as np\n"
        "g = gatfast.CSRGraph.from_edge_index(np.array([[0, 1], [1, 0]]), 2)\n"
        "gatfast.GATv2Layer(2, 2).forward(g, np.ones((2, 2), np.float32))\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "assert numba.get_num_threads() == threads\n"  # nor did importing the library on first use
        "print('ok')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    # documented in gatfast/_runtime.py: running a layer changes no environment variable either
    assert out.stdout.strip().splitlines()[-1] == "ok"


def test_every_exported_name_exists_and_exceptions_are_exported():
    assert set(gatfast.__all__) == {*gatfast._HOMES, *gatfast._SUBPACKAGES, "__version__"}
    for name in gatfast.__all__:
        assert hasattr(gatfast, name), name
        assert name in dir(gatfast)
    assert {"TrainingDiverged", "NonFiniteError", "TrainConfig"} <= set(gatfast.__all__)
    assert issubclass(gatfast.NonFiniteError, ValueError)


@pytest.mark.parametrize(
    "old, new, name",
    [
        ("gatfast.layer", "gatfast.layers", "GATv2Layer"),
        ("gatfast.model", "gatfast.models", "GATv2Network"),
        ("gatfast.nn", "gatfast.models", "softmax_cross_entropy"),
        ("gatfast.checkpoint", "gatfast.training", "save_checkpoint"),
        ("gatfast.estimator", "gatfast.estimators", "GATv2Classifier"),
        ("gatfast.experiments", "gatfast.diagnostics.pitfall", "run_pitfall"),
        ("gatfast.gradcheck", "gatfast.diagnostics", "gradcheck_layer"),
        ("gatfast.params", "gatfast.layers", "ParamDict"),
    ],
)
def test_old_module_paths_still_work_and_warn(old, new, name):
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


# ---------------------------------------------------------------------- one configuration
def test_config_round_trips_through_json():
    cfg = TrainConfig.preset("tu", epochs=7, clip_norm=2.5, save="x.npz", dtype="float64", folds=3)
    text = cfg.to_json()
    assert json.loads(text)["epochs"] == 7
    assert TrainConfig.from_json(text) == cfg
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_presets_only_change_recipe_fields_and_are_valid():
    options = TrainConfig.options()
    for name, values in PRESETS.items():
        cfg = TrainConfig.preset(name)
        for key, value in values.items():
            assert options[key][1].recipe, f"preset {name} sets run option {key}"
            assert getattr(cfg, key) == value


@pytest.mark.parametrize(
    "kwargs, exc, fragment",
    [
        (dict(lr=0), ValueError, "lr"),
        (dict(lr="fast"), TypeError, "lr"),
        (dict(epochs=2.5), TypeError, "epochs"),
        (dict(dropout=1.0), ValueError, "dropout"),
        (dict(optimizer="rmsprop"), ValueError, "optimizer"),
        (dict(readout="median"), ValueError, "readout"),
        (dict(dtype="float16"), ValueError, "dtype"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(residual="yes"), TypeError, "residual"),
        (dict(layers=10**6), ValueError, "layers"),
        (dict(learning_rate=0.1), TypeError, "learning_rate"),
    ],
)
def test_config_rejects_bad_values_naming_the_option(kwargs, exc, fragment):
    with pytest.raises(exc, match=fragment):
        TrainConfig(**kwargs)


def test_patience_zero_means_no_early_stopping():
    assert TrainConfig(patience=0).patience is None


def _train_parser():
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return action.choices["train"]


def test_cli_flags_are_generated_from_the_config():
    parser = _train_parser()
    dests = {a.dest for a in parser._actions}
    assert {f.name for f in dataclasses.fields(TrainConfig)} <= dests
    # no flag given: nothing overrides the preset, so the CLI's defaults are the dataclass's
    args = vars(parser.parse_args([]))
    assert set(args) == {"dataset", "preset"}
    help_text = " ".join(parser.format_help().split())
    for name, (default, _) in TrainConfig.options().items():
        assert f"default: {default}" in help_text, name


def test_cli_values_reach_the_config():
    parser = _train_parser()
    args = vars(parser.parse_args(["--lr", "0.02", "--no-normalize-features", "--readout", "max", "--residual"]))
    assert args == {"dataset": "karate", "preset": None, "lr": 0.02, "normalize_features": False,
                    "readout": "max", "residual": True}


def test_train_options_are_the_config_fields():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = gatfast.train("karate", epochs=2, quiet=True)
    assert result.config == TrainConfig(epochs=2, quiet=True)
    with pytest.raises(TypeError, match="learning_rate"):
        gatfast.train("karate", learning_rate=0.1)
