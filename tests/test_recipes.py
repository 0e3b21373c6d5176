"""Every shipped recipe validates; bad recipes fail with field paths, values and what is allowed."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
import yaml

from zoo import hardware
from zoo.recipe import (
    CAPABILITIES,
    KERAS_POLICIES,
    PRECISIONS,
    Precision,
    Recipe,
    RecipeError,
    Strategy,
    load_recipe,
)

RECIPES = sorted((Path(__file__).parent.parent / "recipes").glob("*.yaml"))


def test_recipes_are_shipped():
    assert any(p.name == "cnn-digits.yaml" for p in RECIPES)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_shipped_recipe_validates_and_round_trips(path):
    recipe = load_recipe(path)
    assert recipe.name == path.stem
    again = Recipe.model_validate(yaml.safe_load(recipe.to_yaml()))
    # what a run keeps names the same files from anywhere: its relative paths made absolute
    assert again.to_dict() == recipe.to_dict()


def _problems(raw, overrides=()):
    with pytest.raises(RecipeError) as caught:
        load_recipe(raw, overrides)
    return caught.value.problems


def test_a_preset_name_expands_and_user_fields_win():
    recipe = load_recipe({"model": {"architecture": "resnet-8", "channels": [8, 8, 8]}})
    assert recipe.model.architecture == "cnn"
    assert recipe.model.preset == "resnet-8"
    assert recipe.model.residual is True
    assert recipe.model.channels == [8, 8, 8]


def test_overrides_parse_yaml_values_and_fill_default_sections():
    recipe = load_recipe(
        {"model": {"architecture": "cnn"}},
        ["data.batch_size=8", "model.channels=[4, 4]", "model.hidden=null", "trainer.framework=torch"],
    )
    assert recipe.data.batch_size == 8 and recipe.data.name == "digits"
    assert recipe.model.channels == [4, 4] and recipe.model.hidden is None
    assert recipe.trainer.framework == "lightning"


def test_every_error_is_reported_with_its_path_and_value():
    problems = _problems(
        {
            "model": {"architecture": "cnn", "channels": [8, -1], "colour": "red"},
            "optimizer": {"name": "sgd", "lr": 0},
            "trainer": {"framework": "jax"},
        }
    )
    assert "model.channels.1: Input should be greater than 0 (got -1)" in problems
    assert any(p.startswith("model.colour: unknown key; allowed: architecture, preset,") for p in problems)
    assert "optimizer.lr: Input should be greater than 0 (got 0)" in problems
    assert "trainer.framework: Input should be 'lightning' or 'keras' (got 'jax')" in problems
    assert len(problems) == 4


def test_unknown_top_level_and_section_keys_are_errors():
    problems = _problems({"model": {"architecture": "cnn"}, "trainr": {}, "data": {"batchsize": 3}})
    assert any(p.startswith("trainr: unknown key; allowed: name, description, model, data") for p in problems)
    assert any(p.startswith("data.batchsize: unknown key; allowed: batch_size") for p in problems)


def test_unknown_architecture_lists_what_exists():
    (problem,) = _problems({"model": {"architecture": "resnet-9000"}})
    assert "'resnet-9000' is not a registered architecture or preset; known: bert, cnn" in problem
    assert "resnet50" in problem
    (problem,) = _problems({"model": {"channels": [3]}})
    assert problem.startswith("model.architecture: is required; one of: bert, cnn")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.precision=16-mixed", "trainer.accelerator=cpu"],
         "trainer.precision: '16-mixed' needs a GPU and the accelerator here is the CPU"),
        (["trainer.precision=16-true", "trainer.accelerator=cpu"], "use 'bf16-true'"),
        (["trainer.strategy=fsdp", "trainer.framework=keras"],
         "trainer.strategy: 'fsdp' is Lightning's; Keras on TensorFlow has no sharded data parallelism"),
        (["trainer.strategy=fsdp", "trainer.accelerator=cpu"],
         "'fsdp' needs GPUs (it refuses the CPU); use 'ddp'"),
        (["trainer.devices=3", "data.batch_size=64"],
         "data.batch_size: 64 does not split over 3 devices (trainer.devices x trainer.num_nodes)"),
    ],
)  # fmt: skip
def test_combinations_that_cannot_work_are_refused(overrides, message):
    problems = _problems({"model": {"architecture": "cnn"}}, overrides)
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize(
    ("framework", "strategy", "devices", "resolved"),
    [
        ("lightning", "mirrored", 2, "ddp"),
        ("keras", "ddp", 2, "mirrored"),
        ("keras", "auto", 2, "mirrored"),
        ("lightning", "auto", 2, "ddp"),
        ("lightning", "auto", 1, "auto"),
        ("keras", "auto", 1, "auto"),
        ("lightning", "fsdp", 2, "fsdp"),
    ],
)
def test_data_parallel_strategies_carry_across_frameworks(framework, strategy, devices, resolved):
    recipe = load_recipe(
        {"model": {"architecture": "cnn"}},
        [f"trainer.framework={framework}", f"trainer.strategy={strategy}", f"trainer.devices={devices}"],
    )
    assert recipe.trainer.resolved_strategy() == resolved


@pytest.mark.parametrize(
    ("framework", "strategy", "resolved"),
    [
        ("keras", "ddp", "multi_worker_mirrored"),
        ("keras", "mirrored", "multi_worker_mirrored"),
        ("keras", "auto", "multi_worker_mirrored"),
        ("lightning", "multi_worker_mirrored", "ddp"),
        ("lightning", "auto", "ddp"),
    ],
)
def test_data_parallel_across_nodes_is_each_frameworks_multi_node_strategy(framework, strategy, resolved):
    recipe = load_recipe(
        {"model": {"architecture": "cnn"}},
        [f"trainer.framework={framework}", f"trainer.strategy={strategy}", "trainer.num_nodes=2"],
    )
    assert recipe.trainer.resolved_strategy() == resolved


def test_every_framework_reads_every_precision_and_strategy_word():
    for caps in CAPABILITIES.values():
        assert set(caps.precisions) == set(PRECISIONS) == set(typing.get_args(Precision))
        for strategy in typing.get_args(Strategy):
            if strategy not in caps.refused:
                assert caps.resolve_strategy(strategy, devices=2) in caps.strategies
    for precision, meaning in PRECISIONS.items():  # Keras' policy names say the same dtypes
        policy = KERAS_POLICIES[precision]
        assert policy.startswith("mixed_") == meaning.mixed
        assert policy.removeprefix("mixed_") == meaning.products
        assert meaning.parameters == ("float32" if meaning.mixed else meaning.products)


def test_validation_never_looks_at_the_machine(monkeypatch):
    def probe():
        raise AssertionError("validation probed the machine")

    monkeypatch.setattr(hardware, "gpu_count", probe)
    recipe = load_recipe({"model": {"architecture": "cnn"}}, ["trainer.precision=16-mixed"])
    assert recipe.trainer.accelerator == "auto" and recipe.trainer.precision == "16-mixed"
    load_recipe({"model": {"architecture": "cnn"}}, ["trainer.strategy=fsdp"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.precision=16-mixed"],
         "trainer.precision '16-mixed' needs a GPU and the accelerator here is the CPU (trainer.accelerator "
         "is 'auto' and this machine has no GPU)"),
        (["trainer.precision=16-true"], "use 'bf16-true'"),
        (["trainer.strategy=fsdp"], "trainer.strategy 'fsdp' needs GPUs (it refuses the CPU); use 'ddp'"),
    ],
)  # fmt: skip
def test_what_needs_a_gpu_is_refused_when_a_run_starts_without_one(monkeypatch, overrides, message):
    recipe = load_recipe({"model": {"architecture": "cnn"}}, overrides)
    monkeypatch.setattr(hardware, "gpu_count", lambda: 0)
    with pytest.raises(hardware.SetupError) as caught:
        hardware.check_trainer(recipe.trainer)
    assert message in str(caught.value)
    monkeypatch.setattr(hardware, "gpu_count", lambda: 1)
    assert hardware.check_trainer(recipe.trainer) == "gpu"


def test_init_options_need_a_checkpoint_that_exists():
    problems = _problems({"model": {"architecture": "cnn"}}, ["init.from=x.safetensors"])
    assert any("init.from: 'x.safetensors' is not a file" in p for p in problems), problems
    problems = _problems({"model": {"architecture": "cnn"}}, ["init.freeze_backbone=true"])
    assert any("need init.from" in p for p in problems), problems


def test_bad_overrides_and_files_are_reported():
    assert _problems({"model": {"architecture": "cnn"}}, ["trainer.seed"]) == [
        "override 'trainer.seed' is not of the form section.field=value"
    ]
    with pytest.raises(RecipeError, match="no such file"):
        load_recipe("does/not/exist.yaml")


def test_invalid_yaml_is_reported(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model: {architecture: cnn\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(path)


def test_npz_data_must_exist():
    problems = _problems({"model": {"architecture": "cnn"}, "data": {"name": "npz", "path": "nope.npz"}})
    assert any("data.path: 'nope.npz' is not a file" in p for p in problems)


def test_nesterov_needs_momentum():
    (problem,) = _problems({"model": {"architecture": "cnn"}, "optimizer": {"name": "sgd", "nesterov": True}})
    assert problem == "optimizer.nesterov: needs optimizer.momentum > 0"


def test_json_schema_describes_the_recipe():
    schema = Recipe.model_json_schema(by_alias=True)
    assert set(schema["properties"]) >= {
        "model",
        "data",
        "optimizer",
        "schedule",
        "trainer",
        "init",
        "export",
    }
    assert schema["additionalProperties"] is False


def test_a_key_given_twice_is_refused_not_silently_last_wins(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("model:\n  architecture: cnn\noptimizer:\n  lr: 0.1\n  lr: 10\n")
    with pytest.raises(
        RecipeError, match=r"the key 'lr' is given twice in one mapping \(line 4 and line 5\)"
    ):
        load_recipe(path)


def test_a_recipe_that_is_not_utf8_is_reported(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("description: caf\xe9\n".encode("latin-1"))
    with pytest.raises(RecipeError, match=r"not UTF-8 text .*save the recipe as UTF-8"):
        load_recipe(path)


@pytest.mark.parametrize(
    "override, message",
    [
        ("optimizer.lr=[1, 2", "the value is not valid YAML"),
        ("model.channels.5=8", "model.channels has 2 items, no index 5"),
        ("model.channels.7.x=8", "model.channels has 2 items, no index 7"),
    ],
)
def test_bad_override_values_and_indices_are_reported(override, message):
    base = ["model.architecture=cnn", "model.channels=[8, 16]"]
    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe(RECIPES[0], [*base, override])
