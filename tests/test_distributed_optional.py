"""The ``distributed`` extra is optional: nothing imports dask unless a cluster is asked for, and without
it a cluster option is a one-line hint. Runs with or without the extra (dask is hidden in a subprocess)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDE_DASK = "import sys; sys.modules['dask'] = None; sys.modules['distributed'] = None\n"


def _python(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_gatfast_and_one_process_training_never_import_dask():
    out = _python(
        "import sys, gatfast\n"
        "gatfast.train('karate', epochs=1, quiet=True)\n"
        "from gatfast.cli import build_parser; build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'gatfast.distributed')))\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_without_the_extra_a_cluster_option_is_a_one_line_hint():
    out = _python(HIDE_DASK + "import gatfast.distributed\n")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ImportError: gatfast.distributed needs dask and distributed: pip install 'gatfast[distributed]'"
    )
    out = _python(
        HIDE_DASK
        + "from gatfast.cli import main; sys.exit(main(['train', '--workers', '2', '--epochs', '1']))\n"
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "gatfast train: error: gatfast.distributed needs dask and distributed: pip install 'gatfast[distributed]'"
    ]
