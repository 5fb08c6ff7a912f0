"""No edge kernel calls Numba's reference counting (atomic increments and decrements) inside a loop.

A helper inlined by Numba (``inline="always"``) that takes arrays copies
them into new variables, each with an ``NRT_incref`` and an ``NRT_decref``
that Numba cannot always prune: in the row loop of the forward kernel with
edge features they were 14 calls per row, and in the source pass's prefetch
loop they made the pass 3.5x slower (``gatfast/kernels/forward.py``). This
test compiles uncached copies of the kernels for the signatures a set of
layer calls used (both source-pass paths, edge features, dropout, float32
and float64, other activations) and looks for those calls in the blocks of
the optimised LLVM IR that lie on a cycle of the control-flow graph.
"""

import re

import numba
import numpy as np
import pytest
from numba import njit, types
from numba.core.registry import CPUDispatcher

import gatfast.layers.passes as passes
import gatfast.layers.small as small
from gatfast import CSRGraph, GATv2Layer, _runtime, batch_graphs
from gatfast.kernels import backward, backward_edge, forward, pairwise, records
from gatfast.kernels.prefetch import PREFETCH_DISTANCE

pytestmark = pytest.mark.slow

LABEL = r'(?:[-\w$.]+|"[^"]+")'  # an LLVM block label, plain or quoted
BLOCK = re.compile(r"^(" + LABEL + r"):", re.M)


def function_body(llvm_ir, name):
    """The body of the compiled function whose symbol contains ``name`` (not its ``cpython.`` wrapper)."""
    pattern = r'define [^\n]*@"?(?!cpython\.)[^\n(]*' + re.escape(name) + r"[^\n]*\{\n(.*?)\n\}"
    return re.search(pattern, llvm_ir, re.S).group(1)


def blocks_on_a_cycle(llvm_ir, name):
    """``{block label: NRT calls}`` for the blocks of function ``name`` that can reach themselves."""
    body = function_body(llvm_ir, name)
    starts = [(m.start(), m.group(1)) for m in BLOCK.finditer(body)]
    pieces = [("entry", body[: starts[0][0]] if starts else body)]
    for k, (pos, label) in enumerate(starts):
        pieces.append((label, body[pos : starts[k + 1][0] if k + 1 < len(starts) else len(body)]))
    successors, calls = {}, {}
    for label, text in pieces:
        terminators = [
            line for line in text.splitlines() if re.match(r"\s+(br|switch|indirectbr)\b|\s+i\d+ ", line)
        ]
        successors[label] = re.findall(r"label %(" + LABEL + ")", "\n".join(terminators))
        calls[label] = len(re.findall(r"@NRT_(?:incref|decref)\(", text))

    def reaches_itself(label):
        seen, stack = set(), list(successors[label])
        while stack:
            b = stack.pop()
            if b == label:
                return True
            if b not in seen:
                seen.add(b)
                stack.extend(successors.get(b, []))
        return False

    return {label: n for label, n in calls.items() if reaches_itself(label)}


def blocks_on_a_cycle_calling_nrt(llvm_ir, name):
    return {label: n for label, n in blocks_on_a_cycle(llvm_ir, name).items() if n}


def test_the_cycle_finder_sees_a_call_in_a_loop():
    ir_text = """define void @f(ptr %a) {
entry:
  call void @NRT_incref(ptr %a)
  br label %loop
loop:
  call void @NRT_decref(ptr %a)
  %c = icmp eq i64 0, 0
  br i1 %c, label %loop, label %exit
exit:
  call void @NRT_decref(ptr %a)
  ret void
}"""
    assert blocks_on_a_cycle_calling_nrt(ir_text, "f") == {"loop": 1}


