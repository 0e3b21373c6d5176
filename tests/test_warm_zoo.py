"""warm_zoo: a zoo command forked from a pre-imported server is the command a fresh process runs.

The tests that start zoo commands (kills and resumes, same starts, data-parallel runs) rely on it:
the same weights bit for bit, the same output, exit statuses and deaths by signal as ``subprocess``
reports them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import warm_zoo
from conftest import RECIPE, tiny
from safetensors.numpy import load_file

pytestmark = pytest.mark.slow
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def command(tmp_path, framework: str, name: str, *overrides: str) -> list[str]:
    sets = tiny(tmp_path, f"export.run_name={name}", "trainer.max_epochs=1", *overrides)
    return [sys.executable, "-m", "zoo.cli", "train", str(RECIPE), "--framework", framework,
            *(a for s in sets for a in ("--set", s))]  # fmt: skip


def seconds_out(text: str) -> str:
    """``text`` with its durations (``trained in 0.7 s``) masked: they are the machine's."""
    return re.sub(r"\d+(\.\d+)? s\b", "N s", text)


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_a_warm_run_trains_the_weights_and_prints_the_lines_of_a_cold_one(tmp_path, framework):
    cold = subprocess.run(command(tmp_path, framework, "cold"), env=ENV, capture_output=True, text=True)
    warm = warm_zoo.run(command(tmp_path, framework, "warm"), env=ENV, capture_output=True, text=True)
    assert cold.returncode == warm.returncode == 0, warm.stderr[-2000:]
    assert seconds_out(cold.stdout).replace("cold", "warm") == seconds_out(warm.stdout)
    expected, got = (
        load_file(tmp_path / "cold" / "model.safetensors"),
        load_file(tmp_path / "warm" / "model.safetensors"),
    )
    assert expected.keys() == got.keys()
    assert all((expected[k] == got[k]).all() for k in expected)


def test_exit_statuses_pipes_and_signals_are_a_processs(tmp_path):
    refused = warm_zoo.run(command(tmp_path, "lightning", "bad", "trainer.max_epochs=0"), env=ENV,
                           capture_output=True, text=True)  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.startswith("error: "), refused.stderr
    assert "max_epochs" in refused.stderr and refused.stdout == ""

    piped = warm_zoo.Popen(
        [sys.executable, "-m", "zoo.cli", "list"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    out, _ = piped.communicate(timeout=300)
    assert piped.returncode == 0 and "gpt2-micro" in out

    long = warm_zoo.Popen(command(tmp_path, "lightning", "killed", "trainer.max_epochs=1000"), env=ENV,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (tmp_path / "killed").exists():
        assert long.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    long.send_signal(signal.SIGKILL)
    assert long.wait(timeout=60) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(long.pid, 0)  # reaped, as subprocess leaves it
