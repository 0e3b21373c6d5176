"""Mixed precision means one thing in both twins (docs/precision.md).

Measured on every shipped recipe by ``bench/mixed_precision.py``: from the same weights
and batch, each twin's bf16-mixed gradients against its own float32 gradients, and the
two twins' bf16 gradients against each other. If the twins round the same operations the
Keras twin is about as far from its float32 as torch is, and the twins are no further
from each other than that. Keras' own global mixed policy failed this by 10-150x on the
language models (a bf16 bias gradient summed in bf16).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("mixed_precision", ROOT / "bench" / "mixed_precision.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Measured, cause not yet named (issue 14): on ResNet-18 over digit images (flat backgrounds),
# the twins' float32 gradients differ by 4.4e-3 (0to4, worst bn1.weight; torch's own float32
# error there is 6.9e-6, and with TF_ENABLE_ONEDNN_OPTS=0 the gap is 6.3e-6) and by 8.8e-5
# (5to9-few, 25 images; 5.9e-4 with oneDNN off). Strict: the mark goes when the gap does.
UNEXPLAINED = {"resnet18-digits32-0to4", "resnet18-digits32-5to9-few"}
CASES = [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="float32 gap, resnet18 on digits"))
    if r.stem in UNEXPLAINED
    else r
    for r in RECIPES
]


@pytest.mark.parametrize("recipe", CASES, ids=lambda p: p.stem)
def test_both_twins_round_the_same_operations_under_bf16_mixed(bench, recipe):
    rows = list(bench.measure(recipe, "bf16-mixed", batch=32).values())
    float32_twins, torch_own, keras_own, twins = (row[0] for row in rows)
    assert float32_twins < 1e-5  # float32 rounding in another order (BatchNorm amplifies it)
    assert keras_own <= 1.5 * torch_own, rows
    assert twins <= 1.5 * max(torch_own, keras_own), rows
