"""``zoo compare`` with TensorFlow's oneDNN on and off. TensorFlow reads
``TF_ENABLE_ONEDNN_OPTS`` once, when it is imported, so each setting runs the CLI in its
own process: the default recipe as shipped, 100 steps (with oneDNN, one max-pool window
that is an exact tie in torch is one unit in the last place off in Keras, and training
amplifies it), passes both ways, and the report says which way it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
ZOO = Path(sys.executable).parent / "zoo"


# Unset, TensorFlow chooses by CPU (zoo.keras.onednn); test_compare.py runs that in-process.
@pytest.mark.parametrize("onednn", [pytest.param("1", marks=pytest.mark.slow), "0"])
def test_the_default_recipe_passes_with_onednn_on_and_off(onednn, tmp_path):
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [
        str(ZOO),
        "compare",
        str(RECIPE),
        "--steps",
        "100",
        "--speed-steps",
        "0",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)

    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "verdict: PASS (4 of 4 parity sections pass)" in done.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    words = f"{'on' if onednn == '1' else 'off'} (TF_ENABLE_ONEDNN_OPTS={onednn})"
    assert report["verdict"] == "PASS" and report["tensorflow_onednn"] == words
    training = report["sections"]["training"]
    assert training["steps"] == 100 and all(point["passed"] for point in training["resync"])
    assert f"oneDNN {words}" in done.stdout
