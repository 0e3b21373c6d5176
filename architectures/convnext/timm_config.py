"""timm's ``config.json`` for a ConvNeXt, read and written: the plain ConvNeXt variants timm
names, its ``model_args`` against zoo's config fields, and its ``pretrained_cfg``.

Reading (``timm_config_fields``): the ``config.json`` beside timm weights must describe the
same plain ConvNeXt the tensors show (``architectures.convnext.formats`` infers that one); its
``model_args`` that change the network without changing a tensor's shape (another kernel or
norm, another pooling) are refused by name, and it gives what no tensor shows (the dropout
rates, the layer-scale start, the image size it was trained at).

Writing (``timm_config``): what ``timm.create_model("local-dir:DIR", pretrained=True)`` reads,
its ``pretrained_cfg`` carrying the checkpoint's preprocessing where it records one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from architectures.convnext.config import ConvNeXtConfig
from zoo.checkpoint.foreign import ForeignLayoutError, timm_variant
from zoo.preprocessing import Preprocessing, timm_fields

# timm's factories with torchvision's architecture (no conv MLP, no GRN, head after the pool).
TIMM_VARIANTS = {
    "convnext_tiny": ([3, 3, 9, 3], [96, 192, 384, 768]),
    "convnext_small": ([3, 3, 27, 3], [96, 192, 384, 768]),
    "convnext_base": ([3, 3, 27, 3], [128, 256, 512, 1024]),
    "convnext_large": ([3, 3, 27, 3], [192, 384, 768, 1536]),
    "convnext_xlarge": ([3, 3, 27, 3], [256, 512, 1024, 2048]),
}
TIMM_FIELDS = {  # timm's model_args -> zoo's config fields
    "num_classes": "num_classes",
    "in_chans": "in_channels",
    "depths": "depths",
    "dims": "dims",
    "patch_size": "patch_size",
    "ls_init_value": "layer_scale",
    "drop_rate": "head_dropout",
    "drop_path_rate": "path_dropout",
}
# model_args that are harmless at these values (timm's defaults for this architecture) ...
TIMM_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "global_pool": ("avg",),
    "output_stride": (32,),
    "kernel_sizes": (7, [7, 7, 7, 7]),
    "stem_type": ("patch",),
    "head_norm_first": (False,),
    "head_hidden_size": (None,),
    "conv_mlp": (False,),
    "conv_bias": (True,),
    "use_grn": (False,),
    "act_layer": ("gelu",),
    "norm_layer": (None, "layernorm", "layernorm2d"),
    "norm_eps": (None, 1e-6),
}
TIMM_IGNORED = ("head_init_scale",)  # ... and those that change only the initialisation
ONLY_IN_CONFIG = ("ls_init_value", "drop_rate", "drop_path_rate")  # what no tensor shows


def timm_config_fields(meta: Mapping[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """Check a timm ``config.json`` against the inferred fields; return the fields only it gives
    (the dropout rates, the layer-scale start and the image size)."""
    reads = "zoo's convnext reads timm's plain ConvNeXts (torchvision's structure)"
    name = timm_variant(meta, TIMM_VARIANTS, reads)
    architecture = meta["architecture"]
    args = dict(meta.get("model_args") or {})
    refused = {
        key: value
        for key, value in args.items()
        if key not in TIMM_FIELDS and key not in TIMM_IGNORED and value not in TIMM_DEFAULTS.get(key, ())
    }
    if refused:
        raise ForeignLayoutError(
            f"config.json's model_args {refused} change timm's {name} in ways zoo's convnext does not model "
            "(a plain ConvNeXt: patch stem, 7x7 depthwise kernels, LayerNorm 1e-6, exact GELU, linear MLP, "
            "average pooling then the head's norm)"
        )
    depths, dims = TIMM_VARIANTS[name]
    said = {
        "depths": depths,
        "dims": dims,
        "patch_size": 4,
        "in_channels": 3,
        "num_classes": meta.get("num_classes"),
    }
    said.update({TIMM_FIELDS[key]: value for key, value in args.items() if key in TIMM_FIELDS})
    shown = {**fields, "num_classes": fields.get("num_classes", 0)}  # no classifier: timm's num_classes=0
    differ = [
        f"{field} {said[field]!r} (the tensors: {shown[field]!r})"
        for field in ("in_channels", "depths", "dims", "patch_size", "num_classes")
        if said[field] is not None
        and (list(said[field]) if isinstance(said[field], tuple) else said[field]) != shown[field]
    ]
    if differ:
        raise ForeignLayoutError(f"config.json describes timm's {architecture} with " + "; ".join(differ))
    extra: dict[str, Any] = {
        TIMM_FIELDS[k]: float(args[k]) for k in ONLY_IN_CONFIG if args.get(k) is not None
    }
    input_size = (meta.get("pretrained_cfg") or {}).get("input_size")
    if input_size and len(input_size) == 3 and input_size[1] == input_size[2]:
        extra["image_size"] = int(input_size[1])  # the size it was trained at (the data may say another)
    return extra


def timm_config(config: ConvNeXtConfig, preprocessing: Preprocessing | None = None) -> dict[str, Any]:
    """The ``config.json`` timm builds ``config``'s model from: a named variant where the shape is
    one (else ``convnext_tiny`` with the depths and widths as ``model_args``), the settings that
    differ from timm's defaults, and the checkpoint's ``preprocessing`` in ``pretrained_cfg``."""
    named = [
        n for n, (depths, dims) in TIMM_VARIANTS.items() if (depths, dims) == (config.depths, config.dims)
    ]
    architecture = named[0] if named else "convnext_tiny"
    classes = config.num_classes if config.task == "classification" else 0
    model_args: dict[str, Any] = {}
    if not named:
        model_args.update(depths=list(config.depths), dims=list(config.dims))
    model_args.update(num_classes=classes, in_chans=config.in_channels)
    for key, field, default in (
        ("patch_size", "patch_size", 4),
        ("ls_init_value", "layer_scale", 1e-6),
        ("drop_rate", "head_dropout", 0.0),
        ("drop_path_rate", "path_dropout", 0.0),
    ):
        if getattr(config, field) != default:
            model_args[key] = getattr(config, field)
    model_args["global_pool"] = "avg"
    side = config.feature_size()
    pretrained, top = timm_fields(preprocessing)
    return {
        **top,
        "architecture": architecture,
        "num_classes": classes,
        "num_features": config.num_features,
        "global_pool": "avg",
        "model_args": model_args,
        "pretrained_cfg": {
            "custom_load": False,
            "input_size": [config.in_channels, config.image_size, config.image_size],
            "fixed_input_size": False,
            "num_classes": classes,
            "pool_size": [side, side],
            "first_conv": "stem.0",
            "classifier": "head.fc",
            **pretrained,
        },
    }
