"""The chain users run with published weights: ``zoo import`` a torchvision file, ``zoo finetune``
it with the backbone frozen in either framework, ``zoo export`` it back to torchvision's layout.

Everything but the new head leaves the chain bit for bit as torchvision wrote it, BatchNorm
statistics and batch counters included (a frozen BatchNorm stays in inference mode in both
frameworks); the head has the new class count.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import reference_env
from conftest import FRAMEWORKS

import zoo
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint

RECIPE = Path(__file__).parent.parent / "recipes" / "resnet18-digits32-5to9-few.yaml"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_import_finetune_export_keeps_the_frozen_backbone_bit_for_bit(framework, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))  # the embedded digits folder
    published = reference_env.fixtures("torchvision_resnet.py") / "resnet18.pth"  # torchvision's save
    original, _ = read_foreign(published)
    imported = import_checkpoint(published, tmp_path / "in")
    overrides = [
        f"init.from={imported.path}", "init.freeze_backbone=true", "init.head_lr=0.01",
        "trainer.max_epochs=1", "data.train_per_class=2", "data.batch_size=10",
        "trainer.progress_bar=false", f"export.dir={tmp_path / 'runs'}",
    ]  # fmt: skip
    tuned = zoo.train(RECIPE, framework, overrides)
    exported, _ = read_foreign(export_checkpoint(tuned.checkpoint, "torchvision", tmp_path / "out.pth"))
    assert exported.keys() == original.keys()
    for name, value in original.items():
        if name.startswith("fc."):
            continue
        assert np.array_equal(exported[name], value), f"{name} moved in the frozen backbone"
    assert exported["fc.weight"].shape == (5, 512) and original["fc.weight"].shape[0] != 5  # a new head
