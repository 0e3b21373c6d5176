"""Trainer knobs mean the same thing in both frameworks: precision, accumulation,
determinism, compile. Each value trains (loss finite and going down) or is refused."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FRAMEWORKS, RECIPE, max_diff, tiny
from safetensors.numpy import load_file

import zoo
from zoo import registry
from zoo.recipe import PRECISIONS, RecipeError


def smallest_per_family() -> list[str]:
    """Every registered family, by its smallest family default or preset: a new family is
    covered without editing this file."""
    entries = registry.list_architectures()
    return [min((e for e in entries if e.family == name), key=lambda e: e.parameters).name for name in
            registry.families()]  # fmt: skip


TINY_PRESETS = smallest_per_family()
CORPUS = " ".join(f"def step_{i}(batch):\n    return model(batch) * {i % 7}\n" for i in range(400))


def train_tiny(framework: str, architecture: str, tmp_path, *overrides: str):
    """A seconds-long run: the digits for families that read images or feature sequences,
    a short text (its own small BPE) for token families, at their language-model task."""
    family = registry.get_family(architecture)
    if family.input_kind != "tokens":
        return zoo.train(RECIPE, framework, tiny(tmp_path, f"model.architecture={architecture}", *overrides))
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS)
    task = "language_modeling" if "language_modeling" in family.tasks else "masked_language_modeling"
    text_data = [
        "data.name=text", f"data.path={text}", f"data.task={task}", "data.tokenizer=bpe",
        "data.bpe_vocab_size=300", "data.seq_len=32", "data.batch_size=16",
    ]  # fmt: skip
    return zoo.train(RECIPE, framework, tiny(tmp_path, f"model.architecture={architecture}", *text_data,
                                             *overrides))  # fmt: skip


CPU_PRECISIONS = [p for p, meaning in PRECISIONS.items() if meaning.on_cpu is None]
GPU_PRECISIONS = [p for p, meaning in PRECISIONS.items() if meaning.on_cpu is not None]
DEFAULT_PRECISION = zoo.load_recipe(RECIPE).trainer.precision


@pytest.mark.parametrize("architecture", TINY_PRESETS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("precision", [p for p in CPU_PRECISIONS if p != DEFAULT_PRECISION])
def test_each_precision_trains_every_family(framework, precision, architecture, tmp_path):
    """Every precision a CPU runs, other than the default: every family trains at the default
    in both frameworks through ``zoo compare`` (tests/test_compare.py's family and shipped
    recipe cases, which also check both trainers take the same steps)."""
    from zoo.hardware import SetupError

    try:
        result = train_tiny(
            framework, architecture, tmp_path, f"trainer.precision={precision}", "optimizer.lr=0.02"
        )
    except SetupError as refused:  # torch's oneDNN LSTM on a CPU without bfloat16 instructions
        import torch

        assert precision == "bf16-mixed" and not torch.ops.mkldnn._is_mkldnn_bf16_supported(), refused
        assert "cannot run in bfloat16 on this CPU" in str(refused)
        return
    losses = [float(row["train_loss"]) for row in result.history]
    assert all(np.isfinite(losses)) and losses[1] < losses[0]
    if registry.get_family(architecture).input_kind != "tokens":
        assert result.metrics["test_accuracy"] > 0.2  # 10 classes: chance is 0.1
    # The exported checkpoint is float32 whatever the training precision (counters stay int64).
    tensors = load_file(result.checkpoint)
    assert {str(t.dtype) for t in tensors.values() if t.dtype.kind == "f"} == {"float32"}


@pytest.mark.parametrize("precision", GPU_PRECISIONS)
def test_float16_is_refused_on_cpu(precision):
    with pytest.raises(RecipeError, match=f"trainer.precision: '{precision}' needs a GPU"):
        zoo.load_recipe(RECIPE, [f"trainer.precision={precision}", "trainer.accelerator=cpu"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_float16_where_auto_finds_no_gpu_is_refused_when_the_run_starts(framework, tmp_path):
    from zoo.hardware import SetupError, gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU")
    recipe = zoo.load_recipe(RECIPE, tiny(tmp_path, "trainer.precision=16-mixed"))  # valid anywhere
    with pytest.raises(SetupError, match=r"trainer\.precision '16-mixed' needs a GPU .* use 'bf16-mixed'"):
        zoo.train(recipe, framework)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_asking_for_a_missing_gpu_is_a_clear_error(framework, tmp_path):
    from zoo.hardware import SetupError, gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SetupError, match=r"trainer\.accelerator is 'gpu'"):
        zoo.train(RECIPE, framework, tiny(tmp_path, "trainer.accelerator=gpu"))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_accumulating_4_batches_of_16_is_one_batch_of_64(framework, tmp_path, even_npz):
    common = ["data.name=npz", f"data.path={even_npz}", "optimizer.name=sgd", "optimizer.lr=0.1"]
    big = zoo.train(RECIPE, framework, tiny(tmp_path, *common, "data.batch_size=64"))
    small = zoo.train(
        RECIPE, framework, tiny(tmp_path, *common, "data.batch_size=16", "trainer.accumulate_grad_batches=4")
    )
    a, b = load_file(big.checkpoint), load_file(small.checkpoint)
    assert max(max_diff(a[k], b[k]) for k in a) <= 1e-5
    assert [r["step"] for r in big.history] == [r["step"] for r in small.history] == ["4", "8"]


def test_accumulation_that_splits_an_epoch_unevenly_is_refused(tmp_path):
    from zoo.hardware import SetupError

    with pytest.raises(SetupError, match="accumulate_grad_batches 3 does not divide the 20 training batches"):
        zoo.train(RECIPE, "lightning", tiny(tmp_path, "trainer.accumulate_grad_batches=3"))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_same_seed_same_weights(framework, tmp_path):
    runs = [
        zoo.train(RECIPE, framework, tiny(tmp_path, "trainer.deterministic=true", "trainer.seed=5"))
        for _ in range(2)
    ]
    a, b = (load_file(r.checkpoint) for r in runs)
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("architecture", TINY_PRESETS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_gradient_checkpointing_from_the_recipe(framework, architecture, tmp_path):
    """Recomputing changes memory, not training. In float64: 40 float32 steps amplify a
    kernel-order rounding difference chaotically (one ReLU input on the other side of its kink
    moves everything after it; on a busy CI machine Keras' resnet-micro once ended 1.0e-3
    apart), while float64 rounding is too small to move any. Measured: bit-identical in
    Lightning, <= 4e-19 of each tensor's scale in Keras."""
    # SGD: Adam divides by the gradient's own size, so a gradient that is zero in exact
    # arithmetic (attention's key bias) turns kernel-order rounding into full-rate steps.
    common = ["trainer.seed=1", "optimizer.name=sgd", "optimizer.momentum=0.9", "trainer.precision=64-true"]
    if registry.get_family(architecture).input_kind != "tokens":  # 6 float64 steps show it as 40 do
        common.append("data.train_per_class=16")  # (convnext-micro in Lightning: 40 s -> a few)
    plain = train_tiny(framework, architecture, tmp_path, *common)
    checkpointed = train_tiny(
        framework, architecture, tmp_path, *common, "trainer.gradient_checkpointing=true"
    )
    a, b = load_file(plain.checkpoint), load_file(checkpointed.checkpoint)
    # float32 exports of float64 weights: at most one float32 rounding apart (2**-24 of the tensor's
    # largest value); measured 4e-19 of it at most (attention's key bias, zero in exact arithmetic)
    gaps = {k: max_diff(a[k], b[k]) / max(float(np.abs(a[k]).max()), 1e-30) for k in a}
    assert max(gaps.values()) <= 2**-23, max(gaps.items(), key=lambda item: item[1])
