"""``zoo compare``: every family and task passes, precisions apply to both twins, the
report goes where it should. The shipped recipes are in test_compare_recipes.py, twins that
compute something different are caught in test_compare_catches.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from compare_cases import (
    OTHER_STEPS,
    RECIPE,
    SECTIONS,
    SHIPPED,
    STEPS,
    TEXT,
    as_tested,
    quick,
    smallest_preset,
)

from zoo import registry

CASES = [
    pytest.param(family, task, id=f"{family}-{task}")
    for family, spec in registry.families().items()
    for task in spec.tasks
]


@pytest.mark.parametrize(("family", "task"), CASES)
def test_each_family_and_task_passes(family, task, tmp_path):
    """Every family and task, on its smallest preset; those a shipped recipe already runs
    in the fast cases of test_compare_recipes.py are not run twice."""
    from zoo.compare import compare
    from zoo.recipe import data_task, load_recipe

    if task == "features":
        pytest.skip("a backbone with no head: nothing to train alone (its other tasks train it)")
    language = task == "language_modeling"
    covered = [
        r.stem
        for r in SHIPPED
        if registry.resolve_config(load_recipe(r).model.architecture).architecture == family
        and data_task(load_recipe(r).data) == task
        and (r == RECIPE or as_tested(r))  # a fast case
    ]
    if covered:
        pytest.skip(f"run by test_shipped_recipe_passes[{covered[0]}]")
    if registry.get_family(family).input_kind == "tokens":
        pytest.skip(f"no shipped data source gives {task} labels yet")
    extra = ["data.name=text", *TEXT] if language else []
    result = compare(
        RECIPE,
        steps=OTHER_STEPS,
        overrides=quick(smallest_preset(family), tmp_path, *extra),
        speed_steps=0,
        write=False,
    )
    assert result.verdicts == dict.fromkeys(SECTIONS, "PASS"), result.text
    assert result.report["model"]["family"] == family and result.report["model"]["task"] == task


def test_clipping_and_decay_groups_train_as_zoo_trains_them(tmp_path):
    """Gradient clipping (Lightning's Trainer clips, zoo's Keras optimizer clips inside its
    step) and the parameter groups of biases exempt from weight decay come from the trainers'
    own wiring, in training and in the update of every re-synchronised step. SGD, so a side
    that did not clip would move ~100x further."""
    from zoo.compare import compare

    sgd = ["optimizer.name=sgd", "optimizer.lr=0.5", "optimizer.momentum=0.9", "optimizer.weight_decay=0.01"]
    exempt = ["optimizer.decay_biases_and_norms=false", "trainer.gradient_clip_norm=0.01"]
    overrides = quick("convnet-tiny", tmp_path, *sgd, *exempt)
    result = compare(RECIPE, steps=5, overrides=overrides, speed_steps=0, write=False)
    assert result.passed, result.text
    assert all(p["update"] for p in result.sections["training"].details["resync"][1:])


# ----------------------------------------------------------------------- precisions


@pytest.mark.parametrize("precision", ["64-true", "bf16-mixed"])
def test_precisions_apply_to_both_twins(precision, tmp_path):
    """float64 is compared at float64 resolution with nothing above it; bf16 is bounded by
    each framework's own distance from its own float32 run."""
    from zoo.compare import compare

    overrides = quick("convnet-tiny", tmp_path, f"trainer.precision={precision}")
    result = compare(RECIPE, steps=STEPS, overrides=overrides, speed_steps=0, write=False)
    assert result.passed, result.text
    forward = result.sections["forward"]
    if precision == "64-true":
        assert forward.value < 1e-12 and forward.details["reference"] is None
        assert result.sections["training"].details["noise_floor"] is None
    else:
        assert forward.details["reference"] == "float32"
        own = result.sections["gradients"].details["own_rounding"]
        assert own["torch"] > 1e-4 and own["keras"] > 1e-4  # bf16 rounding, measured in both frameworks
        assert 0 < forward.value <= forward.tolerance


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


def test_float16_is_refused_before_anything_runs():
    """compare runs both twins on the CPU, where float16 has no fast kernels."""
    from zoo.compare import compare
    from zoo.hardware import SetupError

    with pytest.raises(SetupError, match=r"trainer\.precision '16-mixed' needs a GPU .* use 'bf16-mixed'"):
        compare(RECIPE, steps=1, overrides=["trainer.precision=16-mixed"], write=False)


def test_each_check_holds_arrays_in_its_pairs_own_precision(monkeypatch):
    """A check keeps gradients and update moves in the twins' own precision (float64 only for
    the float64 reference pair): float64 copies of a float32 GPT-2's arrays at every check took
    a full-size comparison past this machine's 24 GB."""
    from zoo.compare import compare
    from zoo.compare.resync import Checker

    seen: dict[str, set[str]] = {"pair": set(), "reference": set()}
    judge = Checker._judge

    def spy(self, step, sides, reference):
        for name, found in (("pair", sides), ("reference", reference)):
            for side in ("torch", "keras"):
                for kind in ("gradients", "moved"):
                    seen[name] |= {str(a.dtype) for a in found[side].get(kind, {}).values()}
        return judge(self, step, sides, reference)

    monkeypatch.setattr(Checker, "_judge", spy)
    result = compare(RECIPE, steps=2, speed_steps=0, write=False)
    assert result.passed, result.text
    assert seen == {"pair": {"float32"}, "reference": {"float64"}}
