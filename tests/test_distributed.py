"""Data-parallel training on a real Dask LocalCluster (2 worker processes, loopback): exactness and faults.

Skipped without the ``distributed`` extra. One cluster serves the module
(starting one costs seconds); the test that loses every worker has its own.
"""

import json
import os
import signal
import time

import numpy as np
import pytest

import gatfast
from gatfast.data import load_dataset
from gatfast.training import WorkersLost, load_checkpoint

distributed = pytest.importorskip("distributed", reason="the distributed extra is not installed")
gd = pytest.importorskip("gatfast.distributed")
faults = pytest.importorskip("gatfast.distributed.faults")
tasks = pytest.importorskip("gatfast.distributed.tasks")

F64 = dict(dtype="float64", quiet=True, seed=0)


@pytest.fixture(scope="module")
def client():
    with gd.local_cluster(2, threads=1) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=120)
        yield c


@pytest.fixture(scope="module")
def mutag():
    return load_dataset("mutag", dtype=np.float64, normalize_features=True)


def assert_same_run(a, b, rtol=1e-8):
    """Parameters and history of two runs agree to ``rtol`` (relative to each array's scale)."""
    pa, pb = a.model.parameters(), b.model.parameters()
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_allclose(pb[k], pa[k], rtol=rtol, atol=rtol * np.abs(pa[k]).max(), err_msg=k)
    assert len(a.history) == len(b.history)
    for ra, rb in zip(a.history, b.history):
        assert ra.keys() == rb.keys()
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=rtol, abs=1e-12), key


def assert_identical(a, b):
    pa, pb = a.model.parameters(), b.model.parameters()
    for k in pa:
        np.testing.assert_array_equal(pb[k], pa[k], err_msg=k)
    assert a.history == b.history


def worker_pids(client):
    return sorted(client.run(os.getpid).values())


def test_workers_get_their_share_of_the_cores(client):
    infos = client.run(tasks.worker_info)
    assert len(infos) == 2
    for info in infos.values():
        assert info["numba_max_threads"] == 1 and info["numba_threads"] == 1
    assert gd.threads_per_worker(2, cores=16) == 8 and gd.threads_per_worker(4, cores=2) == 1


def test_graph_classification_matches_one_process(client, mutag):
    opts = dict(epochs=3, **F64)
    local = gatfast.train(mutag, **opts)
    remote = gatfast.train(mutag, client=client, **opts)
    assert remote.config.shards == 2  # default: one shard per worker, recorded
    assert_same_run(local, remote)
    # the shards, not the workers, fix the summation order: the same bits as 2 shards in one process
    assert_identical(gatfast.train(mutag, shards=2, **opts), remote)


def test_sampled_node_classification_matches_one_process(client):
    cora = load_dataset("cora", dtype=np.float64, normalize_features=True)
    opts = dict(epochs=2, fanout=(10, 10), batch_size=32, **F64)  # the GAT recipe: dropout 0.6 on both
    local = gatfast.train(cora, **opts)
    remote = gatfast.train(cora, client=client, shards=3, **opts)
    assert_same_run(local, remote)
    assert local.history[-1]["loss"] != gatfast.train(cora, **{**opts, "seed": 1}).history[-1]["loss"]


def test_the_dataset_goes_out_once_and_stays_on_every_worker(client, mutag):
    config = gatfast.TrainConfig.preset("tu", epochs=2, **F64)
    model = gatfast.training.build_model(mutag, config, 0)
    optimizer = gatfast.Adam(model.parameters(), lr=config.lr)
    with gd.ShardExecutor(client, mutag, profile=True) as executor:
        gatfast.fit(model, mutag, optimizer, config, executor=executor)
        time.sleep(2.5)  # a cycle of an Active Memory Manager, if one ran, would drop replicas now
        holders = client.who_has([executor.dataset_future])[executor.dataset_future.key]
        assert len(holders) == 2
        steps = executor.stats
        assert len(steps) == 10 and all(s.shards == 2 and s.retries == 0 for s in steps)
        # one payload of the parameters (and the model's description) out per step, nothing of the dataset
        params = sum(p.nbytes for p in model.parameters().values())
        assert all(params < s.payload_bytes < params + 20_000 for s in steps)
        assert all(s.result_bytes < 2 * (params + 20_000) for s in steps)


