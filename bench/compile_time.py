"""First-call cost of gatfast: Numba compilation with an empty cache, and loading with a warm one.

Runs two fresh processes that share a new, empty ``NUMBA_CACHE_DIR``:

* **cold**: nothing cached, so the first calls compile every kernel;
* **warm**: the same code again, now loading the kernels from the cache.

In each it measures importing the library (``import gatfast`` loads its
parts on first use, so the child imports ``gatfast.layers`` and
``gatfast.training``), the first forward + backward of one
layer on a small dense graph, and then the first training step of the
2-layer network on a slice of Cora (sparse features, dropout, Adam), which
needs further kernel specialisations (sparse products, attention dropout).
Then whole first ``gatfast train`` runs, the README's command and Cora's:
each cold (a new empty cache) with the first-run compile helper
(``gatfast/_precompile.py``) and without it (``GATFAST_PRECOMPILE=0``),
alternating, ``--train-rounds`` times (0: none), and once warm.
Results go to ``compile_time.md`` and ``compile_time.json`` in ``--out``
(default ``runs/bench/compile_time/``, untracked; the tracked
``bench/results/`` only with ``--update-results``). Both children run with
``OMP_WAIT_POLICY=PASSIVE``, as the ``compare.py`` workers.

Usage::

    python bench/compile_time.py                    # -> runs/bench/compile_time/
    python bench/compile_time.py --update-results   # refresh bench/results/compile_time.*
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import outdirs  # noqa: E402

from gatfast._io import atomic_write_text  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import gatfast.layers, gatfast.training
t_import = time.perf_counter() - t0
sys.path.insert(0, {bench!r})
import workloads

w = workloads.make_workload("small-batch", "tiny")
runner = workloads.GatfastRunner(w)
t0 = time.perf_counter()
runner.forward_backward()
t_layer = time.perf_counter() - t0
t0 = time.perf_counter()
runner.forward_backward()
t_layer_again = time.perf_counter() - t0

train = workloads.GatfastRunner(workloads.make_workload("cora-train", "tiny"))
t0 = time.perf_counter()
train.train_step()
t_train = time.perf_counter() - t0
t0 = time.perf_counter()
train.train_step()
t_train_again = time.perf_counter() - t0
print(json.dumps({{"import_s": t_import, "first_layer_fwd_bwd_s": t_layer, "second_layer_fwd_bwd_s": t_layer_again,
                  "first_train_step_s": t_train, "second_train_step_s": t_train_again}}))
"""


def timed_child(args, cache_dir, threads, **env_extra):
    """``(stdout, seconds)`` of one Python process, interpreter start to exit, on ``cache_dir``."""
    env = dict(
        os.environ,
        NUMBA_CACHE_DIR=str(cache_dir),
        NUMBA_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        OPENBLAS_NUM_THREADS=str(threads),
        OMP_WAIT_POLICY="PASSIVE",
        **env_extra,
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"python {' '.join(args[:3])} failed with exit code {proc.returncode}")
    return proc.stdout, wall


