"""Progress output: epoch lines or a bar, and the batches of a long epoch."""

import io
import re

from gatfast.training import progress as P


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_lines_off_a_terminal_report_batches_and_time_left(monkeypatch):
    monkeypatch.setattr(P, "LOG_SECONDS", 0.0)
    out = io.StringIO()
    with P.Progress(False, 1, out, total=2) as progress:
        with progress.batches(4, 3) as tick:
            for _ in range(4):
                tick()
        progress.epoch(3, True, {"loss": 0.5, "val_accuracy": 0.75})
    lines = out.getvalue().splitlines()
    # one line per batch but the last (the epoch line follows it)
    assert [re.sub(r", \d+ s left$", "", line) for line in lines[:3]] == [
        f"epoch 3: {k}/4 batches" for k in (1, 2, 3)
    ]
    assert all(line.endswith(" s left") for line in lines[:3])
    assert lines[3].startswith("epoch    3 | loss 0.5000") and "val acc 0.7500" in lines[3]


def test_no_batch_lines_before_the_interval_or_when_quiet():
    out = io.StringIO()
    with P.Progress(False, 1, out, total=1) as progress, progress.batches(50, 1) as tick:
        for _ in range(50):
            tick()
    assert out.getvalue() == ""  # 50 quick batches: well inside LOG_SECONDS
    with P.Progress(True, 1, out, total=1) as progress, progress.batches(50, 1) as tick:
        tick()
        progress.epoch(1, True, {"loss": 1.0})
    assert out.getvalue() == ""


def test_a_terminal_gets_a_bar_of_the_epochs_batches():
    out = Terminal()
    with P.Progress(False, 1, out, total=2) as progress:
        with progress.batches(7, 1) as tick:
            for _ in range(7):
                tick()
        text = out.getvalue()
        assert "epoch 1:" in text and "0/7" in text and "batch/s" in text  # tqdm redraws at most every 0.1 s
