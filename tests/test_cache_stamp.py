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
    assert cache_stamp.refresh(sources, [], dispatcher)  # no stamp yet: compiled from unknown sources
    assert sorted(p.name for p in cache.iterdir()) == [
        "gatfast-kernels.stamp",
        "gatfast-kernels.stamp.lock",
        "notes.txt",
    ]
    assert (cache / cache_stamp.STAMP).read_text() == cache_stamp.sources_digest(sources)
    for name in entries:  # compiled again from these sources: kept
        (cache / name).write_text("new")
    assert not cache_stamp.refresh(sources, [], dispatcher)
    assert all((cache / name).read_text() == "new" for name in entries)
    (sources / "b.py").write_text("y = 3\n")  # one helper module changes
    assert cache_stamp.refresh(sources, [], dispatcher)
    assert not any((cache / name).exists() for name in entries)
    (sources / "c.py").write_text("")  # a module added
    (cache / entries[0]).write_text("new")
    assert cache_stamp.refresh(sources, [], dispatcher)
    assert not (cache / entries[0]).exists()


def test_refresh_leaves_alone_what_it_cannot_use(tmp_path):
    assert not cache_stamp.refresh(tmp_path, [], SimpleNamespace())  # no cache (caching off)
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert not cache_stamp.refresh(tmp_path, [], _fake_dispatcher(blocked / "cache"))  # cannot be a folder


def test_stamp_dispatchers_adds_the_digest_once():
    cache_file = SimpleNamespace(_source_stamp=(1.5, 100))
    module = SimpleNamespace(kernel=SimpleNamespace(_cache=SimpleNamespace(_cache_file=cache_file)), other=3)
    assert cache_stamp.stamp_dispatchers([module, module], "d1") == 2
    assert cache_file._source_stamp == (cache_stamp.STAMP, (1.5, 100), "d1")
    cache_stamp.stamp_dispatchers([module], "d2")  # the sources changed again in this process
    assert cache_file._source_stamp == (cache_stamp.STAMP, (1.5, 100), "d2")


def test_the_kernels_cache_carries_the_digest_of_todays_sources():
    from gatfast.kernels import dense_grads, gemm, reduce, small_layer

    folder = Path(forward.__file__).parent
    digest = cache_stamp.sources_digest(folder)
    stamp = Path(cache_stamp.cache_folder(forward.gatv2_forward_rows)) / cache_stamp.STAMP
    assert stamp.read_text() == digest
    for kernel in (
        forward.gatv2_forward_rows,
        gemm.matmul_rows,
        dense_grads.dense_grad_chunks,
        reduce.column_sums,
        small_layer.small_layer_forward,
    ):  # modules __init__ does not import
        assert kernel._cache._cache_file._source_stamp[2] == digest


STALE_WRITER = textwrap.dedent(
    """
    import subprocess, sys
    import numpy as np
    from gatfast.kernels import reduce  # this process: the old sources
    with open(sys.argv[1], "a") as handle:  # an edit of a helper module that reduce.py does not import
        handle.write("\\n# edited\\n")
    subprocess.run([sys.executable, "-c", "import gatfast.kernels"], check=True, cwd=sys.argv[2])  # a refresh
    reduce.column_sums(np.ones((3, 2), np.float32), np.empty(2, np.float32))  # saved after the refresh
    """
)

READER = textwrap.dedent(
    """
    import numpy as np
    from gatfast.kernels import reduce
    reduce.column_sums(np.ones((3, 2), np.float32), np.empty(2, np.float32))
    stats = reduce.column_sums.stats
    print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
    """
)


@pytest.mark.slow
def test_an_entry_saved_from_old_sources_never_loads(tmp_path):
    """A kernel's cache entry holds the helpers it calls. A process that still runs the old sources
    saves an entry after another process refreshed the cache for edited ones: a process with the
    edited sources compiles instead of loading it, and loads its own entry the next time."""
    copy = tmp_path / "pkg"
    shutil.copytree(
        Path(gatfast.__file__).parent, copy / "gatfast", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**os.environ, "PYTHONPATH": str(copy), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run(code, *args):
        script = tmp_path / "script.py"
        script.write_text(code)
        done = subprocess.run(
            [sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run(STALE_WRITER, str(copy / "gatfast" / "kernels" / "simd.py"), str(tmp_path))  # not the repository's
    assert run(READER).split() == ["0", "1"]  # compiled: the stale entry did not load
    assert run(READER).split() == ["1", "0"]  # its own entry loads
