"""resnet family: torchvision's ResNet (18/34/50/101), exactly, in both frameworks; reads and
writes torchvision and timm weights."""

from architectures.resnet.config import ResNetConfig
from architectures.resnet.presets import ALIASES, PRESETS
from architectures.resnet.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="resnet",
    description="torchvision's ResNet (basic or bottleneck blocks, ImageNet or 32x32 stem).",
    config=ResNetConfig,
    inputs=InputSpec("image"),
    tasks=("classification",),
    weight_table=table,
    torch_model="architectures.resnet.torch_model:build",
    keras_model="architectures.resnet.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "torchvision",
            "a torchvision.models.resnet state dict (.pth or .safetensors): the same names as zoo's",
            "architectures.resnet.formats:torchvision_to_zoo",
            "architectures.resnet.formats:zoo_to_torchvision",
            "architectures.resnet.formats:torchvision_preprocessing",
        ),
        ForeignFormat(
            "timm",
            "a timm ResNet (resnet18/26/34/50/101/152/200) state dict, with its config.json if any",
            "architectures.resnet.formats:timm_to_zoo",
            "architectures.resnet.formats:zoo_to_timm",
            "architectures.resnet.formats:timm_preprocessing",
        ),
    ),
)
