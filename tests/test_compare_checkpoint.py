"""``zoo compare CHECKPOINT``: a user's trained or imported checkpoint, loaded into both twins;
``init.from`` honoured; and the peak memory estimated, and a comparison that does not fit
refused, before anything is built."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from compare_cases import RECIPE, quick

from zoo import model_memory, peak_memory
from zoo.cli import main
from zoo.hardware import SetupError

TINY = "convnet-tiny"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of the default recipe on the tiny CNN, one short epoch: its run folder."""
    import zoo

    root = tmp_path_factory.mktemp("runs")
    overrides = [*quick(TINY, root), "data.train_per_class=8", "trainer.framework=lightning"]
    return zoo.train(RECIPE, overrides=overrides).run_dir


@pytest.fixture
def built(monkeypatch):
    """Every pair of twins compare builds, in order."""
    from zoo.compare import twins as module

    pairs = []
    original = module.build_twins

    def spy(*args, **kwargs):
        pairs.append(original(*args, **kwargs))
        return pairs[-1]

    monkeypatch.setattr(module, "build_twins", spy)
    return pairs


def sets(overrides: list[str]) -> list[str]:
    return [word for override in overrides for word in ("--set", override)]


def test_a_trained_run_is_compared_by_its_checkpoint_with_its_own_recipe(trained, built):
    """Both twins hold the checkpoint's weights: their forward is the checkpoint's, not the
    recipe's fresh init."""
    import torch

    import zoo
    from zoo.compare import compare
    from zoo.initial_weights import seeded_torch_model

    result = compare(trained / "model.safetensors", steps=3, speed_steps=0, write=False)
    assert result.passed, result.text
    twins = built[0]
    x = torch.from_numpy(np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    loaded = zoo.load_checkpoint(trained / "model.safetensors", framework="lightning").eval()
    fresh = seeded_torch_model(twins.setup.family, twins.config, twins.setup.recipe.trainer.seed).eval()
    twins.torch_model.eval()
    with torch.no_grad():
        ours, theirs, seed = twins.torch_model(x), loaded(x), fresh(x)
    keras = np.asarray(twins.keras_model(np.transpose(x.numpy(), (0, 2, 3, 1)), training=False))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-5)
    np.testing.assert_allclose(keras, theirs.numpy(), atol=1e-4)
    assert np.abs(seed.numpy() - theirs.numpy()).max() > 1e-3  # the fresh init: 100x further off
    assert any("start from init.from" in note for note in result.report["notes"])


def test_an_imported_checkpoint_needs_a_recipe_and_is_compared_with_one(tmp_path, built):
    from zoo import registry
    from zoo.checkpoint.file import CheckpointError
    from zoo.checkpoint.metadata import write_checkpoint
    from zoo.compare import compare
    from zoo.initial_weights import initial_tensors

    family = registry.get_family(TINY)
    config = registry.resolve_config(TINY, num_classes=10, in_channels=1, image_size=8)
    tensors = {k: v + 0.01 for k, v in initial_tensors(family, config, seed=123).items()}
    path = write_checkpoint(tmp_path / "imported.safetensors", config, tensors, framework="imported")

    with pytest.raises(CheckpointError, match=r"carries no recipe .* give --recipe"):
        compare(path, steps=2, speed_steps=0, write=False)
    assert built == []

    runner = CliRunner()
    args = ["compare", str(path), "--recipe", str(RECIPE), "--steps", "2", "--speed-steps", "0", "--quiet"]
    outcome = runner.invoke(main, [*args, *sets(quick(TINY, tmp_path))])
    assert outcome.exit_code == 0, outcome.output
    assert "PASS" in outcome.output
    initial = built[0].initial
    assert set(initial) == set(tensors)
    assert all(np.array_equal(initial[k], tensors[k]) for k in tensors)


