"""torchvision's ConvNeXts by name (timm's ``convnext_{tiny,small,base}`` are the same networks),
and a micro one for quick runs. Presets fix only the architecture: the data decides the input
and the classes (ImageNet's 3 x 224 x 224 and 1000 by default, so the counts equal torchvision's).
Stochastic depth stays at 0, timm's default; torchvision trains tiny, small and base with
path_dropout 0.1, 0.4 and 0.5."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "convnext-micro",
        "Widths [16, 32, 64, 128], blocks [1, 1, 2, 1] and a 1x1 stem: the family's structure at a few "
        "hundred thousand parameters, for quick runs and tests on small images (the 8x8 digits go "
        "through the stages at 8, 4, 2 and 1 pixels a side; patch_size 4 gives torchvision's stem).",
        {"depths": [1, 1, 2, 1], "dims": [16, 32, 64, 128], "patch_size": 1},
    ),
    Preset(
        "convnext-tiny",
        "torchvision's convnext_tiny: blocks [3, 3, 9, 3] at widths [96, 192, 384, 768].",
        {"depths": [3, 3, 9, 3], "dims": [96, 192, 384, 768]},
    ),
    Preset(
        "convnext-small",
        "torchvision's convnext_small: blocks [3, 3, 27, 3] at widths [96, 192, 384, 768].",
        {"depths": [3, 3, 27, 3], "dims": [96, 192, 384, 768]},
    ),
    Preset(
        "convnext-base",
        "torchvision's convnext_base: blocks [3, 3, 27, 3] at widths [128, 256, 512, 1024].",
        {"depths": [3, 3, 27, 3], "dims": [128, 256, 512, 1024]},
    ),
)

# torchvision's and timm's names of these shapes (timm's ``convnext_tiny.fb_in1k`` resolves by its
# name before the tag); ``zoo.load`` builds them with fresh weights, nothing is downloaded.
ALIASES = {
    "convnext_tiny": "convnext-tiny",
    "convnext_small": "convnext-small",
    "convnext_base": "convnext-base",
}
