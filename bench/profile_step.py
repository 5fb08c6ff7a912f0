"""Where a gatfast step's CPU time goes, kernel by kernel: ``perf`` samples of a loop of steps.

For each workload a fresh process builds it, runs its forward + backward
(the training step for a training workload) until warm, lists where its
compiled gatfast functions start, then samples itself with ``perf record``
(software clock: it works in virtual machines without hardware counters)
while it repeats the step for ``--seconds``. The report gives, per
workload, the median step time and each kernel's, the interpreter's,
NumPy's, the garbage collector's ... share of the sampled CPU time and
CPU milliseconds per step (summed over the threads), and the CPU time per
wall time (how busy the threads were: 2.0 is both of 2 threads all the
time). How the samples are attributed: ``proflib.py``.

Why: the roofline (``roofline.py``) times each kernel alone; this shows
the step as it runs, Python and waiting included, where per-call costs add
up (``scene-batch-train``: hundreds of small calls a step).

Needs ``perf`` (Linux; ``kernel.perf_event_paranoid`` at most 2, the
default, lets a process sample itself). ``--size tiny`` is a smoke run.

Usage::

    python bench/profile_step.py --workloads small-batch,scene-batch-train
    python bench/profile_step.py --workloads large-edge --threads 2 --seconds 20
    python bench/profile_step.py --workloads cora --size tiny --seconds 2   # a smoke run

Output (atomically, into ``--out``, default ``runs/bench/profile/``, untracked):
``profile.md`` and ``profile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import outdirs  # noqa: E402
import proflib  # noqa: E402
import workloads  # noqa: E402
from comparelib.worker import thread_env  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WARM_STEPS = 20


def jit_entries():
    """``[(address, "module.function")]`` of every compiled overload of gatfast's Numba functions."""
    from numba.core.registry import CPUDispatcher

    entries = set()
    for module in list(sys.modules.values()):
        mod_name = getattr(module, "__name__", "") or ""
        if not mod_name.startswith("gatfast"):
            continue
        for name, obj in list(vars(module).items()):
            if not isinstance(obj, CPUDispatcher) or obj.py_func.__module__ != mod_name:
                continue  # each function once, under the module that defines it
            for cres in obj.overloads.values():
                address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
                if address:
                    entries.add((address, f"{mod_name.rsplit('.', 1)[-1]}.{name}"))
    return sorted(entries)


def _start_perf(data, frequency):
    """``perf record`` of this process into ``data`` (its messages into ``data.log``); returns once it samples."""
    cmd = [
        "perf",
        "record",
        "-q",
        "-F",
        str(frequency),
        "-e",
        "cpu-clock",
        "-p",
        str(os.getpid()),
        "-o",
        str(data),
    ]
    with open(data.with_suffix(".log"), "w") as log:  # a file, not a pipe nobody reads while perf runs
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 10.0
    while not (data.exists() and data.stat().st_size > 0):
        if proc.poll() is not None:
            raise RuntimeError(f"perf record exited with {proc.returncode}: {_perf_log(data)}")
        if time.monotonic() > deadline:
            _stop_perf(proc, data, check=False)
            raise RuntimeError("perf record did not start within 10 s")
        time.sleep(0.05)
    time.sleep(0.2)  # it writes its header before it attaches to every thread
    return proc


def _perf_log(data):
    log = data.with_suffix(".log")
    return log.read_text().strip()[-2000:] if log.exists() else ""


def _stop_perf(proc, data, check=True):
    """Stop ``perf record`` (SIGINT: it writes its data and exits), killing it if it hangs; with ``check``,
    RuntimeError unless it exited cleanly."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if check and proc.returncode not in (0, -signal.SIGINT):
        raise RuntimeError(f"perf record exited with {proc.returncode}: {_perf_log(data)}")


def dump_code(entries, hot, path):
    """The code of kernel ``hot`` (``module.function``) from its entry to the next entry, at most
    ``MAX_FUNCTION_BYTES`` and never past its memory mapping, into ``path``; returns its address or None."""
    import ctypes

    starts = [address for address, name in entries if name == hot]
    if not starts:
        return None
    start = starts[0]
    later = [address for address, _ in entries if address > start]
    end = min([start + proflib.MAX_FUNCTION_BYTES, *later[:1]])
    mapped = proflib.mapping_end(Path("/proc/self/maps").read_text(), start)
    if mapped is None:
        return None
    Path(path).write_bytes(ctypes.string_at(start, min(end, mapped) - start))
    return start


def child(name, size, seconds, frequency, data, hot=None):
    """Run in the sampled process: warm up, sample a loop of steps, print the result as JSON."""
    import numba
    import numpy as np

    runner = workloads.GatfastRunner(workloads.make_workload(name, size))
    for _ in range(WARM_STEPS):
        runner.forward_backward()
    entries = jit_entries()  # after the warm-up: every kernel the step uses is compiled or loaded
    hot_address = dump_code(entries, hot, Path(data).with_suffix(".code")) if hot else None
    perf = _start_perf(Path(data), frequency)
    times = []
    try:
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end or not times:
            t0 = time.perf_counter()
            runner.forward_backward()
            times.append(time.perf_counter() - t0)
    except BaseException:
        _stop_perf(perf, Path(data), check=False)  # the step's error is the one to report
        raise
    _stop_perf(perf, Path(data))
    print(
        json.dumps(
            {
                "steps": len(times),
                "wall_s": float(sum(times)),
                "step_ms": 1e3 * float(np.median(times)),
                "numba_threads": int(numba.get_num_threads()),
                "entries": entries,
                "hot_address": hot_address,
            }
        )
    )


def profile(name, args):
    """One workload: the child's result and the attributed samples."""
    env = thread_env(args.threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with tempfile.TemporaryDirectory(prefix="gatfast-profile-") as tmp:
        data = Path(tmp) / "perf.data"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            name,
            "--size",
            args.size,
            "--seconds",
            str(args.seconds),
            "--frequency",
            str(args.frequency),
            "--data",
            str(data),
        ]
        cmd += ["--hot", args.hot] if args.hot else []
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 1800)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"profiling {name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        result = json.loads(lines[-1])
        script = subprocess.run(
            ["perf", "script", "-i", str(data), "-F", "tid,period,ip,sym,dso"], capture_output=True, text=True
        )
        if script.returncode != 0:
            raise RuntimeError(f"perf script failed: {script.stderr.strip()[-2000:]}")
        samples = proflib.parse_script(script.stdout)
        result["hot"] = (
            _hot(samples, result.pop("hot_address"), data.with_suffix(".code"), args) if args.hot else None
        )
    times = proflib.attribute(samples, proflib.JitMap([tuple(e) for e in result.pop("entries")]))
    result["samples"] = len(samples)
    result["cpu_per_wall"] = 1e-9 * sum(times.values()) / result["wall_s"] if result["wall_s"] else 0.0
    result["rows"] = proflib.rows(times, result["steps"])
    result["top_symbols"] = proflib.top_symbols(samples)
    return result


