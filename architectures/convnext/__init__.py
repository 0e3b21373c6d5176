"""convnext family: torchvision's and timm's ConvNeXt (tiny/small/base), exactly, in both frameworks;
reads and writes torchvision and timm weights."""

from architectures.convnext.config import ConvNeXtConfig
from architectures.convnext.presets import ALIASES, PRESETS
from architectures.convnext.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="convnext",
    description="ConvNeXt (torchvision's and timm's): patchify stem, depthwise 7x7 blocks with "
    "LayerNorm, layer scale and stochastic depth, four stages.",
    config=ConvNeXtConfig,
    inputs=InputSpec("image"),
    tasks=("classification", "features"),
    weight_table=table,
    torch_model="architectures.convnext.torch_model:build",
    keras_model="architectures.convnext.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "torchvision",
            "a torchvision.models.convnext state dict (.pth or .safetensors): features.* and classifier.*",
            "architectures.convnext.formats:torchvision_to_zoo",
            "architectures.convnext.formats:zoo_to_torchvision",
            "architectures.convnext.formats:torchvision_preprocessing",
        ),
        ForeignFormat(
            "timm",
            "a timm ConvNeXt (convnext_tiny/small/base/large/xlarge and other shapes) state dict, with its "
            "config.json if any; without head.fc (num_classes=0) it is read as task features",
            "architectures.convnext.formats:timm_to_zoo",
            "architectures.convnext.formats:zoo_to_timm",
            "architectures.convnext.formats:timm_preprocessing",
        ),
    ),
)
