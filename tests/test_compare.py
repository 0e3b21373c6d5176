"""``zoo compare``: every registered family's twins pass parity from the same init, the
report files are written and readable, and a broken weight mapping is caught by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zoo import registry

RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = 5
SPEED_STEPS = 2
TEXT = ["data.name=text", "data.seq_len=32"]


def smallest_preset(family: str) -> str:
    """The family's cheapest preset (by parameters), or the family itself if it has none."""
    entries = [e for e in registry.list_architectures() if e.family == family and e.kind == "preset"]
    return min(entries, key=lambda e: e.parameters).name if entries else family


def quick(architecture: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        f"model.architecture={architecture}", "data.batch_size=16", "trainer.max_epochs=1",
        f"export.dir={tmp_path}", *extra,
    ]  # fmt: skip


CASES = [
    pytest.param(family, task, id=f"{family}-{task}")
    for family, spec in registry.families().items()
    for task in spec.tasks
]


@pytest.mark.parametrize(("family", "task"), CASES)
def test_each_family_passes_and_writes_the_report(family, task, tmp_path):
    from zoo.compare import compare

    language = task == "language_modeling"
    extra = TEXT if language else []
    out = tmp_path / "report"
    speed_steps = 0 if language else SPEED_STEPS  # timing is the same code for both tasks: once per family
    overrides = quick(smallest_preset(family), tmp_path, *extra)
    result = compare(RECIPE, steps=STEPS, out=out, overrides=overrides, speed_steps=speed_steps)

    assert result.verdicts == dict.fromkeys(["weights", "forward", "gradients", "training"], "PASS"), (
        result.text
    )
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "PASS" and report["model"]["family"] == family
    assert report["model"]["task"] == task
    training = report["sections"]["training"]
    assert len(training["loss"]["torch"]) == len(training["loss"]["keras"]) == STEPS
    assert np.all(np.isfinite(training["loss"]["torch"]))
    if speed_steps:
        for side in ("torch", "keras"):
            speed = report["speed"][side]
            assert speed["ms_per_step"] > 0 and speed["samples_per_s"] > 0 and speed["activation_bytes"] > 0
        assert report["speed"]["torch"]["parameters"] == report["speed"]["keras"]["parameters"] > 0
    assert (out / "report.png").read_bytes()[:8] == PNG_SIGNATURE
    markdown = (out / "report.md").read_text()
    assert "**Verdict: PASS**" in markdown and "report.png" in markdown
    assert "PASS" in result.text and str(out / "report.md") in result.text


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


@pytest.mark.parametrize("precision", ["64-true", "bf16-mixed"])
def test_precisions_apply_to_both_twins(precision, tmp_path):
    """float64 is compared at float64 resolution; bf16 is held to its tolerance or, if
    larger, twice how far torch's own bf16 run is from float32."""
    from zoo.compare import compare

    overrides = quick("convnet-tiny", tmp_path, f"trainer.precision={precision}")
    result = compare(RECIPE, steps=3, overrides=overrides, speed_steps=0, write=False)
    assert result.passed, result.text
    forward = result.sections["forward"]
    if precision == "64-true":
        assert forward.value < 1e-12
    else:
        assert 0 < forward.value <= forward.tolerance and forward.details["noise_floor"] > 0
        assert result.sections["gradients"].tolerance >= 0.1


def test_dropout_is_zeroed_for_parity_and_the_report_goes_under_export_dir(tmp_path):
    from zoo.compare import compare

    result = compare(
        RECIPE, steps=2, overrides=quick("convnet-tiny", tmp_path, "model.dropout=0.5"), speed_steps=0
    )
    assert result.passed, result.text
    assert result.report["model"]["dropout_zeroed_for_parity"] == {"dropout": 0.5}
    assert "dropout 0.5 -> 0" in result.text
    assert result.out.parent == tmp_path and result.out.name.startswith("compare-cnn-digits-")
    assert json.loads((result.out / "report.json").read_text())["run"]["steps"] == 2


def test_importing_compare_imports_no_framework():
    code = "import sys, zoo.compare\nprint([m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
