"""TensorFlow's C++ logging stays off stderr (issue 38, item 8).

A Keras ``zoo train --quiet`` printed absl's banner, ``oneDNN custom operations are on``,
``Could not find cuda drivers`` (twice each) and ``E0000 ... failed call to cuInit`` on stderr,
where --quiet promises only errors. The command now sets ``TF_CPP_MIN_LOG_LEVEL`` before
TensorFlow is imported and filters the lines its libraries print while they load
(zoo.native_logs); a user who sets the variable sees TensorFlow's logging as it is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import RECIPE

from zoo.native_logs import filtered

# absl's and TensorFlow's prefix: severity, MMDD, time, thread, file:line]
CPP_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+\S+:\d+\]", re.MULTILINE)
TINY_KERAS = ["--framework", "keras", "--set", "model.architecture=convnet-tiny",
              "--set", "trainer.max_epochs=1", "--set", "data.train_per_class=8"]  # fmt: skip


def zoo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The ``zoo`` command in a process of its own: TensorFlow logs when it is first imported."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | (env or {})
    command = [sys.executable, "-m", "zoo.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600, check=False)


@pytest.mark.parametrize("quiet", [True, pytest.param(False, marks=pytest.mark.slow)])  # ~17 s each
def test_a_keras_train_prints_no_tensorflow_log_lines(tmp_path, quiet):
    done = zoo(
        "train", str(RECIPE), *TINY_KERAS, "--set", f"export.dir={tmp_path}", *(["-q"] if quiet else [])
    )
    assert done.returncode == 0, done.stderr
    assert not CPP_LOG.search(done.stderr), done.stderr
    assert "absl::InitializeLog" not in done.stderr, done.stderr
    if quiet:
        assert done.stderr == "", done.stderr
        assert done.stdout.strip().endswith("model.safetensors"), done.stdout


def test_a_user_setting_tf_cpp_min_log_level_sees_tensorflow_as_it_logs(tmp_path):
    """Nothing is captured then: the setting is the user's way to debug TensorFlow."""
    code = (
        "from zoo.native_logs import quiet_native_logs as q; q(); import os, sys; "
        "print(os.environ['TF_CPP_MIN_LOG_LEVEL'], "
        "any(type(f).__name__ == '_QuietImport' for f in sys.meta_path))"
    )
    for env, expected in (({}, "3 True"), ({"TF_CPP_MIN_LOG_LEVEL": "0"}, "0 False")):
        environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | env
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True
        )
        assert done.stdout.strip() == expected, done


def test_the_filter_keeps_what_is_not_a_log_line_and_errors_as_one_line():
    captured = (
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        b"I0000 00:00:1795924975.448629    5493 port.cc:153] oneDNN custom operations are on.\n"
        b"W0000 00:00:1795924975.448629    5493 meta_optimizer.cc:966] Not handling type DT_DOUBLE\n"
        b"/x.py:3: UserWarning: protobuf is older than TensorFlow needs\n"
        b"  import google.protobuf\n"
        b"E0000 00:00:1795924979.270210    5493 cuda_platform.cc:52] failed call to cuInit: UNKNOWN\n"
    )
    assert filtered(captured) == (
        b"/x.py:3: UserWarning: protobuf is older than TensorFlow needs\n"
        b"  import google.protobuf\n"
        b"TensorFlow: failed call to cuInit: UNKNOWN\n"
    )
    assert filtered(b"") == b""
