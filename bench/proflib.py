"""Where a step's CPU time goes: ``perf`` samples attributed to gatfast's kernels, Python, NumPy and the rest.

``perf record`` (a software clock, so it works in virtual machines without
hardware counters) samples the instruction pointer of every thread of the
process. Samples in the interpreter and the shared libraries carry their
own symbols. Numba's compiled kernels are anonymous memory to ``perf``; a
process that has run its step lists where each compiled gatfast function
starts (:func:`jit_entries`), and each sample in anonymous memory goes to
the nearest entry at or below it, up to :data:`MAX_FUNCTION_BYTES` above.
A kernel's callees are compiled into its own code (Numba links them into
the caller), so their samples count as the kernel's.

Pure functions on text and lists, so the tests check them without ``perf``.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter

#: the farthest a sample may lie above a function's entry and still count as that function's
MAX_FUNCTION_BYTES = 1 << 18

#: groups of samples outside compiled code, first match wins: (group, pattern of the shared object's file
#: name, pattern of its full path, pattern of the symbol); None matches anything. File names, not paths,
#: for the libraries: every extension module lies under .../lib/python3.x/site-packages/
GROUPS = (
    (
        "Python: garbage collector",
        r"^libpython",
        None,
        r"^(gc_collect|visit_|collect_|deduce_unreachable|move_unreachable)",
    ),
    ("Python: interpreter and objects", r"^(libpython|python3(\.\d+)?$)", None, None),
    ("BLAS", r"openblas|^libblas|^libmkl", None, None),
    ("NumPy", None, r"/numpy/", None),
    ("Numba dispatch and runtime, llvmlite", None, r"/(numba|llvmlite)/", None),
    ("SciPy", None, r"/scipy/", None),
    ("libm (exp, log)", r"^libm[.-]", None, None),
    ("libc (malloc, memcpy)", r"^(libc[.-]|ld-linux|libstdc|libgcc)", None, None),
    ("operating system", r"^(\[kernel|vmlinux|\[vdso\])", None, None),
)
OTHER = "other shared objects"
UNKNOWN_JIT = "compiled code outside gatfast's kernels"
_LINE = re.compile(
    r"^\s*(?P<tid>\d+)\s+(?P<period>\d+)\s+(?P<ip>[0-9a-fA-F]+)\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$"
)


def parse_script(text):
    """``[(tid, ip, symbol, shared object, period)]`` from ``perf script -F tid,period,ip,sym,dso``.

    ``period`` is the time the sample stands for, in nanoseconds for the ``cpu-clock`` event (it is what
    perf actually sampled at, whatever rate was asked: the kernel may lower the rate without a word).
    Other lines are skipped.
    """
    samples = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            samples.append((int(m["tid"]), int(m["ip"], 16), m["sym"], m["dso"], int(m["period"])))
    return samples


def is_jit(dso):
    """Whether a sample's shared object is anonymous memory: ``[JIT]``, ``[unknown]`` or a ``perf-PID.map``."""
    return (
        dso.startswith("[JIT]") or dso in ("[unknown]", "") or re.search(r"perf-\d+\.map$", dso) is not None
    )


def group_of(symbol, dso):
    """The group of a sample outside compiled code (:data:`GROUPS`)."""
    name = dso.rsplit("/", 1)[-1]
    for group, name_pattern, path_pattern, sym_pattern in GROUPS:
        if name_pattern is not None and not re.search(name_pattern, name):
            continue
        if path_pattern is not None and not re.search(path_pattern, dso):
            continue
        if sym_pattern is not None and not re.search(sym_pattern, symbol):
            continue
        return group
    return OTHER


class JitMap:
    """Sorted function entries ``[(address, name)]``: :meth:`name` finds the function a JIT address lies in."""

    def __init__(self, entries):
        entries = sorted(set(entries))
        self.addresses = [a for a, _ in entries]
        self.names = [n for _, n in entries]

    def name(self, ip):
        k = bisect.bisect_right(self.addresses, ip) - 1
        if k < 0 or ip - self.addresses[k] >= MAX_FUNCTION_BYTES:
            return None
        return self.names[k]


def attribute(samples, jit_map):
    """``Counter`` of sampled nanoseconds per row: ``kernel NAME`` for gatfast's compiled functions, else a
    group."""
    times = Counter()
    for _, ip, symbol, dso, period in samples:
        if is_jit(dso):
            name = jit_map.name(ip)
            times[f"kernel {name}" if name else UNKNOWN_JIT] += period
        else:
            times[group_of(symbol, dso)] += period
    return times


def top_symbols(samples, count=12):
    """The most sampled named symbols outside compiled code, ``[(symbol, shared object's file, share)]``."""
    total = sum(s[4] for s in samples)
    named = Counter()
    for _, _, sym, dso, period in samples:
        if not is_jit(dso) and sym != "[unknown]":
            named[(sym, dso.rsplit("/", 1)[-1])] += period
    return [(sym, name, ns / total) for (sym, name), ns in named.most_common(count)]


def rows(times, steps):
    """``[(row, share of all, CPU ms per step)]`` from sampled nanoseconds per row, largest first."""
    total = sum(times.values())
    out = []
    for name, ns in sorted(times.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append((name, ns / total if total else 0.0, 1e-6 * ns / steps if steps else 0.0))
    return out


def mapping_end(maps_text, address):
    """The end of the ``/proc/PID/maps`` region holding ``address`` (None if none does), so that reading a
    kernel's code never runs past mapped memory."""
    for line in maps_text.splitlines():
        span = line.split(" ", 1)[0]
        lo, _, hi = span.partition("-")
        try:
            lo, hi = int(lo, 16), int(hi, 16)
        except ValueError:
            continue
        if lo <= address < hi:
            return hi
    return None


def parse_objdump(text):
    """``{address: "bytes  instruction"}`` from ``objdump -D`` of a raw code dump."""
    out = {}
    for line in text.splitlines():
        head, sep, rest = line.partition(":\t")
        if not sep:
            continue
        try:
            address = int(head.strip(), 16)
        except ValueError:
            continue
        out[address] = "  ".join(part.strip() for part in rest.split("\t") if part.strip())
    return out


def hot_listing(ip_counts, instructions, top=40, context=2):
    """The ``top`` most sampled instructions with ``context`` instructions either side, as text lines
    ``"share%  address  instruction"`` (``...`` between separate stretches)."""
    total = sum(ip_counts.values())
    addresses = sorted(instructions)
    if not total or not addresses:
        return []
    position = {a: k for k, a in enumerate(addresses)}
    shown = set()
    for ip, _ in ip_counts.most_common(top):
        k = bisect.bisect_right(addresses, ip) - 1  # a sample lands on an instruction's first byte
        if k < 0:
            continue
        shown.update(addresses[max(0, k - context) : k + context + 1])
    lines, previous = [], None
    for address in sorted(shown):
        if previous is not None and position[address] != position[previous] + 1:
            lines.append("...")
        share = 100.0 * ip_counts.get(address, 0) / total
        lines.append(f"{share:5.1f}%  {address:x}  {instructions[address]}")
        previous = address
    return lines
