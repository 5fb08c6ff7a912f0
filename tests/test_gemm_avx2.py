"""The dense products' tiles as Numba compiles them for AVX2 (``NUMBA_CPU_NAME=haswell``), to the bit.

An AVX-512 host runs the other width and tile heights of ``kernels/gemm.py`` only in such a process: 8-lane
float32 vectors, no 4-vector tile in the walks, 8 rows of 2 vectors (their accumulators fill AVX2's 16
registers). The same order of operations as on AVX-512, so the same bits as the plain in-order sums.
"""

import os
import subprocess
import sys

import llvmlite.binding as llvm
import pytest

SCRIPT = r"""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])  # the tests' folder: fused_order
from fused_order import in_order
from gatfast.kernels import gemm, readonly
from gatfast.kernels.gemm import matmul_pair_rows, matmul_rows

assert not gemm.WIDE and gemm.VECTOR_BYTES == 32, (gemm.WIDE, gemm.VECTOR_BYTES)

rng = np.random.default_rng(11)
for dtype in (np.float32, np.float64):
    none = np.zeros(0, dtype)
    for width in (1, 7, 8, 9, 16, 17, 24, 33, 64):
        for n in (1, 7, 8, 9, 17, 2 * gemm.ROW_BLOCK + 7):
            a = rng.standard_normal((n, 19)).astype(dtype)
            a[::2] *= 1e3
            b = rng.standard_normal((19, width)).astype(dtype)
            bias = rng.standard_normal(width).astype(dtype)
            for use_bias in (none, bias):
                start = rng.standard_normal((n, width)).astype(dtype)
                for accumulate in (False, True):
                    c = start.copy()
                    matmul_rows(0, n, readonly(a), readonly(b), readonly(use_bias), accumulate, c)
                    want = in_order(a, b, use_bias, start if accumulate else None)
                    assert c.tobytes() == want.tobytes(), (dtype, width, n, accumulate)
            b2 = rng.standard_normal((19, 5)).astype(dtype)
            c1, c2 = np.full((n, width), 7.0, dtype), np.full((n, 5), 7.0, dtype)
            matmul_pair_rows(0, n, readonly(a), readonly(b), readonly(bias), c1, readonly(b2), readonly(none), c2)
            assert c1.tobytes() == in_order(a, b, bias, None).tobytes(), (dtype, width, n)
            assert c2.tobytes() == in_order(a, b2, none, None).tobytes(), (dtype, width, n)
print("ok")
"""


@pytest.mark.slow
@pytest.mark.skipif(
    not llvm.get_host_cpu_features().get("avx2", False), reason="the host cannot run AVX2 code"
)
def test_avx2_tiles_follow_the_order_of_operations(tmp_path):
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    env.pop("NUMBA_CPU_FEATURES", None)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, os.path.dirname(__file__)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "ok"