def test_a_killed_worker_changes_nothing(client, mutag, monkeypatch):
    """One worker is killed between epochs, another in the middle of a step: same parameters, bit for bit."""
    opts = dict(epochs=4, shards=2, **F64)
    local = gatfast.train(mutag, **opts)
    killed = []

    def kill_one(epoch, *args):
        if epoch == 1:
            killed.append(worker_pids(client)[0])
            os.kill(killed[-1], signal.SIGKILL)

    wait = faults.Watch.wait
    steps = []

    def kill_during_a_step(self, futures, *args, **kwargs):
        futures = list(futures)
        shard_step = bool(futures) and futures[0].key.startswith("gatfast-shard-")
        steps.extend(futures[:1] if shard_step else [])
        if shard_step and len(steps) == 12:  # epoch 3 (5 steps per epoch): the shards were just submitted
            pids = worker_pids(client)
            killed.append(pids[-1])
            os.kill(pids[-1], signal.SIGKILL)
        return wait(self, futures, *args, **kwargs)

    monkeypatch.setattr(faults.Watch, "wait", kill_during_a_step)
    remote = gatfast.train(mutag, client=client, callback=kill_one, **opts)
    assert len(killed) == 2
    assert_identical(local, remote)
    client.wait_for_workers(2, timeout=120)  # the nannies restart them
    assert not set(killed) & set(worker_pids(client))


def test_folds_run_as_tasks_with_the_same_results(client, mutag):
    opts = dict(epochs=3, folds=3, quiet=True)
    local = gatfast.train(mutag, **opts)
    remote = gatfast.train(mutag, client=client, **opts)
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith("seconds")}  # noqa: E731
    assert drop(remote.metrics) == drop(local.metrics)
    assert [drop(f) for f in remote.folds] == [drop(f) for f in local.folds]
    assert_identical(local, remote)  # the last fold's model and history


def test_sweep_runs_the_grid_as_tasks(client, mutag):
    rows = gd.sweep(mutag, {"lr": [0.01, 0.02], "hidden": [4]}, client=client, epochs=2, quiet=True)
    assert [(r["lr"], r["hidden"]) for r in rows] == [(0.01, 4), (0.02, 4)]
    for row in rows:
        alone = gatfast.train(mutag, epochs=2, quiet=True, lr=row["lr"], hidden=4)
        assert row["val_accuracy"] == alone.metrics["val_accuracy"]
        assert row["train_loss"] == alone.metrics["train_loss"]
    with pytest.raises(ValueError, match="grid option 'workers'"):
        gd.sweep(mutag, {"workers": [1, 2]}, client=client)
    with pytest.raises(ValueError, match="'learning_rate' is not a training option"):
        gd.sweep(mutag, {"learning_rate": [0.1]})


def test_bad_cluster_options_name_the_argument(client, mutag):
    with pytest.raises(ValueError, match="client .* and workers .* alternatives"):
        gatfast.train(mutag, client=client, workers=2)
    with pytest.raises(ValueError, match="scheduler must be an address"):
        gatfast.train(mutag, scheduler="127.0.0.1")
    with pytest.raises(ValueError, match="scheduler must be an address"):
        gatfast.train(mutag, scheduler="tcp://127.0.0.1:99999")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        gatfast.train(mutag, workers=0)
    with pytest.raises(ValueError, match="workers .* and scheduler .* alternatives"):
        gatfast.TrainConfig(workers=2, scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="client must be a distributed.Client"):
        gatfast.train(mutag, client="tcp://127.0.0.1:8786", epochs=1)
    with pytest.raises(ValueError, match="callback and diagnose are not available"):
        gatfast.train(mutag, client=client, folds=3, callback=lambda *a: None)
    assert gatfast.TrainConfig(scheduler="localhost:8786").scheduler == "tcp://localhost:8786"


@pytest.mark.slow
def test_losing_every_worker_stops_with_the_best_model_saved(mutag, tmp_path):
    save, metrics = tmp_path / "best.npz", tmp_path / "metrics.json"
    with gd.local_cluster(1, threads=1) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        pids = worker_pids(c)

        def kill_all(epoch, *args):
            if epoch == 2:
                for nanny in cluster.workers.values():
                    nanny.close_gracefully()  # no restart: the worker is gone for good
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)

        with pytest.raises(
            WorkersLost, match=r"worker.*during epoch 3.*best parameters \(epoch [12]\)"
        ) as info:
            gatfast.train(
                mutag,
                client=c,
                callback=kill_all,
                epochs=5,
                worker_timeout=2,
                save=save,
                metrics_json=metrics,
                **F64,
            )
    assert "\n" not in str(info.value)
    result = info.value.result
    assert result.interrupted == "workers lost" and len(result.history) == 2
    model, meta = load_checkpoint(save)
    for k, v in result.model.parameters().items():
        np.testing.assert_array_equal(model.parameters()[k], v)
    assert json.loads(metrics.read_text())["interrupted"] is True
    assert meta["metrics"]["epochs"] == 2