def _hot(samples, address, code, args):
    """The listing of ``--hot``'s most sampled instructions, or a line saying why there is none."""
    if address is None:
        return [
            f"no compiled gatfast function {args.hot!r} ran in this step (names as in the table: module.function)"
        ]
    if shutil.which("objdump") is None:
        return ["objdump (binutils) is not installed: no instruction listing"]
    size = code.stat().st_size
    ips = Counter(
        ip for _, ip, _, dso, _ in samples if proflib.is_jit(dso) and address <= ip < address + size
    )
    dis = subprocess.run(
        ["objdump", "-D", "-b", "binary", "-mi386:x86-64", f"--adjust-vma={address:#x}", str(code)],
        capture_output=True,
        text=True,
    )
    listing = proflib.hot_listing(ips, proflib.parse_objdump(dis.stdout), top=args.hot_top)
    return [
        f"{sum(ips.values())} samples in {args.hot} (its first compiled overload); share of them per instruction (a sample usually lands "
        "just after the instruction that waited):",
        *listing,
    ]


def report(results, args, cpu, command):
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    title = "# Where a step's CPU time goes" + (f" ({outdirs.SMOKE_TITLE})" if args.size == "tiny" else "")
    lines = [
        title,
        "",
        f"_{cpu['model']}, {cpu['cpus']} CPUs, {cpu['simd']}, {args.threads} threads, {stamp}, `{command}`_",
        "",
        "How the samples are attributed: `bench/proflib.py`.",
        "",
    ]
    for name, r in results.items():
        lines += [
            f"## {name}",
            "",
            f"{workloads.WORKLOADS[name][1]}. {r['steps']} steps, median "
            f"{r['step_ms']:.3f} ms; {r['samples']} samples (asked for at {args.frequency} Hz); CPU time per wall "
            f"time {r['cpu_per_wall']:.2f} (of {r['numba_threads']} threads).",
            "",
            "| where | share of CPU samples | CPU ms per step |",
            "|---|---:|---:|",
        ]
        lines += [f"| {row} | {100 * share:.1f} % | {ms:.3f} |" for row, share, ms in r["rows"]]
        lines += [
            "",
            "Most sampled symbols outside the kernels: "
            + ", ".join(f"`{sym}` ({dso}) {100 * share:.1f} %" for sym, dso, share in r["top_symbols"]),
            "",
        ]
        if r.get("hot"):
            lines += [f"### Hot instructions of `{args.hot}`", "", "```", *r["hot"], "```", ""]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workloads",
        default="small-batch,scene-batch-train",
        help="comma-separated names of bench/workloads.py",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="how long each workload's steps are sampled"
    )
    parser.add_argument("--frequency", type=int, default=2000, help="samples per second per thread")
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument(
        "--hot",
        default=None,
        metavar="MODULE.FUNCTION",
        help="also list the most sampled instructions of this kernel (a name from the table)",
    )
    parser.add_argument("--hot-top", type=int, default=40, help="how many instructions --hot lists")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    outdirs.add_options(parser, "profile")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.size, args.seconds, args.frequency, args.data, args.hot)
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in workloads.WORKLOADS or w in workloads.MICRO_WORKLOADS]
    if unknown or not names:
        parser.error(
            f"--workloads: unknown or per-call workloads {unknown}; choose from "
            f"{[w for w in workloads.WORKLOADS if w not in workloads.MICRO_WORKLOADS]}"
        )
    if args.threads < 1 or args.seconds <= 0 or not 1 <= args.frequency <= 20000:
        parser.error("--threads must be >= 1, --seconds > 0 and --frequency in [1, 20000]")
    out = outdirs.resolve_out(parser, args, "profile", args.size)
    if shutil.which("perf") is None:
        parser.error("perf is not installed (Linux: the linux-tools or linux-perf package)")
    from rooflib.cpu import CPU

    results = {name: profile(name, args) for name in names}
    command = "python bench/profile_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(results, args, CPU, command)
    outdirs.write_report(out, "profile", {"cpu": CPU, "threads": args.threads, "workloads": results}, text)


if __name__ == "__main__":
    main()
