"""bench/profile_step.py and bench/proflib.py: sample attribution by hand, and a tiny end-to-end run under perf.

No timing assertions: the end-to-end run checks that the report attributes
samples to the kernels the step ran, and that its shares add up.
"""

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import profile_step  # noqa: E402
import proflib  # noqa: E402

SITE = "/home/u/.venv/lib/python3.11/site-packages"
SCRIPT = f"""\
  101      500000      7f0000001010 [unknown] (/tmp/perf-101.map)
  101      500000      7f0000001200 [unknown] ([JIT] tid 101)
  102      500000      7f0000002008 forward.gatv2_forward_rows (/tmp/perf-101.map)
  101      500000      7f0000090000 [unknown] ([JIT] tid 101)
  101      500000      7fab00000010 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)
  101      500000      7fab00000020 gc_collect_main (/usr/lib/libpython3.11.so.1.0)
  101      500000      7fab00000030 __expf_fma (/usr/lib/x86_64-linux-gnu/libm.so.6)
  101      500000      7fab00000040 FLOAT_multiply ({SITE}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so)
  101      500000      7fab00000050 sgemm_kernel ({SITE}/numpy.libs/libscipy_openblas64_-32a4b2a6.so)
  101      500000      7fab00000060 Dispatcher_call ({SITE}/numba/_dispatcher.cpython-311-x86_64-linux-gnu.so)
  101      500000      7fab00000070 LLVMPY_Foo ({SITE}/llvmlite/binding/libllvmlite.so)
  101      500000      7fab00000080 csr_matvec ({SITE}/scipy/sparse/_sparsetools.cpython-311-x86_64-linux-gnu.so)
  101      500000      7fab00000090 _PyEval_EvalFrameDefault (/usr/bin/python3.11)
  101      500000      ffffffff81000000 clear_page_erms ([kernel.kallsyms])
  101      500000      7fab000000a0 something (/opt/lib/libother.so)
  101     1000000      7fab000000b0 malloc (/usr/lib/x86_64-linux-gnu/libc.so.6)
not a sample line
"""


def test_parse_script_reads_tid_period_ip_symbol_and_object():
    samples = proflib.parse_script(SCRIPT)
    assert len(samples) == 16
    assert samples[0] == (101, 0x7F0000001010, "[unknown]", "/tmp/perf-101.map", 500000)
    assert samples[2][2] == "forward.gatv2_forward_rows"
    assert samples[1][3] == "[JIT] tid 101"
    assert samples[-1][4] == 1000000


def test_jit_samples_go_to_the_nearest_entry_below_them_and_no_farther_than_the_cap():
    jit = proflib.JitMap(
        [(0x7F0000001000, "gemm.matmul_rows"), (0x7F0000002000, "forward.gatv2_forward_rows")]
    )
    assert jit.name(0x7F0000001000) == "gemm.matmul_rows"
    assert jit.name(0x7F0000001FFF) == "gemm.matmul_rows"
    assert jit.name(0x7F0000002000) == "forward.gatv2_forward_rows"
    assert jit.name(0x7F0000000FFF) is None  # below every entry
    assert jit.name(0x7F0000002000 + proflib.MAX_FUNCTION_BYTES) is None  # too far above the last one


def test_attribute_groups_every_sample_once():
    samples = proflib.parse_script(SCRIPT)
    jit = proflib.JitMap(
        [(0x7F0000001000, "gemm.matmul_rows"), (0x7F0000002000, "forward.gatv2_forward_rows")]
    )
    times = proflib.attribute(samples, jit)
    assert times == Counter(
        {
            "kernel gemm.matmul_rows": 1_000_000,
            "kernel forward.gatv2_forward_rows": 500_000,
            proflib.UNKNOWN_JIT: 500_000,  # 0x7f0000090000 lies more than the cap above forward's entry
            "Python: interpreter and objects": 1_000_000,  # libpython and the python3.11 binary
            "Python: garbage collector": 500_000,
            "libm (exp, log)": 500_000,
            "NumPy": 500_000,  # an extension under site-packages is not the interpreter
            "BLAS": 500_000,  # numpy.libs' OpenBLAS is BLAS, not NumPy
            "Numba dispatch and runtime, llvmlite": 1_000_000,
            "SciPy": 500_000,
            "operating system": 500_000,
            proflib.OTHER: 500_000,
            "libc (malloc, memcpy)": 1_000_000,  # weighted by its period, not counted
        }
    )
    assert sum(times.values()) == sum(s[4] for s in samples)


