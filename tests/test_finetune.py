"""Fine-tune from either framework's checkpoint in either framework; evaluate anywhere;
runs that go wrong stop with a message."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from conftest import FRAMEWORKS, RECIPE, tiny
from safetensors.numpy import load_file

import zoo
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.initial_weights import initial_tensors
from zoo.runs import NonFiniteLoss


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A checkpoint on the digits 0-4 from each framework."""
    root = tmp_path_factory.mktemp("sources")
    return {fw: zoo.train(RECIPE, fw, tiny(root, "data.classes=[0,1,2,3,4]")).checkpoint for fw in FRAMEWORKS}


@pytest.mark.parametrize(("source", "target"), [("lightning", "keras"), ("keras", "lightning")])
def test_finetune_across_frameworks_with_a_new_head(sources, source, target, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="zoo"):
        result = zoo.train(
            RECIPE, target,
            tiny(tmp_path, "data.classes=[5,6,7]", f"init.from={sources[source]}",
                 "init.freeze_backbone=true"),
        )  # fmt: skip
    assert "re-initialised: head.fc.weight, head.fc.bias" in caplog.text
    before, after = load_file(sources[source]), load_file(result.checkpoint)
    assert after["head.fc.weight"].shape == (3, 32) and before["head.fc.weight"].shape == (5, 32)
    for name in before:
        if name.startswith("head.fc"):
            continue
        assert np.array_equal(before[name], after[name]), f"{name}: the frozen backbone moved"
    # The new head started from the run's seeded init and trained on its own.
    found = read_checkpoint(result.checkpoint)
    start = initial_tensors(found.family, found.config, seed=found.json("recipe")["trainer"]["seed"])
    assert start["head.fc.weight"].shape == after["head.fc.weight"].shape
    moved = np.abs(after["head.fc.weight"] - start["head.fc.weight"]).max()
    assert moved > 1e-3, "the new head did not train"
    losses = [float(row["train_loss"]) for row in result.history]
    assert losses[1] < losses[0]


@pytest.mark.parametrize("target", FRAMEWORKS)
def test_finetune_all_layers_with_a_head_rate(sources, target, tmp_path):
    result = zoo.train(
        RECIPE, target,
        tiny(tmp_path, "data.classes=[5,6,7,8,9]", f"init.from={sources['lightning']}",
             "init.reset_head=true", "init.head_lr=0.05"),
    )  # fmt: skip
    before, after = load_file(sources["lightning"]), load_file(result.checkpoint)
    assert not np.array_equal(before["stem.conv.weight"], after["stem.conv.weight"])
    assert result.metrics["test_accuracy"] > 0.5


def test_another_family_is_refused(sources, tmp_path):
    with pytest.raises(CheckpointError, match="is a 'cnn' checkpoint, but the recipe trains a 'lstm' model"):
        zoo.train(RECIPE, "lightning", tiny(tmp_path, "model.architecture=lstm-tiny",
                                            f"init.from={sources['keras']}"))  # fmt: skip


def test_another_width_is_refused_naming_the_tensors(sources, tmp_path):
    with pytest.raises(CheckpointError) as caught:
        zoo.train(
            RECIPE, "lightning", tiny(tmp_path, "model.channels=[8,24]", f"init.from={sources['keras']}")
        )
    message = str(caught.value)
    assert (
        "does not fit the checkpoint's backbone: stages.1.0.conv.weight [16, 8, 3, 3] -> [24, 8, 3, 3]"
        in message
    )
    assert "Only the data (class count, vocabulary) may change tensor shapes" in message
    # The exact option that makes the recipe's model the checkpoint's, and it works.
    suggested = message.rsplit("to train the checkpoint's model, add: ", 1)[1]
    assert suggested == "--set 'model.channels=[8,16]'."
    fixed = tiny(tmp_path, "model.channels=[8,24]", f"init.from={sources['keras']}", "model.channels=[8,16]")
    assert zoo.train(RECIPE, "lightning", fixed).checkpoint.is_file()


