"""The machine figures: probe runs at the start of a run, and the probes run beside each workload's kernels."""

from __future__ import annotations

import time

import numpy as np

from . import probes as P
from .cpu import CPU
from .measure import Threads, probe_sizes, record, samples
from .model import pass_key
from .rates import Rates

GATHER_ROW_BYTES = (64, 256)


class Machine:
    """Measures the machine figures: probe records at the start, and probes to run beside each workload's kernels.

    ``size``: ``"full"``, ``"quick"`` or ``"tiny"`` (see ``measure.probe_sizes``).
    """

    def __init__(self, threads, size, reps, cache_bytes):
        self.threads = threads
        self.size = size
        self.reps = reps
        self.cache_bytes = cache_bytes
        self.sizes = probe_sizes(size, cache_bytes)
        self.records = []
        self._arrays = {}
        self._flop_iters = {}

    # -- probes: each is (record template, no-argument call)
    def _stream_probes(self, threads, kinds=("read", "scale", "triad")):
        if "a" not in self._arrays:
            n = self.sizes["array_bytes"] // 4
            self._arrays.update(a=np.ones(n, np.float32), b=np.ones(n, np.float32), c=np.ones(n, np.float32),
                                sums=np.zeros(P.CHUNKS, np.uint64))
        a, b, c, sums = (self._arrays[k] for k in ("a", "b", "c", "sums"))
        s = np.float32(1.0001)
        calls = {
            "read": (lambda: P.read_sum(a.view(np.uint64), sums), a.nbytes),
            "scale": (lambda: P.scale(a, b, s, P.CHUNKS), 2 * a.nbytes),
            "triad": (lambda: P.triad(c, a, b, s, P.CHUNKS), 3 * a.nbytes),
        }
        return [({"probe": f"stream {k}", "threads": threads, "bytes": calls[k][1]}, calls[k][0]) for k in kinds]

    def _gather_probes(self, threads, table_bytes=None, prefetch=(False, True)):
        """Gathers of 64 and 256-byte rows from one table of ``table_bytes`` (default: far beyond the cache)."""
        table_bytes = int(self.sizes["array_bytes"] if table_bytes is None else table_bytes)
        key = ("table", table_bytes)
        if key not in self._arrays:
            self._arrays[key] = np.ones(max(64, table_bytes // 4), np.float32)
        flat = self._arrays[key]
        out = []
        for row_bytes in GATHER_ROW_BYTES:
            width = row_bytes // 4
            table = flat[: flat.size // width * width].reshape(-1, width)
            idx = np.random.default_rng(row_bytes).integers(0, table.shape[0], self.sizes["gathers"])
            acc = np.zeros((P.CHUNKS, width), np.float32)
            for pf in prefetch:
                tpl = {"probe": "gather", "threads": threads, "row_bytes": row_bytes, "prefetch": pf,
                       "table_request": table_bytes, "table_bytes": int(table.nbytes), "rows": int(idx.size)}
                out.append((tpl, lambda table=table, idx=idx, pf=pf, acc=acc: P.gather(table, idx, pf, acc)))
        return out

    def _flop_probes(self, seconds):
        lanes, chains = P.PROBE_LANES, P.PROBE_CHAINS
        seed = np.full((chains + 2) * lanes, 0.5, np.float32)
        seed[:lanes] = 1.0  # a: a runtime 1.0 (no decay into denormals, nothing to fold)
        seed[lanes:2 * lanes] = 1e-6  # b
        theo = CPU["mhz"] * 1e6 * 2 * lanes * 2 / 1e9 if CPU["mhz"] else None  # 2 FMA pipes x lanes x 2
        if "registers" not in self._arrays:
            self._arrays["registers"] = P.vector_registers(seed)
        out = []
        for fused in (True, False):
            if fused not in self._flop_iters:
                P.flops_probe(seed, 1000, fused)  # compile or load
                iters = 1 << 16
                while True:  # iterations per second
                    t0 = time.perf_counter()
                    P.flops_probe(seed, iters, fused)
                    dt = time.perf_counter() - t0
                    if dt > 0.02 or iters > 1 << 34:
                        break
                    iters *= 4
                self._flop_iters[fused] = iters / max(dt, 1e-9)
            iters = max(1000, int(self._flop_iters[fused] * seconds))
            per_lane = 2 if fused else 1  # an FMA is 2 flops, a multiply or an add 1
            tpl = {"probe": "fma" if fused else "mul+add", "threads": 1, "lanes": lanes,
                   "chains": chains, "iterations": iters, "flops": iters * chains * lanes * per_lane,
                   "theoretical_gflops": theo, "registers": self._arrays["registers"]}
            out.append((tpl, lambda fused=fused, iters=iters: P.flops_probe(seed, iters, fused)))
        return out

    def measure(self, log=print):
        """The machine table: streams and gathers far beyond the cache on 1 and ``threads`` threads, flops on 1."""
        log(f"machine: streams and gathers ({self.sizes['array_bytes'] / 2**20:.0f} MiB arrays) ...")
        for t in sorted({1, self.threads}):
            with Threads(t) as th:
                for tpl, fn in self._stream_probes(th.n) + self._gather_probes(th.n):
                    self.records.append(record(tpl, samples(fn, self.reps)))
        log("machine: flops ...")
        for tpl, fn in self._flop_probes(self.sizes["flop_seconds"]):
            self.records.append(record(tpl, samples(fn, self.reps)))
        return self

    def measure_quick(self, log=print):
        """The figures a bound needs, in a few seconds: streams, prefetched gathers from a table far beyond
        the cache and from one of a quarter of it (at ``threads`` threads only), and flops."""
        log(f"machine probe for the roofline columns ({self.sizes['array_bytes'] / 2**20:.0f} MiB arrays) ...")
        with Threads(self.threads) as th:
            probes = self._stream_probes(th.n) + self._gather_probes(th.n, prefetch=(True,))
            if self.cache_bytes:
                probes += self._gather_probes(th.n, self.cache_bytes // 4, prefetch=(True,))
            for tpl, fn in probes:
                self.records.append(record(tpl, samples(fn, self.reps)))
        for tpl, fn in self._flop_probes(self.sizes["flop_seconds"]):
            self.records.append(record(tpl, samples(fn, self.reps)))
        self.release()
        return self

    def _pass_probe(self, gathers):
        """The gathers of one pass alone: a table shaped like each gathered array, uniform random rows."""
        key = pass_key(gathers)
        if ("pass", key) not in self._arrays:
            rng = np.random.default_rng(len(self._arrays))
            tables, idxs = [], []
            for g in gathers:
                width = max(1, g.row_bytes // 4)
                rows = max(1, int(g.table_bytes) // (4 * width))
                tables.append(np.ones((rows, width), np.float32))
                idxs.append(rng.integers(0, rows, self.sizes["gathers"]))
            width = max(t.shape[1] for t in tables)
            self._arrays[("pass", key)] = (tuple(tables), tuple(idxs), np.zeros((P.CHUNKS, width), np.float32))
        tables, idxs, acc = self._arrays[("pass", key)]
        tpl = {"probe": "pass gathers", "threads": self.threads, "key": key, "steps": int(idxs[0].size),
               "tables": [[g.row_bytes, float(g.table_bytes)] for g in gathers]}
        return tpl, lambda: P.pass_gather(tables, idxs, acc)

    def workload_probes(self, models, in_cache):
        """Probes to run in the same rounds as a workload's kernels (at ``threads``): the ceilings its bounds use.

        Streams (read, scale) and, per distinct gather pattern of the
        workload's kernels, its gathers alone, unless the step runs in
        cache; flops always (shorter calls).
        """
        probes = []
        if not in_cache:
            probes += self._stream_probes(self.threads, ("read", "scale"))
            seen = set()
            for m in models:
                if m.gathers and pass_key(m.gathers) not in seen:
                    seen.add(pass_key(m.gathers))
                    probes.append(self._pass_probe(m.gathers))
        probes += self._flop_probes(self.sizes["flop_seconds"] / 5)
        return probes

    def release_tables(self):
        """Free the tables of the workload probes (the far-beyond-cache one stays)."""
        keep = ("table", int(self.sizes["array_bytes"]))
        for key in [k for k in self._arrays if isinstance(k, tuple) and k != keep]:
            del self._arrays[key]

    def release(self):
        """Free every probe array (the probe records stay)."""
        registers = self._arrays.get("registers")
        self._arrays.clear()
        if registers is not None:
            self._arrays["registers"] = registers

    # -- lookups
    def find(self, probe, threads=None, **kw):
        for r in self.records:
            if r["probe"] == probe and (threads is None or r["threads"] == threads) and all(
                r.get(k) == v for k, v in kw.items()
            ):
                return r
        raise KeyError((probe, threads, kw))

    def rates(self, records=(), median=False):
        """Rates from ``records`` (first) and the machine table (where ``records`` lack a probe)."""
        return Rates.from_records(list(records) + self.records, self.threads, self.cache_bytes, median)
