"""The ceilings the bounds use, derived from probe records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LINE = 64  # bytes per cache line


@dataclass
class Rates:
    """The machine figures the bounds use, at the configured thread count."""

    read_bps: float  # streamed bytes read per second
    write_bps: float  # streamed bytes written per second (read-for-ownership included)
    gather: dict  # table bytes -> {64: s, 256: s}: seconds per gathered row (index stream excluded)
    flops_numba: float  # multiply + add rate x threads
    flops_blas: float  # FMA rate x threads
    cache_bytes: float
    threads: int = 1
    passes: dict = field(default_factory=dict)  # pass_key -> seconds per step of that pass's gathers alone

    @classmethod
    def from_records(cls, records, threads, cache_bytes, median=False):
        """Rates from probe records (the first record of each kind counts; best sample, or median)."""
        suffix = "_median" if median else ""

        def get(probe, **kw):
            return [r for r in records if r["probe"] == probe and all(r.get(k) == v for k, v in kw.items())]

        t = max(r["threads"] for r in records if r["probe"] == "stream read")
        read = get("stream read", threads=t)[0]["gbps" + suffix] * 1e9
        scale = get("stream scale", threads=t)[0]["gbps" + suffix] * 1e9
        # scale moves N bytes in and N out in time 2N / scale_bw; the read half costs N / read_bw
        per_written = max(2.0 / scale - 1.0 / read, 0.25 / read)
        gather = {}
        seen = set()
        for r in get("gather", threads=t):
            size = r.get("table_request", r.get("table_bytes"))
            key = (size, r["row_bytes"], r["prefetch"])
            if key in seen:  # an earlier record of the same probe wins
                continue
            seen.add(key)
            per_row = 1.0 / r["rows_per_s" + suffix]
            per_row = max(per_row - 8.0 / read, 0.5 * per_row)  # the probe's own index stream
            slot = gather.setdefault(size, {})
            slot[r["row_bytes"]] = min(slot.get(r["row_bytes"], math.inf), per_row)  # best of prefetch or not
        passes = {}
        for r in get("pass gathers", threads=t):
            if r["key"] not in passes:
                per_step = r["s_per_step" + suffix]
                # less the probe's own index streams (8 bytes per table and step)
                passes[r["key"]] = max(per_step - 8.0 * len(r["tables"]) / read, 0.5 * per_step)
        return cls(read, 1.0 / per_written, gather,
                   get("mul+add")[0]["gflops" + suffix] * 1e9 * t, get("fma")[0]["gflops" + suffix] * 1e9 * t,
                   float(cache_bytes), t, passes)

    @property
    def memory_table(self):
        """The largest table measured: the probe far larger than the cache."""
        return max(self.gather)

    def row_seconds(self, row_bytes, table_bytes=None):
        """Seconds per gathered row of ``row_bytes`` from a table of ``table_bytes`` (default: far beyond the cache).

        Uses the measurement at the nearest table size (log scale), linear in
        cache lines between the 64-byte (1 line) and 256-byte (4 lines) rows.
        """
        if table_bytes is None:
            size = self.memory_table
        else:
            size = min(self.gather, key=lambda m: abs(math.log(m / max(table_bytes, 1.0))))
        t64, t256 = self.gather[size][64], self.gather[size][256]
        lines = max(1, math.ceil(row_bytes / LINE))
        return t64 + (lines - 1) * max(0.0, (t256 - t64) / 3.0)