def run_layers(monkeypatch):
    """Layer calls that reach every edge kernel on every source-pass path (with and without prefetches, and
    the records; the one-call path of small plain layers switched off, so that the general kernels run
    whatever the cache holds)."""
    monkeypatch.setattr(small, "ENABLED", False)
    monkeypatch.setattr(passes, "RECORD_MIN_ROW_BYTES", 0)  # the records wherever the source pass prefetches
    rng = np.random.default_rng(0)
    # one graph of more rows than passes.SOURCE_SUMS_MAX_RUN: a source pass of its own
    g = CSRGraph.from_edge_index(rng.integers(0, 200, (2, 1000)), 200)
    # a batch of small graphs, whose target pass also sums Q_j: on two threads, in chunks that cut some of its
    # graphs, whose sources then go to gatv2_backward_source_ranges
    batch, _ = batch_graphs([CSRGraph.from_edge_index(rng.integers(0, 7, (2, 25)), 7) for _ in range(400)])
    monkeypatch.setattr(_runtime, "PARALLEL_WORK", 0)
    with _runtime.threads(min(2, numba.config.NUMBA_NUM_THREADS)):
        layer = GATv2Layer(5, 8, heads=2, seed=0)
        out, cache = layer.forward(batch, rng.standard_normal((batch.num_nodes, 5)))
        layer.backward(cache, np.ones_like(out))
    monkeypatch.undo()
    monkeypatch.setattr(small, "ENABLED", False)
    monkeypatch.setattr(passes, "RECORD_MIN_ROW_BYTES", 0)
    configs = [
        (np.float32, dict(heads=2, out_features=9)),
        (np.float64, dict(heads=1, out_features=17, dropout=0.3)),
        (np.float32, dict(heads=3, out_features=8, edge_dim=3, dropout=0.2)),
        (np.float64, dict(heads=1, out_features=7, edge_dim=2)),
        (np.float32, dict(heads=1, out_features=16, attention_activation="softplus", edge_dim=2)),
        (np.float32, dict(heads=2, out_features=8, attention_activation="softplus")),  # z formed, prefetched
    ]
    for dtype, kw in configs:
        layer = GATv2Layer(5, dtype=dtype, seed=0, **kw)
        x = rng.standard_normal((g.num_nodes, 5)).astype(dtype)
        edge_attr = rng.standard_normal((g.nnz, kw["edge_dim"])).astype(dtype) if "edge_dim" in kw else None
        for ahead in (None, PREFETCH_DISTANCE):
            monkeypatch.setattr(passes, "source_pass_ahead", lambda gathered, span, a=ahead: a)
            out, cache = layer.forward(g, x, edge_attr, training=True, rng=np.random.default_rng(1))
            for theta_r in ("linear", "pairwise"):
                layer.backward(cache, np.ones_like(out), theta_r=theta_r)


def test_no_edge_kernel_counts_references_in_a_loop(monkeypatch):
    run_layers(monkeypatch)
    found, without_loops, checked = {}, [], {}
    for module in (forward, backward, backward_edge, pairwise, records):
        for name, kernel in vars(module).items():
            if not (isinstance(kernel, CPUDispatcher) and name.startswith("gatv2_")):
                continue
            fresh = njit(nogil=True)(kernel.py_func)  # uncached, so that its IR can be read
            checked[name] = [str(sig) for sig in kernel.signatures]
            for sig in kernel.signatures:
                fresh.compile(sig)
                cyclic = blocks_on_a_cycle(fresh.inspect_llvm(sig), name)
                if not cyclic:  # every kernel loops over rows: no cycle means the IR was not read
                    without_loops.append(f"{name}{sig}")
                bad = {label: n for label, n in cyclic.items() if n}
                if bad:
                    found[f"{name}{sig}"] = bad
    assert without_loops == []
    # every kernel ran (the source pass of the graphs chunks cut only where there were two threads)
    ran = [name for name, sigs in checked.items() if sigs]
    assert set(checked) - set(ran) <= (
        {"gatv2_backward_source_ranges"} if numba.config.NUMBA_NUM_THREADS < 2 else set()
    )
    ahead = {type(sig[10]) for sig in backward.gatv2_backward_source_rows.signatures}  # both source paths
    assert types.NoneType in ahead and any(issubclass(t, types.Integer) for t in ahead)
    assert found == {}
