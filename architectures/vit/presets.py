"""Named ViT configs: timm's ``vit_{tiny,small,base}_patch16_224``, and a micro one for quick runs.
Only the architecture is fixed here; the image size, channels and classes come from the data
(timm's counts at the defaults, 3 x 224 x 224 and 1000 classes)."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "vit-micro",
        "8x8 patches, dim 64, 4 blocks, 4 heads: quick runs and tests. It takes the embedded 8x8 "
        "digits as one patch (plus the class token), 32x32 images as 16 patches.",
        {"patch_size": 8, "dim": 64, "depth": 4, "num_heads": 4},
    ),
    Preset(
        "vit-tiny",
        "timm's vit_tiny_patch16_224: 16x16 patches, dim 192, 12 blocks, 3 heads.",
        {"patch_size": 16, "dim": 192, "depth": 12, "num_heads": 3},
    ),
    Preset(
        "vit-small",
        "timm's vit_small_patch16_224: 16x16 patches, dim 384, 12 blocks, 6 heads.",
        {"patch_size": 16, "dim": 384, "depth": 12, "num_heads": 6},
    ),
    Preset(
        "vit-base",
        "timm's vit_base_patch16_224: 16x16 patches, dim 768, 12 blocks, 12 heads.",
        {"patch_size": 16, "dim": 768, "depth": 12, "num_heads": 12},
    ),
)

# timm's names (``zoo.load("vit_tiny_patch16_224")``; a pretrained tag such as ``.augreg_in21k`` is
# left out by the registry). Nothing is downloaded: the model comes with fresh weights.
ALIASES = {
    "vit_tiny_patch16_224": "vit-tiny",
    "vit_small_patch16_224": "vit-small",
    "vit_base_patch16_224": "vit-base",
}
