"""``zoo compare`` catches twins that compute something different: a broken weight copy by
name, a broken layer in every section (at float32 and at bf16), a broken optimizer by the
training section's re-synchronised steps alone, a wrong loss in either trainer."""

from __future__ import annotations

from compare_cases import MLM, RECIPE, RECIPES, STEPS, quick, smallest_preset


def break_keras_bias(monkeypatch, factor: float, layer: str = "head.fc") -> None:
    """Every Keras twin built from now on computes ``layer`` with its bias times ``factor``
    (its variables, and so the copy and the weights section, stay right)."""
    from keras import ops

    from zoo.checkpoint.tables import keras_layer
    from zoo.nn.keras import precision

    build = precision.build_keras

    def build_broken(*args, **kwargs):
        model = build(*args, **kwargs)
        dense = keras_layer(model, layer)

        def call(inputs, training=None):
            return ops.add(ops.matmul(inputs, dense.kernel), ops.multiply(dense.bias, factor))

        dense.call = call
        return model

    monkeypatch.setattr(precision, "build_keras", build_broken)


def test_a_layer_that_computes_something_else_differs_everywhere(tmp_path, monkeypatch):
    """A bias 1% off in one Keras layer: outputs, gradients, and training (from every
    re-synchronised step) differ, though the weights themselves were copied right."""
    from zoo.compare import compare

    break_keras_bias(monkeypatch, 1.01)
    result = compare(
        RECIPE, steps=STEPS, overrides=quick("convnet-tiny", tmp_path), speed_steps=0, write=False
    )

    assert result.verdicts == {
        "weights": "PASS",
        "forward": "DIFFERS",
        "gradients": "DIFFERS",
        "training": "DIFFERS",
    }
    forward = result.sections["forward"]
    assert "float64 twins already differ" in forward.reason
    training = result.sections["training"]
    assert "from torch's state at step 1 the twins differ" in training.reason, training.reason
    assert not any(p["passed"] for p in training.details["resync"])
    assert "DIFFERS" in result.text and "verdict: DIFFERS" in result.text


def test_an_optimizer_that_computes_something_else_differs_in_training_only(tmp_path, monkeypatch):
    """Keras' default Adam epsilon (1e-7 instead of torch's 1e-8): one pass agrees, so
    forward and gradients pass; the loss drifts, and one update from a re-synchronised
    state shows it is the optimizer, not rounding."""
    from zoo.compare import compare
    from zoo.keras import optimizers

    build = optimizers.build_optimizer

    def keras_epsilon(*args, **kwargs):
        optimizer = build(*args, **kwargs)
        optimizer.epsilon = 1e-7
        return optimizer

    monkeypatch.setattr(optimizers, "build_optimizer", keras_epsilon)
    result = compare(
        RECIPE, steps=STEPS, overrides=quick("convnet-tiny", tmp_path), speed_steps=0, write=False
    )

    assert result.verdicts == {
        "weights": "PASS",
        "forward": "PASS",
        "gradients": "PASS",
        "training": "DIFFERS",
    }
    training = result.sections["training"]
    assert "the twins differ" in training.reason and ": update " in training.reason, training.reason
    failed = [p for p in training.details["resync"] if not p["passed"]]
    assert failed and all(not all(g["passed"] for g in p["update"]) for p in failed)
    assert all(all(g["passed"] for g in p["gradients"]) for p in training.details["resync"])


def test_a_loss_gap_over_its_bound_is_resynchronised_and_called_amplified_rounding(tmp_path, monkeypatch):
    """With no allowance at all, the first step whose losses differ in the last bit is
    over the bound; re-synchronised there and along the run, the twins agree: PASS,
    with the reason."""
    from zoo.compare import compare, trajectory

    monkeypatch.setattr(trajectory, "_step_limit", lambda t, k, floors, i, tolerances: (t == k, 0.0))
    result = compare(
        RECIPE, steps=STEPS, overrides=quick("convnet-tiny", tmp_path), speed_steps=0, write=False
    )

    assert result.passed, result.text
    training = result.sections["training"]
    first = training.details["first_step_over_tolerance"]
    assert first is not None and training.details["amplified_rounding"]
    assert first in [p["step"] for p in training.details["resync"]]
    assert "amplified rounding (chaotic training), not a different computation" in training.reason


