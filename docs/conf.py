"""Sphinx configuration: the API reference from gatfast's numpydoc docstrings, and the Markdown docs.

Build: ``python -m sphinx -W --keep-going -b html docs runs/docs`` (from the repository root;
``pip install -e ".[docs]"`` brings what it needs). Stub pages are generated into
``docs/generated/`` (ignored by git).
"""

import importlib
import shutil
import sys
import warnings
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document this checkout, whatever gatfast is installed
sys.path.insert(0, str(DOCS))  # options_doc, beside this file
# autosummary's stub pages are regenerated on every build: a stale stub of a removed name would fail -W
shutil.rmtree(DOCS / "generated", ignore_errors=True)

import options_doc  # noqa: E402

import gatfast  # noqa: E402

project = "gatfast"
release = version = gatfast.__version__
author = "the gatfast authors"
copyright = "the gatfast authors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "results/pitfall/summary.md"]
templates_path = ["_templates"]
html_theme = "alabaster"
html_static_path = []

# autodoc / autosummary: every page lists what the module's __all__ exports, nothing else
autosummary_generate = True
autosummary_ignore_module_all = False
autosummary_imported_members = True  # a package's __all__ names objects defined in its modules
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc sections carry the types


def _defining_modules(package):
    """The modules that define what ``package`` exports (found, not listed, so renames need no edit)."""
    module = importlib.import_module(package)
    found = {getattr(getattr(module, name), "__module__", None) for name in module.__all__}
    return sorted(m for m in found if m and m.startswith(package + "."))


autosummary_context = {
    "top_level": list(gatfast.__all__),
    # the kernels document their argument layouts per module, and their functions refer to that
    "module_docs": {"gatfast.kernels": _defining_modules("gatfast.kernels")},
}

# numpydoc renders the sections; the member lists come from the autosummary class template
numpydoc_show_class_members = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

myst_heading_anchors = 3

# importing the deprecated alias modules warns; they are not documented
warnings.filterwarnings("ignore", category=FutureWarning, module="gatfast")


def _trainconfig_parameters(app, what, name, obj, options, lines):
    """Add TrainConfig's generated Parameters section (see docs/options_doc.py)."""
    if what == "class" and getattr(obj, "__qualname__", None) == "TrainConfig":
        lines[:] = options_doc.with_parameters(lines)


def _defined_outside(app, what, name, obj, skip, options):
    """Skip class members that come from another package (scikit-learn's ``set_*_request``)."""
    if what != "class":
        return None
    target = obj.fget if isinstance(obj, property) else obj
    module = getattr(target, "__module__", None)
    if module is not None and module.split(".")[0] != "gatfast":
        return True
    return None


def setup(app):
    # before numpydoc (priority 500) turns the sections into reST
    app.connect("autodoc-process-docstring", _trainconfig_parameters, priority=400)
    app.connect("autodoc-skip-member", _defined_outside)