def test_init_from_in_a_recipe_is_honoured(trained, built, tmp_path):
    from zoo.checkpoint.metadata import read_checkpoint
    from zoo.compare import compare

    checkpoint = trained / "model.safetensors"
    overrides = [*quick(TINY, tmp_path), f"init.from={checkpoint}"]
    result = compare(RECIPE, steps=2, overrides=overrides, speed_steps=0, write=False)
    assert result.passed, result.text
    saved = read_checkpoint(checkpoint).tensors()
    assert all(np.array_equal(built[0].initial[k], v) for k, v in saved.items())
    assert any(f"fine-tuning from {checkpoint}" in note for note in result.report["notes"])


def test_fine_tune_settings_compare_cannot_honour_are_refused_before_any_work(trained, built, tmp_path):
    from zoo.compare import compare

    overrides = [*quick(TINY, tmp_path), f"init.from={trained / 'model.safetensors'}", "init.head_lr=0.1"]
    with pytest.raises(SetupError, match=r"init\.freeze_backbone and init\.head_lr are not compared"):
        compare(RECIPE, steps=2, overrides=overrides, speed_steps=0, write=False)
    assert built == []


# ---------------------------------------------------------------------------- memory


def test_a_comparison_that_does_not_fit_is_refused_with_both_numbers(monkeypatch, built, tmp_path):
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, "50MB")
    args = ["compare", str(RECIPE), "--steps", "2", *sets(quick(TINY, tmp_path))]
    outcome = CliRunner().invoke(main, args)
    assert outcome.exit_code == 2, outcome.output
    message = outcome.output
    assert "zoo compare needs about" in message and "has 0.0 GB available" in message
    assert "Nothing was built" in message and peak_memory.AVAILABLE_VARIABLE in message
    assert built == []  # refused before any twin existed
    assert not list(tmp_path.iterdir())  # and no report folder


def estimate(tmp_path, *extra: str, training: bool = True, fine_tune: bool = False) -> peak_memory.Estimate:
    """zoo.peak_memory's estimate of the tiny CNN's comparison, at the recipe's batch."""
    from zoo.compare.runner import resolve
    from zoo.compare.twins import prepare

    setup = prepare(resolve(RECIPE, [*quick(TINY, tmp_path), *extra], None, None))
    inputs = setup.dataset.train.x[: setup.batch_size]
    return peak_memory.compare_estimate(
        setup.recipe, setup.family, setup.config, inputs, fine_tune=fine_tune, training=training
    )


