"""Two versions of gatfast on one workload's step, in alternating fresh processes: what a change did.

On a shared machine whose speed drifts by up to 2x for minutes at a time,
two runs of a benchmark minutes apart compare phases, not code. This runs
the same workload (built by this checkout's ``bench/workloads.py``) with
each version in turn, in fresh processes, ``--rounds`` times, alternating
which goes first, so that a slow phase meets both. Each process warms up
(compilation or cache load), then times ``--steps`` forward + backward
steps (the training step for a training workload) and reports their median;
a version's figure is the median of its rounds.

A version is a git revision, checked out into a temporary worktree that is
removed afterwards (on an error, Ctrl-C or SIGTERM too; only the worktrees
this run added), or ``.`` for this working tree as it is (uncommitted
changes included; the report names HEAD and says whether the tree had
changes when the run started). Each version compiles into its own Numba
cache directory. Numba, BLAS and OpenMP run at ``--threads``.

Usage::

    python bench/ab.py small-batch --base HEAD~1                      # the working tree against HEAD~1
    python bench/ab.py large-edge --base a0a0e99 --new HEAD --rounds 6 --steps 10
    python bench/ab.py cora --base HEAD --size tiny --rounds 2 --steps 2   # a smoke run

Output (atomically, into ``--out``, default ``runs/bench/ab/``, untracked):
``ab.md`` and ``ab.json``.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import outdirs  # noqa: E402
import workloads  # noqa: E402
from comparelib.worker import thread_env  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
WARM_STEPS = 10

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])  # this checkout's bench/: the same workloads for both versions
import numpy as np
import gatfast
import workloads
assert gatfast.__file__.startswith(sys.argv[5]), (gatfast.__file__, sys.argv[5])
runner = workloads.GatfastRunner(workloads.make_workload(sys.argv[2], sys.argv[3]))
for _ in range(int(sys.argv[6])):
    runner.forward_backward()
times = []
for _ in range(int(sys.argv[4])):
    t0 = time.perf_counter()
    runner.forward_backward()
    times.append(time.perf_counter() - t0)
print(json.dumps(1e3 * float(np.median(times))))
"""


def _git(*args):
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def resolve(version):
    """``(label, commit or None)``: ``.`` is the working tree; anything else must name a commit."""
    if version == ".":
        return "working tree", None
    found = _git("rev-parse", "--verify", "--quiet", f"{version}^{{commit}}")
    if found.returncode != 0:
        raise ValueError(f"{version!r} is not a commit of this repository")
    return version, found.stdout.strip()


def describe(commit):
    """What a version is, for the report: its commit, or the working tree's HEAD and whether it has changes
    (read once, at the start: an edit during the run would mix versions)."""
    if commit is not None:
        return commit
    head = _git("rev-parse", "HEAD").stdout.strip()
    dirty = _git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return f"{head}" + (" with uncommitted changes" if dirty else "")


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the worktrees' cleanup, as Ctrl-C does


def run_once(tree, name, size, steps, env):
    """The median step (ms) of one fresh process running ``tree``'s gatfast."""
    env = dict(env, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-c", CHILD, str(BENCH), name, size, str(steps), str(tree), str(WARM_STEPS)]
    proc = subprocess.run(cmd, cwd=str(tree), env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"the step of {name} failed in {tree} (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1])


def compare(name, versions, args, work_dir):
    """``{label: [round medians]}`` of the versions, run in alternating order round by round."""
    trees, envs = {}, {}
    base_env = thread_env(args.threads)
    base_env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for k, (label, commit) in enumerate(versions):
        if commit is None:
            trees[label] = REPO
        else:
            tree = Path(work_dir) / f"tree{k}"
            added = _git("worktree", "add", "--detach", "--force", str(tree), commit)
            if added.returncode != 0:
                raise RuntimeError(f"git worktree add failed for {label}: {added.stderr.strip()}")
            trees[label] = tree
        envs[label] = dict(base_env, NUMBA_CACHE_DIR=str(Path(work_dir) / f"numba{k}"))
    rounds = {label: [] for label, _ in versions}
    labels = [label for label, _ in versions]
    for r in range(args.rounds):
        for label in labels if r % 2 == 0 else labels[::-1]:
            rounds[label].append(run_once(trees[label], name, args.size, args.steps, envs[label]))
            print(f"round {r + 1}/{args.rounds}  {label:>14}: {rounds[label][-1]:.3f} ms", flush=True)
    return rounds


def report(name, rounds, described, args, cpu, command):
    labels = list(rounds)
    base = statistics.median(rounds[labels[0]])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    title = f"# A/B: {name}" + (f" ({outdirs.SMOKE_TITLE})" if args.size == "tiny" else "")
    lines = [
        title,
        "",
        f"_{cpu['model']}, {cpu['cpus']} CPUs, {cpu['simd']}, {args.threads} threads, {stamp}, `{command}`_",
        "",
        f"{workloads.WORKLOADS[name][1]}. Median of {args.steps} steps per process, "
        f"{args.rounds} fresh processes per version in alternating order.",
        "",
        "| version | commit | median of the rounds (ms) | rounds (ms) | / base |",
        "|---|---|---:|---|---:|",
    ]
    for label in labels:
        median = statistics.median(rounds[label])
        runs = " / ".join(f"{v:.3f}" for v in rounds[label])
        lines.append(f"| {label} | {described[label]} | {median:.3f} | {runs} | {median / base:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", help="a name of bench/workloads.py")
    parser.add_argument("--base", required=True, help="a git revision, or . for the working tree")
    parser.add_argument("--new", default=".", help="a git revision, or . for the working tree (default)")
    parser.add_argument("--rounds", type=int, default=6, help="fresh processes per version")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per process")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    outdirs.add_options(parser, "ab")
    args = parser.parse_args(argv)
    if args.workload not in workloads.WORKLOADS or args.workload in workloads.MICRO_WORKLOADS:
        parser.error(f"workload: {args.workload!r} is not a step workload of bench/workloads.py")
    if args.rounds < 1 or args.steps < 1 or args.threads < 1:
        parser.error("--rounds, --steps and --threads must be at least 1")
    versions = []
    for option, value in (("--base", args.base), ("--new", args.new)):
        try:
            versions.append(resolve(value))
        except ValueError as err:
            parser.error(f"{option}: {err}")
    if versions[0][0] == versions[1][0]:
        versions[1] = (f"{versions[1][0]} (again)", versions[1][1])
    out = outdirs.resolve_out(parser, args, "ab", args.size)
    from rooflib.cpu import CPU

    described = {label: describe(commit) for label, commit in versions}
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with tempfile.TemporaryDirectory(prefix="gatfast-ab-") as work_dir:
            try:
                rounds = compare(args.workload, versions, args, work_dir)
            finally:  # only the worktrees this run added: the user's own are left alone
                for k in range(len(versions)):
                    tree = Path(work_dir) / f"tree{k}"
                    if tree.exists():
                        _git("worktree", "remove", "--force", str(tree))
    finally:
        signal.signal(signal.SIGTERM, previous)
    command = "python bench/ab.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(args.workload, rounds, described, args, CPU, command)
    result = {"cpu": CPU, "workload": args.workload, "versions": described, "rounds": rounds}
    outdirs.write_report(out, "ab", result, text)


if __name__ == "__main__":
    main()
