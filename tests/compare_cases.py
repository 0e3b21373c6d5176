"""What the ``zoo compare`` tests share: the recipes, step counts and quick overrides."""

from __future__ import annotations

from pathlib import Path

from zoo import registry

RECIPES = Path(__file__).parent.parent / "recipes"
RECIPE = RECIPES / "cnn-digits.yaml"
SHIPPED = sorted(RECIPES.glob("*.yaml"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = 100  # cnn-digits with oneDNN leaves torch's float path near step 46
SPEED_STEPS = 2
TEXT = ["data.seq_len=32", "data.batch_size=16"]
MLM = ["data.seq_len=16", "data.batch_size=8"]  # a few masked tokens per row, the rest labelled -100
SECTIONS = ["weights", "forward", "gradients", "training"]


def smallest_preset(family: str) -> str:
    """The family's cheapest preset (by parameters), or the family itself if it has none."""
    entries = [e for e in registry.list_architectures() if e.family == family and e.kind == "preset"]
    return min(entries, key=lambda e: e.parameters).name if entries else family


def quick(architecture: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        f"model.architecture={architecture}", "data.batch_size=16", "trainer.max_epochs=1",
        f"export.dir={tmp_path}", *extra,
    ]  # fmt: skip
