"""Fuzzing files and options: a clear error or a correct result, never a crash, a hang or a memory blow-up.

Risky cases run in one long-lived child process (tests/fuzz_child.py) with a
memory limit (RLIMIT_AS) and a timeout per request: a segfault, a runaway
allocation or a hang fails the test instead of the test run.
"""

import json
import os
import select
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatfast.data import DATA_DIR
from gatfast.models import GATv2Network
from gatfast.training import TrainConfig, save_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 60  # seconds per request
FILE_ERRORS = {"ValueError", "FileNotFoundError"}
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

pytestmark = pytest.mark.slow


class Child:
    def __init__(self, cwd):
        env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "fuzz_child.py")], cwd=cwd,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert self._read(300).get("ready")

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.proc.kill()
            raise AssertionError(f"the child hung for more than {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise AssertionError(f"the child died (status {self.proc.returncode}): "
                                 f"{self.proc.stderr.read().decode()[-3000:]}")
        return json.loads(line)

    def ask(self, **request):
        if self.proc.poll() is not None:
            raise AssertionError("the child is gone (an earlier request killed it)")
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        return self._read(TIMEOUT)

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def child(workdir):
    c = Child(workdir)
    yield c
    c.close()


@pytest.fixture(scope="module")
def valid_files(workdir):
    ckpt = workdir / "model.npz"
    save_checkpoint(ckpt, GATv2Network(34, 4, 2, heads=2, seed=0), {"dataset": "karate"})
    return {"karate": (DATA_DIR / "karate.npz").read_bytes(), "mutag": (DATA_DIR / "mutag.npz").read_bytes(),
            "checkpoint": ckpt.read_bytes()}


def check_file(child, path, op):
    answer = child.ask(op=op, path=str(path))
    if not answer["ok"]:
        assert FILE_ERRORS & set(answer["classes"]), answer["traceback"]
        assert str(path) in answer["message"], answer["message"]
        assert "\n" not in answer["message"]
    return answer


def both(child, path):
    for op in ("dataset", "checkpoint"):
        check_file(child, path, op)


@FUZZ
@given(data=st.binary(max_size=3000))
def test_random_bytes(child, workdir, data):
    path = workdir / "random.npz"
    path.write_bytes(data)
    both(child, path)


@FUZZ
@given(which=st.sampled_from(["karate", "mutag", "checkpoint"]), cut=st.floats(0, 1, exclude_max=True))
def test_truncated_valid_files(child, workdir, valid_files, which, cut):
    data = valid_files[which]
    path = workdir / "truncated.npz"
    path.write_bytes(data[: int(cut * len(data))])
    both(child, path)


@FUZZ
@given(which=st.sampled_from(["karate", "mutag", "checkpoint"]),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_valid_files(child, workdir, valid_files, which, edits):
    data = bytearray(valid_files[which])
    for where, value in edits:
        data[int(where * len(data))] = value
    path = workdir / "mutated.npz"
    path.write_bytes(bytes(data))
    both(child, path)


# ---------------------------------------------------------------------- options
FIELDS = list(TrainConfig.options())
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(), max_size=3),
    st.sampled_from(["float32", "float64", "adam", "sgd", "mean", "sum", "elu", "softplus", "theta_r"]),
)


@FUZZ
@given(kwargs=st.dictionaries(st.sampled_from(FIELDS + ["learning_rate"]), ANY_VALUE, max_size=5))
def test_config_values(child, kwargs):
    answer = child.ask(op="config", kwargs=kwargs)
    if answer["ok"]:
        assert answer["summary"] == "round trip ok"
    else:
        assert {"ValueError", "TypeError"} & set(answer["classes"]), answer["traceback"]


TEXT_VALUES = st.one_of(
    st.sampled_from(["0", "1", "2", "-1", "3", "0.5", "1e309", "nan", "inf", "-inf", "1e-300", "", "x", "64",
                     "65", "100000", "1e6", "float64", "adam", "sum", "elu", "theta_n"]),
    st.integers(-5, 70).map(str), st.text(alphabet="0123456789.e-x", max_size=6),
)
FLAGS = [n for n, (_, o) in TrainConfig.options().items() if o.group != "output"]


@FUZZ
@given(options=st.dictionaries(st.sampled_from(FLAGS), TEXT_VALUES, max_size=4),
       dataset=st.sampled_from(["karate", "mutag", "traffic_scenes", "nope"]))
def test_cli_option_values(child, options, dataset):
    argv = ["train", "--dataset", dataset]
    for name, value in options.items():
        option = TrainConfig.options()[name][1]
        flag = "--" + name.replace("_", "-")
        if option.kind is bool:
            argv.append(flag if not TrainConfig.options()[name][0] else "--no-" + name.replace("_", "-"))
        else:
            argv += [flag, value]
    # small and quick whatever was drawn (the last occurrence of a flag wins)
    argv += ["--epochs", "1", "--quiet", "--batch-size", "64"]
    answer = child.ask(op="cli", argv=argv)
    assert answer["ok"], answer.get("traceback")
    assert answer["status"] in (0, 2), answer
    if answer["status"] == 2:
        err = answer["stderr"]
        assert err.count("\n") == 1 and err.startswith("gatfast") and "Traceback" not in err, err
    else:
        assert "final metrics" in answer["stdout"] and answer["stderr"] == ""


def test_the_memory_limit_is_real(child):
    """A request that allocates far more than the limit gets a MemoryError in the child."""
    answer = child.ask(op="allocate", bytes=8 * 2**30)
    assert not answer["ok"] and answer["type"] == "MemoryError"
    assert child.ask(op="config", kwargs={})["ok"]  # and the child lives on
