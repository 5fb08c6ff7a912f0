#!/usr/bin/env bash
# Build the virtual environment in which the DGL 2.1 benchmark peer runs.
#
#   bash bench/setup_dgl_env.sh [TARGET]
#
# TARGET defaults to $GATFAST_DGL_ENV, else ~/.cache/gatfast/dgl-venv; bench/compare.py
# and the README look there too. DGL is a benchmark anchor only: gatfast itself never
# imports it, and this environment is kept apart from the project's own (DGL 2.1 wants
# torch 2.2 and numpy < 2).
#
# gatfast is *not* installed into it. The DGL-side scripts (the compare.py worker,
# bench/dgl_sampling.py, tests/test_dgl_reference.py) import gatfast from the checkout they
# live in, through PYTHONPATH or sys.path, so one environment serves every checkout and
# worktree. What gatfast needs besides numpy and scipy is numba (a release that supports
# numpy < 2 is added to the DGL pins), threadpoolctl (the layer holds BLAS at one thread
# around its row-chunked products) and tqdm.
#
# Running it again is harmless: the venv is reused and pip leaves satisfied pins alone.
# Set PYTHON to choose the interpreter (default python3.11, a version DGL 2.1.0 has wheels for).
set -euo pipefail

TARGET="${1:-${GATFAST_DGL_ENV:-$HOME/.cache/gatfast/dgl-venv}}"
PYTHON="${PYTHON:-python3.11}"

if [ ! -x "$TARGET/bin/python" ]; then
    echo "creating $TARGET with $PYTHON"
    mkdir -p "$(dirname "$TARGET")"
    "$PYTHON" -m venv "$TARGET"
else
    echo "reusing $TARGET"
fi

# The DGL 2.1 pins, plus numba for gatfast's kernels (0.59/0.60 support numpy 1.26), threadpoolctl
# for its layers, and pytest and pytest-benchmark for tests/test_dgl_reference.py and the DGL
# cases of the bench/ suites.
"$TARGET/bin/python" -m pip install --quiet \
    dgl==2.1.0 torch==2.2.1 torchdata==0.7.1 "numpy<2" "pandas<2.3" scipy pydantic pyyaml \
    requests psutil tqdm "numba>=0.59,<0.61" "threadpoolctl>=3.1" pytest pytest-benchmark

# A numba of another version than gatfast's own environment must not share its kernel cache
# (gatfast compiles with cache=True into gatfast/**/__pycache__): numba throws away an index
# written by another version, so the two environments would recompile each other's kernels
# on every switch. This .pth file, run by python at start-up, gives the DGL environment a
# cache directory of its own unless NUMBA_CACHE_DIR is already set.
SITE="$("$TARGET/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf 'import os; os.environ.setdefault("NUMBA_CACHE_DIR", %s)\n' \
    "$("$TARGET/bin/python" -c 'import sys; print(repr(sys.argv[1]))' "$TARGET/numba-cache")" \
    > "$SITE/gatfast_dgl_numba_cache.pth"

# Fails loudly if the environment cannot run DGL's GATv2Conv on the CPU or a gatfast layer.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DGLBACKEND=pytorch PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$TARGET/bin/python" - <<'EOF'
import dgl
import numba
import numpy as np
import torch
from dgl.nn import GATv2Conv

import gatfast

g = dgl.graph(([0, 1, 2, 0], [1, 2, 0, 0]), num_nodes=3)
out = GATv2Conv(4, 2, num_heads=2)(g, torch.ones(3, 4))
assert tuple(out.shape) == (3, 2, 2)
layer = gatfast.GATv2Layer(4, 2, heads=2, seed=0)
y, cache = layer.forward(gatfast.CSRGraph.from_edge_index(np.array([[0, 1, 2, 0], [1, 2, 0, 0]]), 3),
                         np.ones((3, 4), np.float32))
layer.backward(cache, np.ones_like(y))
print(f"ok: dgl {dgl.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
      f"numba {numba.__version__}, gatfast from {gatfast.__file__}")
EOF
echo "DGL python: $TARGET/bin/python"
