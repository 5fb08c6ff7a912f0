"""The child process of tests/test_fuzz.py: runs risky requests under a memory limit.

Reads one JSON request per line on stdin, writes one JSON answer per line on
stdout. After importing gatfast it caps its address space (RLIMIT_AS) at its
current size plus ``FUZZ_MEMORY_MB``, so a runaway allocation becomes a
MemoryError (reported) or kills the child (the parent then fails the test),
never the test run.
"""

import contextlib
import io
import json
import os
import resource
import sys
import traceback


def _vm_size():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def handle(req):
    from gatfast.cli import main
    from gatfast.data import load_dataset
    from gatfast.training import TrainConfig, load_checkpoint

    op = req["op"]
    if op == "dataset":
        ds = load_dataset(req["path"])
        return {"summary": repr(ds)}
    if op == "checkpoint":
        model, meta = load_checkpoint(req["path"])
        return {"summary": f"{model.num_parameters()} parameters"}
    if op == "config":
        cfg = TrainConfig(**req["kwargs"])
        again = TrainConfig.from_json(cfg.to_json())
        return {"summary": "round trip ok" if again == cfg else "ROUND TRIP DIFFERS"}
    if op == "cli":
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(req["argv"])
            except SystemExit as exc:  # argparse
                status = exc.code
        return {"status": status, "stdout": out.getvalue()[-2000:], "stderr": err.getvalue()}
    if op == "allocate":  # proves the memory limit works
        import numpy as np

        return {"summary": str(np.ones(req["bytes"], np.uint8).sum())}
    raise RuntimeError(f"unknown op {op!r}")


def serve():
    import numba

    import gatfast  # noqa: F401  (import before the limit: only the requests are limited)

    numba.set_num_threads(1)
    limit = _vm_size() + int(os.environ.get("FUZZ_MEMORY_MB", "1536")) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            answer = {"ok": True, **handle(req)}
        except BaseException as exc:  # everything is reported; the parent decides what is allowed
            answer = {"ok": False, "type": type(exc).__name__, "message": str(exc),
                      "classes": [c.__name__ for c in type(exc).__mro__],
                      "traceback": traceback.format_exc()[-3000:]}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
