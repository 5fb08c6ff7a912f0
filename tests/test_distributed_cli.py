"""``gatfast train --workers N`` and ``--scheduler ADDRESS`` (a ``dask scheduler`` / ``dask worker`` pair
started here on 127.0.0.1 with random ports), ``gatfast sweep``, and losing every worker from the CLI.

Skipped without the ``distributed`` extra.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from gatfast.cli import main
from gatfast.data import DATA_DIR
from gatfast.training import load_checkpoint

distributed = pytest.importorskip("distributed", reason="the distributed extra is not installed")
faults = pytest.importorskip("gatfast.distributed.faults")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTAG = str(DATA_DIR / "mutag.npz")
RUN = ["--dataset", MUTAG, "--epochs", "3", "--dtype", "float64", "--quiet"]


def _env():
    # as docs/SCALING.md recommends: the scheduler keeps the dataset's replicas (no Active Memory Manager)
    env = dict(
        os.environ, NUMBA_NUM_THREADS="1", DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START="False"
    )
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, env.get("PYTHONPATH")) if p
    )  # this checkout's gatfast
    return env


def _dask(*args, log):
    return subprocess.Popen(
        [sys.executable, "-m", "dask", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
        start_new_session=True,
    )


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A ``dask scheduler`` on 127.0.0.1, random port (read back from its scheduler file)."""
    tmp = tmp_path_factory.mktemp("dask")
    path = tmp / "scheduler.json"
    with open(tmp / "scheduler.log", "w") as log:
        proc = _dask(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--dashboard-address",
            "127.0.0.1:0",
            "--no-dashboard",
            "--scheduler-file",
            str(path),
            log=log,
        )
    try:
        deadline = time.monotonic() + 60
        while not path.exists() or not path.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "scheduler.log").read_text()
            time.sleep(0.1)
        yield json.loads(path.read_text())["address"], path
    finally:
        _stop(proc)


@pytest.fixture
def worker(scheduler, tmp_path):
    """One ``dask worker`` (no nanny: a killed worker stays dead) of the scheduler; returns its process."""
    address, path = scheduler
    with open(tmp_path / "worker.log", "w") as log:
        proc = _dask(
            "worker",
            "--scheduler-file",
            str(path),
            "--host",
            "127.0.0.1",
            "--nthreads",
            "1",
            "--no-nanny",
            "--no-dashboard",
            log=log,
        )
    try:
        with distributed.Client(address, set_as_default=False, timeout=30) as client:
            client.wait_for_workers(1, timeout=120)
        yield proc
    finally:
        _stop(proc)
        with distributed.Client(
            address, set_as_default=False, timeout=30
        ) as client:  # the next test's worker alone
            deadline = time.monotonic() + 30
            while client.nthreads() and time.monotonic() < deadline:
                time.sleep(0.1)


def run(argv, capsys):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def params(path):
    return load_checkpoint(path)[0].parameters()


def assert_close(a, b, rtol=1e-8):
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=rtol, atol=rtol * np.abs(a[k]).max(), err_msg=k)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The one-process run every cluster run is compared with."""
    path = tmp_path_factory.mktemp("local") / "local.npz"
    assert main(["train", *RUN, "--save", str(path)]) == 0
    return params(path)


def test_train_workers_starts_a_local_cluster(one_process, tmp_path, capsys):
    status, out, err = run(
        [
            "train",
            *RUN,
            "--workers",
            "2",
            "--save",
            tmp_path / "m.npz",
            "--metrics-json",
            tmp_path / "m.json",
        ],
        capsys,
    )
    assert status == 0, err
    assert_close(one_process, params(tmp_path / "m.npz"))
    meta = load_checkpoint(tmp_path / "m.npz")[1]
    assert meta["train_config"]["workers"] == 2 and meta["train_config"]["shards"] == 2


def test_train_scheduler_uses_an_existing_cluster(one_process, scheduler, worker, tmp_path, capsys):
    address, _ = scheduler
    status, out, err = run(["train", *RUN, "--scheduler", address, "--save", tmp_path / "m.npz"], capsys)
    assert status == 0, err
    assert_close(one_process, params(tmp_path / "m.npz"))
    assert load_checkpoint(tmp_path / "m.npz")[1]["train_config"]["shards"] == 1  # one worker: one shard


def test_losing_every_worker_is_one_line_and_exit_status_2(scheduler, worker, tmp_path, capsys, monkeypatch):
    address, _ = scheduler
    wait, steps = faults.Watch.wait, []

    def kill_in_epoch_3(self, futures, *args, **kwargs):
        futures = list(futures)
        shard_step = bool(futures) and futures[0].key.startswith("gatfast-shard-")
        steps.extend(futures[:1] if shard_step else [])
        if (
            shard_step and len(steps) == 11
        ):  # 5 steps per epoch: the first step of epoch 3, its shard just submitted
            os.kill(worker.pid, signal.SIGKILL)
        return wait(self, futures, *args, **kwargs)

    monkeypatch.setattr(faults.Watch, "wait", kill_in_epoch_3)
    status, out, err = run(
        [
            "train",
            *RUN[:-3],
            "--epochs",
            "20",
            "--scheduler",
            address,
            "--worker-timeout",
            "2",
            "--save",
            tmp_path / "m.npz",
            "--metrics-json",
            tmp_path / "m.json",
        ],
        capsys,
    )
    assert status == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("gatfast train: error: ") and "worker" in err, err
    assert "(during epoch 3)" in err and "wrote" in err, err
    assert json.loads((tmp_path / "m.json").read_text())["epochs"] == 2
    assert load_checkpoint(tmp_path / "m.npz")[1]["metrics"]["interrupted"] is True


def test_sweep_prints_a_table_and_writes_csv(tmp_path, capsys):
    status, out, err = run(
        [
            "sweep",
            "--dataset",
            MUTAG,
            "--grid",
            "lr",
            "0.01",
            "0.02",
            "--grid",
            "hidden",
            "4",
            "--epochs",
            "2",
            "--quiet",
            "--csv",
            tmp_path / "t.csv",
        ],
        capsys,
    )
    assert status == 0, err
    header, *rows = out.strip().splitlines()
    assert header.split()[:4] == ["lr", "hidden", "val_accuracy", "test_accuracy"] and len(rows) == 2
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0].startswith("lr,hidden,") and len(lines) == 3
    status, out, err = run(["sweep", "--grid", "heads", "two"], capsys)
    assert status == 2 and err.startswith("gatfast sweep: error: --grid heads: expected a whole number")


def test_malformed_scheduler_address_is_one_line(capsys):
    status, out, err = run(["train", "--scheduler", "tcp://127.0.0.1"], capsys)
    assert status == 2 and "scheduler must be an address such as 'tcp://127.0.0.1:8786'" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_ctrl_c_at_a_terminal_stops_the_run_not_the_workers(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: the local cluster's workers ignore it,
    the run stops at the end of the epoch and writes its outputs, and no process is left behind."""
    log = tmp_path / "out.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gatfast",
                "train",
                "--dataset",
                MUTAG,
                "--workers",
                "2",
                "--epochs",
                "100000",
                "--log-every",
                "1",
                "--save",
                str(tmp_path / "m.npz"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 120
        while "epoch    2 " not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does
        assert proc.wait(timeout=60) == 128 + signal.SIGINT
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert "interrupted by SIGINT" in text and "wrote" in text, text
    assert "Traceback" not in text and "KilledWorker" not in text, text
    time.sleep(2)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes left in the group: {left}"
    load_checkpoint(tmp_path / "m.npz")
