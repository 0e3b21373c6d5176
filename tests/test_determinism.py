"""``trainer.deterministic: true`` makes two identical runs bit-identical in both frameworks, for the
families whose kernels are the likeliest to reorder sums (attention, recurrent cells), not only
the CNN (tests/test_knobs.py): the same weights bit for bit, the same metrics.csv rows (issue 16)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from conftest import FRAMEWORKS
from safetensors.numpy import load_file

import zoo

RECIPES = Path(__file__).parent.parent / "recipes"
CORPUS = " ".join(f"def step_{i}(batch):\n    return model(batch) * {i % 7}\n" for i in range(120))
CASES = {
    # dropout on: the per-batch seeds must replay too, not only the arithmetic
    "transformer": ("transformer-charlm.yaml", ["model.architecture=transformer-tiny", "model.dropout=0.2"]),
    "lstm": ("lstm-charlm.yaml", ["model.architecture=lstm-tiny"]),
}


def train(tmp_path: Path, framework: str, case: str, name: str):
    recipe, model = CASES[case]
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS)
    overrides = [
        *model, f"data.path={text}", "data.seq_len=32", "data.batch_size=16", "trainer.max_epochs=2",
        "schedule.warmup_steps=3", "trainer.deterministic=true", "trainer.seed=3",
        "trainer.progress_bar=false", f"export.dir={tmp_path}", f"export.run_name={name}",
    ]  # fmt: skip
    return zoo.train(RECIPES / recipe, framework, overrides)


def rows_without_seconds(result) -> list[dict[str, str]]:
    with open(Path(result.checkpoint).parent / "metrics.csv", newline="") as handle:
        return [{k: v for k, v in r.items() if k != "epoch_seconds"} for r in csv.DictReader(handle)]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_deterministic_runs_are_bit_identical(framework, case, tmp_path):
    first, second = (train(tmp_path, framework, case, name) for name in ("first", "second"))
    a, b = load_file(first.checkpoint), load_file(second.checkpoint)
    assert a.keys() == b.keys()
    differing = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differing, f"{framework} {case}: tensors differ between identical runs: {differing[:5]}"
    assert rows_without_seconds(first) == rows_without_seconds(second)
    losses = [float(r["train_loss"]) for r in rows_without_seconds(first)]
    assert len(losses) == 2 and all(np.isfinite(losses)), "nothing was trained"
