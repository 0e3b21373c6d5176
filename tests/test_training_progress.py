"""Training progress in a log: one line per epoch on stderr, never a progress bar's
carriage-return frames or escape codes; the result on stdout. On a terminal, the framework's bar,
on stderr too."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading

import pytest
import warm_zoo
from conftest import FRAMEWORKS, RECIPE, tiny

EPOCHS = 3
LINE = re.compile(
    rf"^epoch (\d+)/{EPOCHS} - [\d.]+ s - train_loss [\d.e+-]+ - train_accuracy [\d.e+-]+ - "
    r"val_loss [\d.e+-]+ - val_accuracy [\d.e+-]+ - lr [\d.e+-]+$"
)


def train_command(tmp_path, framework: str) -> list[str]:
    settings = tiny(
        tmp_path, f"trainer.max_epochs={EPOCHS}", "trainer.progress_bar=true", "export.run_name=run"
    )
    return [
        sys.executable, "-m", "zoo.cli", "train", str(RECIPE), "--framework", framework,
        *(a for s in settings for a in ("--set", s)),
    ]  # fmt: skip


def environment() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_piped_run_writes_one_line_per_epoch_on_stderr(tmp_path, framework):
    done = warm_zoo.run(
        train_command(tmp_path, framework), env=environment(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for stream in (done.stdout, done.stderr):
        assert "\r" not in stream and "\x1b" not in stream
    progress = [line for line in done.stderr.splitlines() if line.startswith("epoch ")]
    assert [LINE.match(line) is not None for line in progress] == [True] * EPOCHS, progress
    assert [int(LINE.match(line)[1]) for line in progress] == list(range(1, EPOCHS + 1))
    # The numbers are the run's metrics.csv rows, in the same words.
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    last = dict(zip(rows[0].split(","), rows[-1].split(","), strict=True))
    shown = float(re.search(r"val_loss ([\d.e+-]+)", progress[-1])[1])
    assert shown == pytest.approx(float(last["val_loss"]), rel=1e-3)
    # stdout holds the result, and nothing of the progress.
    assert re.search(rf"^run \({framework}\): .*test_accuracy [\d.]+", done.stdout, re.M), done.stdout
    assert "epoch " not in done.stdout


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_on_a_terminal_the_bar_draws_on_stderr_and_stdout_keeps_the_result(tmp_path, framework):
    """stderr a terminal (a pseudo-terminal here), stdout a file: `zoo train R > result.txt`."""
    main, secondary = pty.openpty()
    drawn = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO once the child's side is closed
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = subprocess.run(
            train_command(tmp_path, framework), env=environment(), stdout=subprocess.PIPE, stderr=secondary,
            text=True, timeout=600,
        )  # fmt: skip
    finally:
        os.close(secondary)
        reader.join(timeout=30)
        os.close(main)
    terminal = drawn.decode(errors="replace")
    assert done.returncode == 0, terminal[-3000:]
    assert "\r" in terminal  # a live bar, redrawn in place
    assert not any(LINE.match(line) for line in terminal.splitlines())  # no epoch lines beside it
    assert "\r" not in done.stdout and "\x1b" not in done.stdout
    assert done.stdout.strip().splitlines()[0].startswith("run ("), done.stdout
