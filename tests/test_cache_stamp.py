"""Numba's cache of the kernels follows their sources (``gatfast/kernels/cache_stamp.py``)."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import gatfast
from gatfast.kernels import cache_stamp, forward


def _fake_dispatcher(folder):
    return SimpleNamespace(_cache=SimpleNamespace(_cache_path=str(folder)))


def test_refresh_deletes_the_cache_once_per_change_of_sources(tmp_path):
    sources, cache = tmp_path / "src", tmp_path / "cache"
    sources.mkdir()
    cache.mkdir()
    (sources / "a.py").write_text("x = 1\n")
    (sources / "b.py").write_text("y = 2\n")
    entries = ("a.f-3.py311.nbi", "a.f-3.py311.1.nbc", "b.g-1.py311.nbi")
    for name in entries + ("notes.txt",):
        (cache / name).write_text("old")
    dispatcher = _fake_dispatcher(cache)
    assert cache_stamp.refresh(sources, dispatcher)  # no stamp yet: compiled from unknown sources
    assert sorted(p.name for p in cache.iterdir()) == [
        "gatfast-kernels.stamp",
        "gatfast-kernels.stamp.lock",
        "notes.txt",
    ]
    assert (cache / cache_stamp.STAMP).read_text() == cache_stamp.sources_digest(sources)
    for name in entries:  # compiled again from these sources: kept
        (cache / name).write_text("new")
    assert not cache_stamp.refresh(sources, dispatcher)
    assert all((cache / name).read_text() == "new" for name in entries)
    (sources / "b.py").write_text("y = 3\n")  # one helper module changes
    assert cache_stamp.refresh(sources, dispatcher)
    assert not any((cache / name).exists() for name in entries)
    (sources / "c.py").write_text("")  # a module added
    (cache / entries[0]).write_text("new")
    assert cache_stamp.refresh(sources, dispatcher)
    assert not (cache / entries[0]).exists()


def test_refresh_leaves_alone_what_it_cannot_use(tmp_path):
    assert not cache_stamp.refresh(tmp_path, SimpleNamespace())  # no cache (caching off)
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert not cache_stamp.refresh(tmp_path, _fake_dispatcher(blocked / "cache"))  # cannot be a folder


def test_the_kernels_cache_carries_the_digest_of_todays_sources():
    folder = Path(forward.__file__).parent
    stamp = Path(cache_stamp.cache_folder(forward.gatv2_forward_rows)) / cache_stamp.STAMP
    assert stamp.read_text() == cache_stamp.sources_digest(folder)


EDITED_HELPER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from gatfast.kernels import reduce
    reduce.column_sums(np.ones((3, 2)), np.empty(2))  # compiled and saved in the cache
    folder = reduce.column_sums._cache._cache_path
    print(sorted(n for n in os.listdir(folder) if n.startswith("reduce.column_sums")))
    """
)


@pytest.mark.slow
def test_an_edited_helper_module_drops_the_other_modules_entries(tmp_path):
    """A kernel's cache entry holds the helpers it calls: after any kernel module's source changes, a
    new process finds no entry of another module's kernel to load (Numba itself keeps those)."""
    copy = tmp_path / "pkg"
    shutil.copytree(
        Path(gatfast.__file__).parent, copy / "gatfast", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**os.environ, "PYTHONPATH": str(copy), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "run.py"
    script.write_text(EDITED_HELPER)

    def run():
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = run()
    assert ".nbi" in first
    assert run() == first  # unchanged sources: the entry stays and loads
    with open(copy / "gatfast" / "kernels" / "simd.py", "a") as handle:
        handle.write("\n# an edit of a helper module that reduce.py does not even import\n")
    script.write_text(EDITED_HELPER.replace("reduce.column_sums(np.ones((3, 2)), np.empty(2))", "pass"))
    assert "nbi" not in run()
