"""torchvision's ResNets by name. Presets fix only the architecture: the data decides the input
and the classes (ImageNet's 3 x 224 x 224 and 1000 by default, so the counts equal torchvision's)."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "resnet18",
        "torchvision's ResNet-18: basic blocks [2, 2, 2, 2].",
        {"block": "basic", "layers": [2, 2, 2, 2]},
    ),
    Preset(
        "resnet34",
        "torchvision's ResNet-34: basic blocks [3, 4, 6, 3].",
        {"block": "basic", "layers": [3, 4, 6, 3]},
    ),
    Preset(
        "resnet50",
        "torchvision's ResNet-50 (v1.5): bottleneck blocks [3, 4, 6, 3].",
        {"block": "bottleneck", "layers": [3, 4, 6, 3]},
    ),
    Preset(
        "resnet101",
        "torchvision's ResNet-101 (v1.5): bottleneck blocks [3, 4, 23, 3].",
        {"block": "bottleneck", "layers": [3, 4, 23, 3]},
    ),
    Preset(
        "resnet-micro",
        "A ResNet-10 at width 8 with the small stem (one basic block per stage): the family's "
        "structure at a few thousand parameters, for quick runs and tests on small images.",
        {"block": "basic", "layers": [1, 1, 1, 1], "width": 8, "stem": "small"},
    ),
)

# torchvision's and timm's names are zoo's (``resnet50``, and timm's ``resnet50.tv_in1k`` with its
# tag left out by the registry); these are timm's older names of torchvision's weights.
ALIASES = {
    "tv_resnet34": "resnet34",
    "tv_resnet50": "resnet50",
    "tv_resnet101": "resnet101",
}