def test_a_perturbed_keras_weight_is_named(tmp_path, monkeypatch):
    """A Keras variable that does not hold what the table says: every section but the copy
    itself could miss which one; the weights section names it, the others see the effect."""
    from zoo.compare import compare, twins

    copy = twins.tensors_to_keras

    def broken_copy(model, table, tensors):
        copy(model, table, tensors)
        kernel = model.head.fc.kernel.numpy()
        kernel[:, 0] += 0.1  # one class's column: a shift of every logit alike would cancel in the softmax
        model.head.fc.kernel.assign(kernel)

    monkeypatch.setattr(twins, "tensors_to_keras", broken_copy)
    result = compare(RECIPE, steps=2, overrides=quick("convnet-tiny", tmp_path), speed_steps=0, write=False)

    assert not result.passed
    weights = result.sections["weights"]
    assert weights.verdict == "DIFFERS" and weights.details["worst_tensor"] == "head.fc.weight"
    assert weights.details["tensors_above_tolerance"] == ["head.fc.weight"]
    assert "head.fc.weight" in weights.reason
    assert result.verdicts["forward"] == "DIFFERS" and "head.fc.weight" in result.sections["forward"].reason
    assert result.verdicts["training"] == "DIFFERS"
    assert result.sections["training"].details["first_step_over_tolerance"] == 1
    assert result.out is None and "DIFFERS" in result.text


# ------------------------------------------------------------- broken training paths


def test_a_wrong_loss_in_the_lightning_task_differs_at_training(tmp_path, monkeypatch):
    """compare trains the torch twin with the LightningModule zoo trains with: label smoothing
    the recipe did not ask for, slipped into the task's cross-entropy, leaves the outputs alike,
    but the loss, every gradient and the training section differ from step 1 on."""
    import types

    import torch.nn.functional

    from zoo.compare import compare
    from zoo.lightning import task

    def smoothed(*args, **kwargs):
        return torch.nn.functional.cross_entropy(*args, **{**kwargs, "label_smoothing": 0.1})

    monkeypatch.setattr(task, "F", types.SimpleNamespace(cross_entropy=smoothed))
    result = compare(RECIPE, steps=4, overrides=quick("convnet-tiny", tmp_path), speed_steps=0, write=False)

    assert result.verdicts == {
        "weights": "PASS",
        "forward": "PASS",
        "gradients": "DIFFERS",
        "training": "DIFFERS",
    }, result.text
    training = result.sections["training"]
    assert training.details["first_step_over_tolerance"] == 1
    assert "from torch's state at step 1 the twins differ" in training.reason, training.reason
    assert not any(p["loss"][0]["passed"] for p in training.details["resync"])


def test_a_keras_token_loss_that_counts_ignored_labels_differs_at_training(tmp_path, monkeypatch):
    """compare trains the Keras twin as zoo's trainer compiles it, on the padded, masked
    batches the trainers feed: a token loss in zoo.keras.losses that forgets the ignore
    index (labels -100 outside the masked tokens, counted as class 0) differs from step 1 on."""
    from keras import ops

    from zoo.compare import compare
    from zoo.data import IGNORE_INDEX
    from zoo.keras import losses

    def every_label_counted(y_true):
        y_true = ops.cast(y_true, "int64")
        labels = ops.where(ops.not_equal(y_true, IGNORE_INDEX), y_true, ops.zeros_like(y_true))
        return labels, ops.ones_like(labels, dtype="float32")

    monkeypatch.setattr(losses, "counted", every_label_counted)
    recipe = RECIPES / "bert-micro-pydocs-mlm.yaml"
    overrides = [f"model.architecture={smallest_preset('bert')}", *MLM, f"export.dir={tmp_path}"]
    result = compare(recipe, steps=3, overrides=overrides, speed_steps=0, write=False)

    assert result.verdicts == {
        "weights": "PASS",
        "forward": "PASS",
        "gradients": "DIFFERS",
        "training": "DIFFERS",
    }, result.text
    training = result.sections["training"]
    assert training.details["first_step_over_tolerance"] == 1
    assert "from torch's state at step 1 the twins differ" in training.reason, training.reason


def test_bf16_still_catches_a_broken_layer(tmp_path, monkeypatch):
    """bf16 rounding is large, but a bias 10% off is larger than both frameworks' own."""
    from zoo.compare import compare

    break_keras_bias(monkeypatch, 1.1)
    overrides = quick("convnet-tiny", tmp_path, "trainer.precision=bf16-mixed")
    result = compare(RECIPE, steps=STEPS, overrides=overrides, speed_steps=0, write=False)
    assert result.verdicts["forward"] == "DIFFERS" and result.verdicts["training"] == "DIFFERS", result.text
    assert "float32 twins already differ" in result.sections["forward"].reason
