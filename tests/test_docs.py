"""Code in the Markdown docs cannot escape the tests.

``tests/test_readme.py`` executes every block fenced as exactly ```` ```python ```` in README.md.
A block fenced ```` ```py ````, ```` ```python3 ```` or ```` ```pycon ```` would silently not run, so
those tags are refused. The Python blocks of the other Markdown docs (``docs/*.md``) are recipes
with side effects (regenerating a shipped file), so they are not executed; they must compile,
and every name they import must exist, so a renamed function cannot leave them stale.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
OTHER_DOCS = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^([ \t]*)(```+|~~~+)[ \t]*([^\s`]*)[^\n]*\n", re.M)
PYTHONISH = re.compile(r"^(py|python\d*|pycon|ipython\d*)$", re.I)


def fenced_blocks(path):
    """``(tag, code)`` for every fenced block, the code dedented by its fence's indentation."""
    text = path.read_text(encoding="utf-8")
    blocks, pos = [], 0
    while (start := FENCE.search(text, pos)) is not None:
        indent, fence, tag = start.groups()
        end = re.compile(rf"^[ \t]*{re.escape(fence)}[ \t]*$", re.M).search(text, start.end())
        assert end is not None, f"{path.name}: unclosed code fence at offset {start.start()}"
        lines = text[start.end() : end.start()].splitlines()
        blocks.append((tag, "\n".join(line[len(indent) :] for line in lines)))
        pos = end.end()
    return blocks


def test_readme_python_blocks_are_the_ones_test_readme_runs():
    tags = [tag for tag, _ in fenced_blocks(README)]
    odd = [t for t in tags if PYTHONISH.match(t) and t != "python"]
    assert not odd, f"README.md fences {odd}: use exactly ```python so tests/test_readme.py runs the block"
    assert tags.count("python") == README.read_text(encoding="utf-8").count("```python\n") > 0


@pytest.mark.parametrize("path", OTHER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_of_other_docs_compile_and_import_what_exists(path):
    for tag, code in fenced_blocks(path):
        if not PYTHONISH.match(tag):
            continue
        tree = ast.parse(code, filename=str(path))  # a SyntaxError names the file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                missing = [a.name for a in node.names if not hasattr(module, a.name)]
                assert not missing, f"{path.relative_to(ROOT)} imports {missing} from {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
