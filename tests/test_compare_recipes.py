"""``zoo compare`` on every shipped recipe: the default over 100 steps (long enough for
training to amplify rounding), the others over 30 on their family's smallest preset; the
report files hold what the table says. Apart from test_compare.py so that the two files run
side by side under pytest-xdist (each file stays in one worker)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from compare_cases import (
    OTHER_STEPS,
    PNG_SIGNATURE,
    RECIPE,
    SECTIONS,
    SHIPPED,
    SPEED_STEPS,
    STEPS,
    as_tested,
)


def check_report(out: Path, result, steps: int) -> dict:
    """The report files hold what the table says: verdicts, both losses, the bounds with
    both frameworks' own rounding, the re-synchronised steps."""
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == ("PASS" if result.passed else "DIFFERS")
    training = report["sections"]["training"]
    assert len(training["loss"]["torch"]) == len(training["loss"]["keras"]) == len(training["limit"]) == steps
    assert np.all(np.isfinite(training["loss"]["torch"]))
    assert [p["step"] for p in training["resync"]][:1] == [1] and training["resync"][-1]["step"] == steps
    for point in training["resync"]:
        assert {"forward", "loss", "gradients", "update"} <= set(point)
    if report["reference_precision"]:
        floor = training["noise_floor"]
        assert len(floor["torch_gap"]) == len(floor["keras_gap"]) == steps
        gradients = report["sections"]["gradients"]["tensors"]
        assert all(g["torch_rounding"] > 0 or g["keras_rounding"] > 0 for g in gradients[:1])
    assert (out / "report.png").read_bytes()[:8] == PNG_SIGNATURE
    markdown = (out / "report.md").read_text()
    assert f"**Verdict: {report['verdict']}**" in markdown and "report.png" in markdown
    assert "Re-synchronised steps" in markdown
    assert "RE-SYNC AT STEP" in result.text and str(out / "report.md") in result.text
    return report


def shipped_cases() -> list:
    """Every shipped recipe; those that run as shipped besides the default are slow (about a
    minute each: resnet-8 with BatchNorm, rnn-small)."""
    return [
        pytest.param(r, id=r.stem, marks=[pytest.mark.slow] if r != RECIPE and not as_tested(r) else [])
        for r in SHIPPED
    ]


@pytest.mark.parametrize("recipe", shipped_cases())
def test_shipped_recipe_passes(recipe, tmp_path):
    from zoo.compare import compare

    out = tmp_path / "report"
    speed_steps = SPEED_STEPS if recipe == RECIPE else 0
    overrides = [*as_tested(recipe), f"export.dir={tmp_path}"]
    steps = STEPS if recipe == RECIPE else OTHER_STEPS
    result = compare(recipe, steps=steps, out=out, overrides=overrides, speed_steps=speed_steps)

    assert result.verdicts == dict.fromkeys(SECTIONS, "PASS"), result.text
    report = check_report(out, result, steps)
    if speed_steps:
        for side in ("torch", "keras"):
            speed = report["speed"][side]
            assert speed["ms_per_step"] > 0 and speed["samples_per_s"] > 0 and speed["activation_bytes"] > 0
        assert report["speed"]["torch"]["parameters"] == report["speed"]["keras"]["parameters"] > 0