def run(cache_dir, threads):
    stdout, wall = timed_child(["-c", CHILD.format(bench=str(HERE))], cache_dir, threads)
    out = json.loads(stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out


TRAIN_RUNS = {
    "gatfast train": ["train"],
    "gatfast train --dataset cora --epochs 3": ["train", "--dataset", "cora", "--epochs", "3"],
}


def train_wall(argv, cache_dir, threads, helper):
    """Seconds of one ``gatfast`` process, interpreter start to exit, on ``cache_dir``."""
    env = {"GATFAST_PRECOMPILE": "1" if helper else "0"}
    return timed_child(["-m", "gatfast", *argv, "--quiet"], cache_dir, threads, **env)[1]


def train_runs(rounds, threads):
    """``{command: {"cold_helper": [s...], "cold_alone": [s...], "warm": s}}``, cold runs alternating."""
    res = {}
    for label, argv in TRAIN_RUNS.items():
        res[label] = {"cold_helper": [], "cold_alone": []}
        for _ in range(rounds):
            for helper in (True, False):
                cache_dir = Path(tempfile.mkdtemp(prefix="gatfast-numba-cache-"))
                try:
                    wall = train_wall(argv, cache_dir, threads, helper)
                    res[label]["cold_helper" if helper else "cold_alone"].append(wall)
                    if helper and "warm" not in res[label]:
                        res[label]["warm"] = train_wall(argv, cache_dir, threads, helper)
                finally:
                    shutil.rmtree(cache_dir, ignore_errors=True)
    return res


def train_markdown(train):
    def fmt(values):
        runs = " / ".join(f"{v:.1f}" for v in values)
        return f"{runs} (mean {sum(values) / len(values):.1f})" if len(values) > 2 else runs

    lines = [
        "First `gatfast train` runs, interpreter start to exit (s): cold runs alternate with and without the "
        "compile helper, each on a new empty cache; warm: the same command again on a filled cache.",
        "",
        "| command | cold, helper | cold, `GATFAST_PRECOMPILE=0` | warm |",
        "|---|---:|---:|---:|",
    ]
    for label, r in train.items():
        lines.append(f"| `{label}` | {fmt(r['cold_helper'])} | {fmt(r['cold_alone'])} | {r['warm']:.1f} |")
    lines.append("")
    return "\n".join(lines)


def markdown(res, meta):
    rows = [
        ("import gatfast.layers, gatfast.training", "import_s"),
        ("first layer forward + backward (small dense graph)", "first_layer_fwd_bwd_s"),
        ("second call of the same", "second_layer_fwd_bwd_s"),
        ("first 2-layer training step (Cora slice, sparse x, dropout, Adam)", "first_train_step_s"),
        ("second training step", "second_train_step_s"),
        ("whole process (interpreter start to exit)", "process_wall_s"),
    ]
    lines = [
        "# gatfast first-call (compilation) cost",
        "",
        f"{meta['date']}, "
        + (f"{meta['cpu']}, " if meta.get("cpu") else "")
        + f"{meta['threads']} threads, numba {meta['numba']}"
        + (f", `{meta['command']}`" if meta.get("command") else "")
        + ". Two fresh processes share one "
        "new NUMBA_CACHE_DIR: *cold* starts with it empty (every kernel is compiled), *warm* runs after it "
        "(kernels loaded from the cache).",
        "",
        "| step | cold cache (s) | warm cache (s) |",
        "|---|---:|---:|",
    ]
    for label, key in rows:
        lines.append(f"| {label} | {res['cold'][key]:.3f} | {res['warm'][key]:.3f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    outdirs.add_options(parser, "compile_time")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--train-rounds", type=int, default=2, help="cold gatfast train runs of each kind")
    args = parser.parse_args(argv)
    out = outdirs.resolve_out(parser, args, "compile_time")
    cache_dir = Path(tempfile.mkdtemp(prefix="gatfast-numba-cache-"))
    try:
        res = {"cold": run(cache_dir, args.threads), "warm": run(cache_dir, args.threads)}
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    if args.train_rounds > 0:
        res["train"] = train_runs(args.train_rounds, args.threads)
    import numba
    from rooflib.cpu import CPU

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "threads": args.threads,
        "cpu": f"{CPU['model']} ({os.cpu_count()} CPUs), {CPU['simd']} ({CPU['simd_bits']}-bit)",
        "numba": numba.__version__,
        "omp_wait_policy": "PASSIVE",
        "command": " ".join(["python", "bench/compile_time.py", *(sys.argv[1:] if argv is None else argv)]),
    }
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(res, meta) + ("\n" + train_markdown(res["train"]) if "train" in res else "")
    atomic_write_text(out / "compile_time.md", text)  # the permissions of the file replaced, or the umask's
    atomic_write_text(out / "compile_time.json", json.dumps({"meta": meta, **res}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
