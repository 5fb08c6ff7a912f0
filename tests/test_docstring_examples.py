"""The Examples sections of gatfast's docstrings run as written (doctests), as the README's code does.

Every module of the package is searched (private ones too: ``gatfast._random`` holds the public
``RandomKeys``), except ``gatfast.__main__`` (importing it runs the command line) and the deprecated
alias modules (they only re-export, and warn when imported). An example that needs an optional
dependency skips when it is missing (``OPTIONAL``); one that cannot run here at all (it needs torch
objects, or writes files) is marked ``# doctest: +SKIP`` in the docstring itself.
"""

import doctest
import importlib
import pkgutil
import warnings

import pytest

import gatfast

#: module prefix -> the optional package its examples import
OPTIONAL = {"gatfast.estimators": "sklearn", "gatfast.distributed": "distributed"}
#: importing these runs or warns (the CLI entry point, the deprecated aliases of gatfast 0.2)
EXCLUDED = {
    "gatfast.__main__",
    "gatfast.checkpoint",
    "gatfast.estimator",
    "gatfast.experiments",
    "gatfast.gradcheck",
    "gatfast.layer",
    "gatfast.model",
    "gatfast.nn",
    "gatfast.params",
}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names():
    names = ["gatfast"] + [m.name for m in pkgutil.walk_packages(gatfast.__path__, "gatfast.")]
    return sorted(n for n in names if n not in EXCLUDED)


def _with_examples():
    """Module names whose source holds a ``>>>`` line (found without importing optional deps)."""
    out = []
    for name in _module_names():
        spec = importlib.util.find_spec(name)
        with open(spec.origin, encoding="utf-8") as fh:
            if ">>>" in fh.read():
                out.append(name)
    return out


def test_the_modules_with_examples_are_found():
    found = _with_examples()
    assert {"gatfast.graph.csr", "gatfast.training.config", "gatfast.sampling.sampler"} <= set(found)
    assert not set(found) & EXCLUDED


@pytest.mark.parametrize("name", _with_examples())
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    for prefix, dependency in OPTIONAL.items():
        if name.startswith(prefix):
            pytest.importorskip(dependency)
    monkeypatch.chdir(tmp_path)  # an example may write files
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    assert tests, f"{name} has '>>>' lines but no doctest was found in its docstrings"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # an example must not show a deprecated call
        for test in tests:
            runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, (
        f"{results.failed} of {results.attempted} examples in {name} failed (see above)"
    )
