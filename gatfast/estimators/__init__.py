"""scikit-learn estimators: :class:`GATv2Classifier` (nodes of one graph) and
:class:`GATv2GraphClassifier` (whole graphs).

scikit-learn is optional (``pip install gatfast[sklearn]``): the estimator
modules import it, and this package imports them on first use, so
``import gatfast`` never loads scikit-learn. Without it the names resolve to
placeholders whose construction raises an ImportError saying what to install
(so ``from gatfast import *`` and ``dir()``-walking tools keep working).
"""

import importlib

__all__ = ["GATv2Classifier", "GATv2GraphClassifier"]

_MODULES = {"GATv2Classifier": "node", "GATv2GraphClassifier": "graph"}


def _unavailable(name, message):
    def __init__(self, *args, **kwargs):
        raise ImportError(message)

    doc = f"Unavailable: {message}"
    return type(name, (), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


def __getattr__(name):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    except ImportError as exc:
        if exc.name != "sklearn":
            raise
        return _unavailable(name, str(exc))
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
