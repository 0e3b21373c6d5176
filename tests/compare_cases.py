"""What the ``zoo compare`` tests share: the recipes, step counts and quick overrides."""

from __future__ import annotations

from pathlib import Path

from zoo import registry

RECIPES = Path(__file__).parent.parent / "recipes"
RECIPE = RECIPES / "cnn-digits.yaml"
SHIPPED = sorted(RECIPES.glob("*.yaml"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STEPS = 100  # the default recipe: cnn-digits with oneDNN leaves torch's float path near step 46
OTHER_STEPS = 30  # every other recipe and family: re-synchronised at steps 1, 8, 15, 22 and 30
SPEED_STEPS = 2
TEXT = ["data.seq_len=32", "data.batch_size=16"]
IMAGES = ["data.batch_size=16"]  # an image folder's 32x32 pictures: a quarter of the shipped 64
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


AS_SHIPPED_UP_TO = 80_000  # parameters: convnet-small, resnet-8 and rnn-small run as shipped


def as_tested(recipe: Path) -> list[str]:
    """Small shipped models as shipped (cnn-digits, the default, among them); larger ones
    on their family's smallest preset with shorter text sequences and smaller image batches, so
    the whole set runs in minutes."""
    from zoo.recipe import load_recipe

    loaded = load_recipe(recipe)
    name = loaded.model.preset or loaded.model.architecture
    entry = next(e for e in registry.list_architectures() if e.name == name)
    if entry.parameters <= AS_SHIPPED_UP_TO:
        return []
    extra = {"text": TEXT, "image_folder": IMAGES}.get(loaded.data.name, [])
    return [f"model.architecture={smallest_preset(entry.family)}", *extra]
