"""What a launcher or a scheduler sets around a run: a one-process recipe inside a multi-process
job, stray single-process launcher variables, a multi-node recipe without the rendezvous
variables, a TF_CONFIG TensorFlow would not read and a ZOO_DDP_TIMEOUT_S that is not seconds.
Each is said in one line, before the run starts, never as a traceback at import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import nested, train

from zoo.hardware import DDP_TIMEOUT_MAX_S, SetupError, check_trainer, ddp_timeout_s
from zoo.recipe import load_recipe
from zoo.runs.launch import check_launch, is_primary_process

LM_RECIPE = Path(__file__).parent.parent / "recipes" / "lstm-charlm.yaml"


def test_a_one_process_recipe_inside_a_multi_process_job_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, out = train(tmp_path, "copy")
    assert code == 2 and "process 1 of a 2-process job (RANK=1, WORLD_SIZE=2)" in out, out
    assert not (tmp_path / "copy").exists()


def test_stray_single_process_launcher_variables_are_ignored_and_said(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        monkeypatch.setenv(name, "0")
    code, out = train(tmp_path, "alone", "trainer.max_epochs=1", "export.state_every_n_steps=1000")
    assert code == 0, out
    assert "ignoring RANK=0, LOCAL_RANK=0, SLURM_PROCID=0" in caplog.text
    assert (tmp_path / "alone" / "model.safetensors").is_file()
    assert not (tmp_path / "state").exists()


def test_a_multi_node_recipe_says_which_launcher_variables_are_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, out = train(tmp_path, "nodes", "trainer.num_nodes=2")
    assert code == 2 and "MASTER_ADDR, MASTER_PORT are not set here" in out, out
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    monkeypatch.setenv("WORLD_SIZE", "4")
    code, out = train(tmp_path, "nodes", "trainer.num_nodes=2")
    assert code == 2 and "started 4 processes" in out and "makes 2" in out, out


@pytest.mark.parametrize(
    ("tf_config", "words"),
    [
        ("[1]", "is a JSON array, not an object"),
        ("{", "is not JSON"),
        (nested(3000), "more than 100 levels deep"),
        ('{"task": 3}', "TF_CONFIG's task is a JSON number, not an object"),
        ('{"cluster": {"worker": 2}}', "TF_CONFIG's cluster is not an object of lists of addresses"),
    ],
)
def test_a_tf_config_that_tensorflow_would_not_read_is_named(monkeypatch, tf_config, words):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    recipe = load_recipe({"model": {"architecture": "convnet-tiny"}})
    for check in (is_primary_process, lambda: check_launch(recipe.trainer)):
        with pytest.raises(SetupError, match="TF_CONFIG") as error:
            check()
        assert words in str(error.value) and '"task": {"type": "worker", "index": 0}' in str(error.value)


@pytest.mark.parametrize("value", ["abc", "-1", "0", "inf", "nan", "", str(DDP_TIMEOUT_MAX_S + 1)])
def test_a_ddp_timeout_that_is_not_seconds_is_named(monkeypatch, value):
    monkeypatch.setenv("ZOO_DDP_TIMEOUT_S", value)
    with pytest.raises(SetupError, match=f"ZOO_DDP_TIMEOUT_S={value!r} is not a number of seconds"):
        ddp_timeout_s()
    ddp = load_recipe(
        {"model": {"architecture": "convnet-tiny"}, "trainer": {"strategy": "ddp", "devices": 2}}
    )
    with pytest.raises(SetupError, match="ZOO_DDP_TIMEOUT_S"):
        check_trainer(ddp.trainer)
    check_trainer(load_recipe({"model": {"architecture": "convnet-tiny"}}).trainer)  # not used: not read


def test_a_ddp_timeout_at_its_limits_is_used(monkeypatch):
    for value, seconds in (("600", 600.0), ("0.5", 0.5), (str(DDP_TIMEOUT_MAX_S), DDP_TIMEOUT_MAX_S)):
        monkeypatch.setenv("ZOO_DDP_TIMEOUT_S", value)
        assert ddp_timeout_s() == seconds
    monkeypatch.delenv("ZOO_DDP_TIMEOUT_S")
    assert ddp_timeout_s() == 600.0


def test_a_bad_ddp_timeout_is_refused_before_the_run_not_at_import(tmp_path):
    """A fresh process, as a user's: the variable was read when zoo.lightning.trainer was
    imported, so a bad value ended every Lightning command in a ValueError traceback."""
    args = [
        "train", LM_RECIPE, "--set", "trainer.strategy=ddp", "--set", "trainer.devices=2",
        "--set", f"export.dir={tmp_path}",
    ]  # fmt: skip
    env = {**os.environ, "ZOO_DDP_TIMEOUT_S": "abc"}
    command = [sys.executable, "-m", "zoo.cli", *map(str, args)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: ZOO_DDP_TIMEOUT_S='abc' is not a number of seconds in (0, {DDP_TIMEOUT_MAX_S}]; set it to "
        "one (e.g. 600) or unset it for 600"
    ], done.stderr
    assert list(tmp_path.iterdir()) == []  # refused before a run folder
