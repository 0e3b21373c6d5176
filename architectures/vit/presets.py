"""Named ViT configs: timm's ``vit_{tiny,small,base}_patch16_224``. Only the architecture is fixed
here; the image size, channels and classes come from the data (timm's counts at 3 x 224 x 224,
1000 classes)."""

from zoo.family import Preset

PRESETS = (
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
