"""Ctrl-C and SIGTERM during training: stop at the end of the epoch, keep the best model, write the outputs.

The command-line tests run ``python -m gatfast`` in a real subprocess and
send real signals; every wait has a timeout, so a broken handler fails the
test instead of hanging it.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from gatfast.data import make_csbm
from gatfast.models import GATv2Network
from gatfast.optim import make_optimizer
from gatfast.training import evaluate, fit, load_checkpoint, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 180
LONG = ["--epochs", "1000000", "--patience", "0", "--log-every", "1", "--hidden", "4", "--heads", "2"]

pytestmark = pytest.mark.usefixtures("one_numba_thread")


def env():
    e = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return e


def start(args, cwd, code=None):
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "gatfast", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(proc, pattern):
    """Read stdout until a line matches (the child is then where the test wants it)."""
    while True:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError(f"child ended before {pattern!r}: {proc.stderr.read()}")
        if re.search(pattern, line):
            return line


def finish(proc):
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the child did not stop after the signal") from None
    return proc.returncode, out, err


# ---------------------------------------------------------------------- fit(stop=...) in process
def test_fit_stops_at_the_end_of_the_epoch_and_keeps_the_best_parameters():
    ds = make_csbm(num_nodes=100, num_features=8, avg_degree=3, seed=1, train_frac=0.3, val_frac=0.3)
    model = GATv2Network(8, 4, 2, heads=2, seed=0)
    opt = make_optimizer("adam", model.parameters(), 0.01)
    snapshots = {}

    def keep(epoch, model, grads, row):
        snapshots[epoch] = {k: v.copy() for k, v in model.parameters().items()}

    calls = []
    result = fit(model, ds, opt, epochs=50, quiet=True, callback=keep,
                 stop=lambda: calls.append(1) or ("SIGINT" if len(calls) >= 4 else None))
    assert result.interrupted == "SIGINT" and result.metrics["interrupted"] is True
    assert result.metrics["epochs"] == 4 and len(result.history) == 4
    best = result.metrics["best_epoch"]
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(v, snapshots[best][k])
    assert "interrupted" not in fit(model, ds, opt, epochs=2, quiet=True).metrics


# ---------------------------------------------------------------------- the command line
@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_stops_saves_the_best_model_and_exits(tmp_path, signum, status):
    proc = start(["train", *LONG, "--save", "m.npz", "--metrics-json", "m.json"], tmp_path)
    wait_for(proc, r"^epoch +3 ")
    proc.send_signal(signum)
    code, out, err = finish(proc)
    assert code == status, err
    assert err.count("\n") == 1 and "Traceback" not in err
    name = signal.Signals(signum).name
    assert re.match(rf"gatfast train: interrupted by {name} at epoch \d+; kept the best parameters "
                    r"\(epoch \d+\); wrote m\.npz and m\.json", err), err
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["interrupted"] is True and 3 <= metrics["epochs"] < 1000000
    model, meta = load_checkpoint(tmp_path / "m.npz")
    assert meta["metrics"]["interrupted"] is True
    from gatfast.data import load_karate

    again = evaluate(model, load_karate(normalize_features=True))
    assert again["val_accuracy"] == metrics["val_accuracy"]
    assert sorted(os.listdir(tmp_path)) == ["m.json", "m.npz"]


SLOW_EPOCHS = textwrap.dedent(
    """
    import sys, time
    import gatfast.training.progress as progress
    real = progress.Progress.epoch

    def slow(self, epoch, last, row):
        real(self, epoch, last, row)
        print(f"epoch {epoch} done", flush=True)
        time.sleep(3)

    progress.Progress.epoch = slow
    from gatfast.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)

SLOW_SAVE = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    real = np.savez

    def slow(fh, **arrays):
        real(fh, **arrays)
        print("saving", flush=True)
        time.sleep(60)

    np.savez = slow  # the checkpoint writer calls np.savez
    from gatfast.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_second_ctrl_c_aborts_at_once_without_damaging_files(tmp_path):
    (tmp_path / "m.npz").write_bytes(b"an older model")
    proc = start(["train", *LONG, "--quiet", "--save", "m.npz"], tmp_path, code=SLOW_EPOCHS)
    wait_for(proc, r"^epoch 2 done")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)  # signals of one kind sent together arrive as one
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, err
    assert err.count("\n") == 1 and "aborted" in err and "Traceback" not in err
    assert (tmp_path / "m.npz").read_bytes() == b"an older model"
    assert os.listdir(tmp_path) == ["m.npz"]


@pytest.mark.slow
def test_second_signal_during_the_save_keeps_the_old_file(tmp_path):
    (tmp_path / "m.npz").write_bytes(b"an older model")
    proc = start(["train", *LONG, "--save", "m.npz"], tmp_path, code=SLOW_SAVE)
    wait_for(proc, r"^epoch +3 ")
    proc.send_signal(signal.SIGTERM)  # stop training: the checkpoint is written next
    wait_for(proc, r"^saving")
    temps = [n for n in os.listdir(tmp_path) if n.startswith(".m.npz.gatfast-tmp-")]
    assert len(temps) == 1
    proc.send_signal(signal.SIGTERM)  # the second one aborts the write
    code, out, err = finish(proc)
    assert code == 143, err
    assert "Traceback" not in err and err.count("\n") == 1 and "aborted" in err
    assert (tmp_path / "m.npz").read_bytes() == b"an older model"
    assert os.listdir(tmp_path) == ["m.npz"]


def test_train_without_a_signal_is_not_interrupted():
    result = train("karate", epochs=2, quiet=True)
    assert result.interrupted is None and "interrupted" not in result.metrics