def test_rows_give_shares_and_cpu_milliseconds_per_step():
    rows = proflib.rows(Counter({"a": 300_000_000, "b": 100_000_000}), steps=10)
    assert rows[0] == ("a", 0.75, 30.0)  # 300 ms sampled over 10 steps
    assert rows[1] == ("b", 0.25, 10.0)
    assert proflib.rows(Counter(), 0) == []


def test_top_symbols_are_weighted_by_period_and_leave_out_compiled_code():
    top = proflib.top_symbols(proflib.parse_script(SCRIPT), count=2)
    assert top[0] == ("malloc", "libc.so.6", 1 / 8.5)  # the one sample of twice the period
    assert all(not name.startswith("perf-") for _, name, _ in top)
    assert (
        abs(sum(share for *_, share in proflib.top_symbols(proflib.parse_script(SCRIPT), 100)) - 13 / 17)
        < 1e-12
    )


def test_mapping_end_bounds_a_code_dump_by_its_mapping():
    maps = (
        "7f0000000000-7f0000010000 r-xp 00000000 00:00 0\n7f0000020000-7f0000030000 rw-p 00000000 00:00 0\n"
    )
    assert proflib.mapping_end(maps, 0x7F0000000010) == 0x7F0000010000
    assert proflib.mapping_end(maps, 0x7F0000020000) == 0x7F0000030000
    assert proflib.mapping_end(maps, 0x7F0000010000) is None  # the end is outside its mapping


def test_hot_listing_shows_the_sampled_instructions_with_context():
    text = "\n".join(f"    {0x1000 + 4 * k:x}:\t90 90 90 90    \tnop{k}" for k in range(20))
    instructions = proflib.parse_objdump(text)
    assert len(instructions) == 20 and instructions[0x1000] == "90 90 90 90  nop0"
    lines = proflib.hot_listing(
        Counter({0x1000 + 4 * 5: 3, 0x1000 + 4 * 15: 1}), instructions, top=2, context=1
    )
    assert lines[0].startswith("  0.0%  1010") and lines[1].startswith(" 75.0%  1014")
    assert "..." in lines  # instructions 6 and 14 are not neighbours
    assert lines[-2].startswith(" 25.0%  103c")
    assert proflib.hot_listing(Counter(), instructions) == []


def _perf_works():
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-o", os.devnull, "true"], capture_output=True, text=True
    )
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _perf_works(), reason="perf is not installed or may not sample this process")
def test_profile_end_to_end_attributes_the_steps_kernels(tmp_path):
    out = tmp_path / "prof"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "profile_step.py"),
            "--workloads",
            "small-batch",
            "--size",
            "tiny",
            "--seconds",
            "1",
            "--out",
            str(out),
            "--hot",
            "forward.gatv2_forward_rows",
            "--hot-top",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "profile.json").read_text())
    r = result["workloads"]["small-batch"]
    assert r["steps"] > 0 and r["samples"] > 0
    names = [row[0] for row in r["rows"]]
    assert "kernel forward.gatv2_forward_rows" in names
    assert "kernel backward.gatv2_backward_target_blocks" in names
    assert abs(sum(row[1] for row in r["rows"]) - 1.0) < 1e-9
    assert 0 < r["cpu_per_wall"] <= 2.5  # at most the 2 threads' time (and sampling's slack)
    assert "samples in forward.gatv2_forward_rows" in r["hot"][0]
    md = (out / "profile.md").read_text()
    assert "smoke run" in md and "Hot instructions of `forward.gatv2_forward_rows`" in md


def test_profile_refuses_unknown_and_per_call_workloads(capsys):
    for bad in ("nope", "scene"):
        with pytest.raises(SystemExit):
            profile_step.main(["--workloads", bad])
        assert "--workloads" in capsys.readouterr().err


def test_profile_writes_untracked_unless_asked_and_never_from_a_smoke_run(capsys):
    import outdirs

    assert not outdirs.is_tracked_results(outdirs.default_out("profile"))
    for argv, message in (
        (["--out", str(outdirs.RESULTS)], "inside bench/results/"),
        (["--update-results", "--size", "tiny"], "smoke run"),
    ):
        with pytest.raises(SystemExit):  # refused before anything runs
            profile_step.main(["--workloads", "cora", *argv])
        assert message in capsys.readouterr().err
