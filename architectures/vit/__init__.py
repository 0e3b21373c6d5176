"""ViT family: timm's Vision Transformer (``vit_*_patch16_224``), exactly, in both frameworks."""

from architectures.vit.config import ViTConfig
from architectures.vit.presets import ALIASES, PRESETS
from architectures.vit.weights import table
from zoo.checkpoint.foreign import ForeignFormat
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="vit",
    description="Vision Transformer (timm's vit_*_patch16_224): patch embedding, class token, learned "
    "positions, pre-norm blocks; imports and exports timm weights.",
    config=ViTConfig,
    inputs=InputSpec("image"),
    tasks=("classification",),
    weight_table=table,
    torch_model="architectures.vit.torch_model:build",
    keras_model="architectures.vit.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
    aliases=ALIASES,
    formats=(
        ForeignFormat(
            "timm",
            "timm's VisionTransformer state dict (vit_*_patch16_224 and its variants of other sizes), "
            "with timm's config.json",
            to_zoo="architectures.vit.formats:from_timm",
            from_zoo="architectures.vit.formats:to_timm",
            preprocessing="architectures.vit.formats:timm_preprocessing",
        ),
    ),
    adapt_tensors="architectures.vit.resize:adapt_tensors",
)
