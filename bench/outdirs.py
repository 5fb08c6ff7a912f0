"""Where the benchmark scripts write: an untracked directory unless the tracked results are refreshed on purpose.

``compare.py``, ``roofline.py`` and ``compile_time.py`` write to
``runs/bench/<tool>/`` by default (``runs/`` is git-ignored). The tracked
``bench/results/`` is written only with ``--update-results`` (alone: into
``bench/results/``; with ``--out``: into that directory, which must lie
inside ``bench/results/``), never from a smoke run (``--size tiny``).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
SMOKE_TITLE = "smoke run (tiny sizes): not the published results"


def default_out(tool):
    """The untracked default output directory of ``tool``."""
    return REPO / "runs" / "bench" / tool


def is_tracked_results(path):
    """Whether ``path`` is ``bench/results`` or inside it."""
    p = Path(path).resolve()
    return p == RESULTS or RESULTS in p.parents


def add_options(parser, tool):
    """``--out`` and ``--update-results``."""
    parser.add_argument("--out", default=None,
                        help=f"output directory (default: {default_out(tool).relative_to(REPO)}/, untracked; "
                             "a directory inside bench/results/ needs --update-results)")
    parser.add_argument("--update-results", action="store_true",
                        help="refresh the tracked results: write into bench/results/ (or into --out, which must "
                             "then lie inside bench/results/)")


def resolve_out(parser, args, tool, size="full"):
    """The output directory the options ask for; a parser error where they would touch tracked results by accident."""
    if args.update_results:
        if size == "tiny":
            parser.error("--update-results: a smoke run (--size tiny) is never written into bench/results/")
        out = Path(args.out) if args.out else RESULTS
        if not is_tracked_results(out):
            parser.error(f"--update-results writes into bench/results/ only; --out {args.out} lies outside it")
        return out
    out = Path(args.out) if args.out else default_out(tool)
    if is_tracked_results(out):
        parser.error(f"--out {args.out} is inside bench/results/ (tracked results): add --update-results to "
                     "refresh them on purpose")
    return out


def write_report(out, stem, result, text):
    """``<stem>.json`` (``result``) and ``<stem>.md`` (``text``) in ``out``, written atomically; prints the text."""
    import json

    from gatfast._io import atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{stem}.json", json.dumps(result, indent=1))
    atomic_write_text(out / f"{stem}.md", text)
    print()
    print(text)