def test_the_refusal_says_what_would_fit(monkeypatch, built, tmp_path):
    """Between the estimates of the forward check and of the whole comparison, the forward check
    is offered, with its own size, and fits."""
    from zoo.compare import compare

    full, forward = estimate(tmp_path).total, estimate(tmp_path, training=False).total
    assert forward < full
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, str((full + forward) // 2))
    offer = r"--forward-only \(the weights, forward and gradients, about "
    with pytest.raises(peak_memory.MemoryShort, match=offer + peak_memory.gib(forward)) as refused:
        compare(RECIPE, steps=2, overrides=quick(TINY, tmp_path), write=False)
    assert peak_memory.gib(full) in str(refused.value)
    assert built == []
    assert compare(RECIPE, overrides=quick(TINY, tmp_path), forward_only=True, write=False).passed


@pytest.mark.parametrize(
    ("precision", "pairs"),
    [("32-true", 1 + 2), ("bf16-true", 0.5 + 1), ("64-true", 2)],  # float32 and float64 bytes, bf16's half
)
def test_the_estimate_counts_the_recipes_pair_and_its_reference(tmp_path, precision, pairs):
    """A float32 comparison also holds a float64 pair, a bf16 one a float32 pair; float64 has none
    above it. The update adds the Keras twins' Adam moments, its snapshot and the moves."""
    weights = estimate(tmp_path, f"trainer.precision={precision}").parts["initial tensors"]
    full = estimate(tmp_path, f"trainer.precision={precision}")
    assert full.parts["twins"] == int(2 * weights * pairs)
    forward = estimate(tmp_path, f"trainer.precision={precision}", training=False)
    assert forward.parts["optimizer state"] == forward.parts["snapshot"] == 0
    assert full.parts["optimizer state"] >= 2 * weights * pairs  # AdamW: two moments per pair
    assert full.parts["gradients and moves"] >= forward.parts["gradients and moves"]  # and the moves
    assert estimate(tmp_path, fine_tune=True).parts["initial tensors"] == 2 * weights  # and the checkpoint's


def test_the_estimate_counts_what_torch_really_holds():
    """The weight table's bytes are the built model's, and the meta-device trace saves what a
    real forward pass saves (plus the loss's copy of the output)."""
    import torch

    from zoo import registry
    from zoo.initial_weights import seeded_torch_model
    from zoo.memory import saved_for_backward

    family = registry.get_family(TINY)
    config = registry.resolve_config(TINY, num_classes=10, in_channels=1, image_size=8)
    model = seeded_torch_model(family, config, 0)
    assert model_memory.parameter_bytes(family, config) == sum(p.numel() * 4 for p in model.parameters())
    x = np.random.default_rng(0).random((16, 1, 8, 8), dtype=np.float32)
    with saved_for_backward(exclude=model.parameters()) as saved:
        output = model.train()(torch.from_numpy(x))
    traced = model_memory.activation_bytes(family, config, x)
    assert traced == sum(saved.values()) + 2 * output.numel() * 4


@pytest.mark.parametrize(
    ("text", "size"), [("6GB", 6 * 2**30), ("512m", 512 * 2**20), ("1.5GiB", 3 * 2**29), ("unlimited", None)]
)
def test_available_memory_override(monkeypatch, text, size):
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, text)
    assert peak_memory.available_bytes() == size


def test_a_wrong_override_is_named(monkeypatch):
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, "lots")
    with pytest.raises(SetupError, match=r"ZOO_AVAILABLE_MEMORY='lots' is not a size; give one such as 6GB"):
        peak_memory.available_bytes()


# ---------------------------------------------------------------------------- adapters


@pytest.fixture(scope="module")
def adapter_run(tmp_path_factory):
    """A LoRA run on a one-layer gpt2-micro's seed init, one short epoch: its run folder (the
    adapter names its base by seed and sha256; its B moved off zero, its q/k/v/out biases trained)."""
    import zoo

    root = tmp_path_factory.mktemp("lora")
    text = root / "text.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 40)
    recipe = {
        "name": "lora", "model": {"architecture": "gpt2-micro", "n_layer": 1},
        "data": {"name": "text", "path": str(text), "seq_len": 16, "batch_size": 8},
        "optimizer": {"name": "adamw", "lr": 0.01},
        "trainer": {"max_epochs": 1, "progress_bar": False, "framework": "lightning"},
        "init": {"lora": {"rank": 4, "train_bias": "lora_only"}},
        "export": {"dir": str(root / "runs")}, "tracking": {"tensorboard": False},
    }  # fmt: skip
    return zoo.train(recipe).run_dir


def on_a_base_file(adapter_path, folder, change: str | None = None):
    """The adapter, re-written to name a checkpoint of its seed base (``change``: one of that
    base's tensors moved, so that the base is another)."""
    from zoo.checkpoint.metadata import write_checkpoint
    from zoo.initial_weights import initial_tensors
    from zoo.lora import read_adapter, write_adapter

    adapter = read_adapter(adapter_path)
    tensors = initial_tensors(adapter.family, adapter.config, adapter.base["seed"])
    if change is not None:
        tensors[change] = tensors[change] + 0.5
    vocab = json.loads(adapter.metadata["task_info"])["vocab"]
    base = write_checkpoint(folder / "base.safetensors", adapter.config, tensors, framework="lightning",
                            vocab=vocab)  # fmt: skip
    named = {"path": str(base), "sha256": adapter.base["sha256"]}
    return write_adapter(folder / "adapter.safetensors", adapter.family, adapter.config, adapter.adapter,
                         adapter.tensors, named, framework="lightning", vocab=vocab)  # fmt: skip