def test_a_shipped_preset_recipe_on_another_size_suggests_the_fields(tmp_path):
    """An imported gpt2 of another size under recipes/gpt2-micro-pydocs.yaml (which names a
    preset, so there is no field in it to remove): the message names the --set options, fewest
    that fit (not the dropouts or heads that agree), and with them the plan fits."""
    from zoo import registry
    from zoo.finetune import base_config, plan

    config = {"n_layer": 3, "n_embd": 96, "n_head": 4, "vocab_size": 300}
    model = zoo.create_model("gpt2-micro", "lightning", seed=0, **config)
    checkpoint = zoo.save_checkpoint(model, tmp_path / "imported.safetensors")
    shipped = RECIPE.parent / "gpt2-micro-pydocs.yaml"

    def fine_tune(*overrides):
        recipe = zoo.load_recipe(shipped, [f"init.from={checkpoint}", *overrides])
        family = registry.get_family(recipe.model.architecture)
        found, base = base_config(recipe, family)
        return plan(recipe, family, found, base.model_copy(update={"vocab_size": 300}))  # the data's

    with pytest.raises(CheckpointError) as caught:
        fine_tune()
    assert str(caught.value).endswith(
        "to train the checkpoint's model, add: --set model.n_embd=96 --set model.n_layer=3."
    )
    assert fine_tune("model.n_embd=96", "model.n_layer=3").reinitialised == []


@pytest.mark.parametrize("source", FRAMEWORKS)
def test_evaluate_gives_the_same_metrics_in_both_frameworks(sources, source):
    recipe = zoo.load_recipe(RECIPE, ["data.classes=[0,1,2,3,4]"])
    metrics = {fw: zoo.evaluate(sources[source], recipe, framework=fw) for fw in FRAMEWORKS}
    assert metrics["lightning"].keys() == metrics["keras"].keys() == {"test_loss", "test_accuracy"}
    assert metrics["lightning"]["test_accuracy"] == metrics["keras"]["test_accuracy"]
    assert metrics["lightning"]["test_loss"] == pytest.approx(metrics["keras"]["test_loss"], abs=1e-5)


def test_evaluate_refuses_data_that_does_not_fit(sources):
    with pytest.raises(CheckpointError, match=r"does not fit the recipe's data: model\.num_classes is 5"):
        zoo.evaluate(sources["keras"], zoo.load_recipe(RECIPE), framework="lightning")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_non_finite_loss_stops_training_with_where_and_what_before(framework, tmp_path):
    with pytest.raises(
        NonFiniteLoss, match=r"became nan at step \d+; the last finite loss was [\d.]+ at step"
    ):
        zoo.train(RECIPE, framework, tiny(tmp_path, "optimizer.name=sgd", "optimizer.lr=1e12"))


@pytest.mark.parametrize(("source", "target"), [("lightning", "keras"), ("keras", "lightning")])
def test_a_frozen_backbone_keeps_its_batchnorm_statistics_in_both_frameworks(source, target, tmp_path):
    """Frozen BatchNorm layers normalise with the source's running statistics and never update
    them (Keras' trainable=False convention, kept by the Lightning twin too): every backbone
    tensor, statistics and batch counters included, leaves fine-tuning bit for bit."""
    common = ["model.architecture=resnet-8", "trainer.max_epochs=1"]
    first = zoo.train(RECIPE, source, tiny(tmp_path / "a", *common, "data.classes=[0,1,2,3,4]"))
    start = [f"init.from={first.checkpoint}", "init.freeze_backbone=true"]
    tuned = zoo.train(RECIPE, target, tiny(tmp_path / "b", *common, "data.classes=[5,6,7]", *start))
    before, after = load_file(first.checkpoint), load_file(tuned.checkpoint)
    assert any(name.endswith("running_mean") for name in before)
    for name in before:
        if not name.startswith("head.fc"):
            assert np.array_equal(before[name], after[name]), f"{name}: the frozen backbone moved"
    assert not np.array_equal(before["head.fc.bias"][:3], after["head.fc.bias"])
