"""Atomic writes: temporary-file names, stale-file cleanup, signals during a write, missing directories."""

import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from gatfast import _io
from gatfast._io import TEMP_PATTERN, atomic_write, atomic_write_text, remove_stale_temp_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def dead_pid():
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    return proc.pid


def test_temporary_file_has_the_documented_name(tmp_path):
    target = tmp_path / "m.npz"
    seen = []

    def write(fh):
        seen.extend(p for p in os.listdir(tmp_path) if p != "m.npz")
        fh.write(b"data")

    atomic_write(target, write)
    (name,) = seen
    match = re.fullmatch(TEMP_PATTERN, name)
    assert match and match["name"] == "m.npz" and int(match["pid"]) == os.getpid()
    assert os.listdir(tmp_path) == ["m.npz"] and target.read_bytes() == b"data"


def test_missing_directory_is_an_error_and_nothing_is_created(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        atomic_write_text(tmp_path / "typo" / "m.json", "{}")
    assert str(tmp_path / "typo") in str(info.value)
    assert os.listdir(tmp_path) == []


def test_stale_temporary_files_of_dead_processes_are_removed(tmp_path):
    pid = dead_pid()
    stale = tmp_path / f".m.npz.gatfast-tmp-{pid}-abc123_x"
    alive = tmp_path / f".m.npz.gatfast-tmp-{os.getpid()}-zzz"
    other = tmp_path / f".other.gatfast-tmp-{pid}-q1"
    unrelated = tmp_path / ".m.npz.tmp-123-x"
    for p in (stale, alive, other, unrelated):
        p.write_bytes(b"x" * 100)
    # before a write: stale files of that target only
    atomic_write_text(tmp_path / "m.npz", "new")
    assert not stale.exists() and alive.exists() and other.exists() and unrelated.exists()
    # the helper, for a whole directory
    assert remove_stale_temp_files(tmp_path) == [str(other)]
    assert sorted(os.listdir(tmp_path)) == sorted(["m.npz", alive.name, unrelated.name])
    assert remove_stale_temp_files(tmp_path / "missing") == []


def test_handler_only_during_the_write_and_previous_restored(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    inside = []
    atomic_write(tmp_path / "a", lambda fh: inside.append(signal.getsignal(signal.SIGTERM)))
    assert signal.getsignal(signal.SIGTERM) is before
    assert inside[0] is not signal.SIG_DFL if before is signal.SIG_DFL else inside[0] is before

    def mine(signum, frame):
        pass

    signal.signal(signal.SIGTERM, mine)
    try:
        atomic_write(tmp_path / "b", lambda fh: inside.append(signal.getsignal(signal.SIGTERM)))
        assert inside[-1] is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


WRITER = textwrap.dedent(
    """
    import signal, sys, time
    from gatfast._io import atomic_write

    # SIGHUP as in a terminal's process: a parent run under nohup passes it on ignored, and gatfast
    # (rightly) leaves an ignored signal ignored, so the SIGHUP case would wait out its timeout
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

    def write(fh):
        fh.write(b"n" * 3_000_000)
        fh.flush()
        print("writing", flush=True)
        time.sleep(120)

    atomic_write(sys.argv[1], write)
    """
)


def start_writer(tmp_path, target):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # blocks until the child is inside the write
    assert line.strip() == "writing", proc.stderr.read() if proc.poll() is not None else line
    temps = [p for p in os.listdir(tmp_path) if re.fullmatch(TEMP_PATTERN, p)]
    assert len(temps) == 1
    return proc, temps[0]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_termination_during_a_write_removes_the_temporary_file(tmp_path, signum):
    target = tmp_path / "m.npz"
    target.write_bytes(b"old")
    proc, _ = start_writer(tmp_path, target)
    proc.send_signal(signum)
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signum  # died of the signal, as without gatfast's handler
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["m.npz"]


def test_kill_9_leaves_a_recognisable_file_removed_by_the_next_write(tmp_path):
    target = tmp_path / "m.npz"
    target.write_bytes(b"old")
    proc, temp = start_writer(tmp_path, target)
    proc.kill()
    proc.wait(timeout=60)
    assert sorted(os.listdir(tmp_path)) == sorted(["m.npz", temp]) and target.read_bytes() == b"old"
    assert int(re.fullmatch(TEMP_PATTERN, temp)["pid"]) == proc.pid
    atomic_write_text(target, "new")
    assert os.listdir(tmp_path) == ["m.npz"] and target.read_text() == "new"


def test_failed_write_in_another_thread_still_cleans_up(tmp_path):
    import threading

    errors = []

    def run():
        try:
            atomic_write(tmp_path / "m", lambda fh: 1 / 0)
        except ZeroDivisionError as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=60)
    assert errors and os.listdir(tmp_path) == []


def test_pid_alive_is_conservative():
    assert _io.pid_alive(os.getpid())
    assert not _io.pid_alive(dead_pid())