def test_an_adapter_is_compared_on_its_base_with_its_tensors_in_both_twins(adapter_run, built):
    """Both twins are the adapted model ``zoo.lora.load_adapter`` gives, and only the adapter's
    tensors (A, B, the biases it trained) count as trainable."""
    import torch

    from zoo.compare import compare
    from zoo.lora import load_adapter, read_adapter

    result = compare(adapter_run, steps=3, speed_steps=0, write=False)
    assert result.passed, result.text
    assert "lora.adapters." in result.sections["gradients"].reason  # the worst gradient is an adapter's
    adapter = read_adapter(adapter_run / "adapter.safetensors")
    twins = built[0]
    trained = adapter.adapter.bias_names(adapter.family, adapter.config)
    assert set(twins.trainable) == {n for n in twins.initial if n.startswith("lora.")} | set(trained)
    ids = adapter.config.example_input(2, seed=1)
    with torch.no_grad():
        ours = twins.torch_model.eval()(torch.from_numpy(ids)).numpy()
        theirs = load_adapter(adapter.path, "lightning")(torch.from_numpy(ids)).numpy()
    keras = np.asarray(twins.keras_model(ids, training=False))
    assert np.abs(ours - theirs).max() <= 1e-5
    assert np.abs(keras - np.asarray(load_adapter(adapter.path, "keras")(ids))).max() <= 1e-5
    assert (
        np.abs(adapter.tensors[f"{adapter.adapter.points[0].name}.lora_B"]).max() > 0
    )  # not the base's output
    assert any("LoRA adapter" in note for note in result.report["notes"])


def test_an_adapter_on_a_base_file_compares_and_another_base_is_refused(adapter_run, built, tmp_path):
    """``zoo compare ADAPTER --recipe R``: the base the adapter names loads into both twins; a
    missing base, or one whose sha256 differs, is refused before any work with the words
    ``zoo.lora.load_adapter`` (and zoo merge) use."""
    from zoo.checkpoint.file import CheckpointError
    from zoo.lora import load_adapter

    recipe = adapter_run / "recipe.yaml"
    args = ["--recipe", str(recipe), "--steps", "2", "--speed-steps", "0", "--quiet", "--set",
            f"export.dir={tmp_path}"]  # fmt: skip
    good = on_a_base_file(adapter_run / "adapter.safetensors", tmp_path)
    outcome = CliRunner().invoke(main, ["compare", str(good), *args])
    assert outcome.exit_code == 0, outcome.output
    assert "PASS" in outcome.output
    pairs = len(built)  # the float32 twins and their float64 reference

    other = tmp_path / "other.txt"  # characters the base's vocabulary lacks: its embedding grows
    other.write_text("quick brown foxes jump over lazy dogs. " * 40)
    reshaped = CliRunner().invoke(main, ["compare", str(good), *args, "--set", f"data.path={other}"])
    assert reshaped.exit_code == 2, reshaped.output
    assert "was trained on a base with sha256" in reshaped.output and "re-initialised: " in reshaped.output

    for case, change in (("missing", None), ("other", "h.0.ln_1.weight")):
        folder = tmp_path / case
        folder.mkdir()
        adapter = on_a_base_file(adapter_run / "adapter.safetensors", folder, change)
        if change is None:
            (folder / "base.safetensors").unlink()
        with pytest.raises(CheckpointError) as elsewhere:
            load_adapter(adapter, "lightning")
        refused = CliRunner().invoke(main, ["compare", str(adapter), *args])
        assert refused.exit_code == 2, refused.output
        assert str(elsewhere.value) in refused.output
        assert ("no such file" if change is None else "but") in str(elsewhere.value)
    assert len(built) == pairs  # no pair of twins for any refusal
