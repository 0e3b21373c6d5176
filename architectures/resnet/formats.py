"""torchvision's and timm's ResNet weights, in and out of the resnet family.

Both libraries name a ResNet's tensors exactly as zoo's torch twin does (``conv1``,
``layer2.0.downsample.0``, ``fc``), so reading one is a check, not a rename: the config is
inferred from the tensors (the stem from ``conv1``'s kernel, in_channels and width from its
shape, the block from ``conv3``'s presence, the blocks per stage from the keys, the classes
from ``fc``), then every name and shape is compared with the weight table of that config, and
whatever does not fit is refused by name. Old checkpoints are read as torch's own loader reads
them: where BatchNorm's ``num_batches_tracked`` is absent (torchvision's published ImageNet
weights predate it) the counters start at 0, and a counter saved with shape (1,) is the scalar.

timm keeps a ``config.json`` beside its weights; where one comes with them, its
``architecture`` and ``model_args`` must describe the same plain ResNet, since arguments such
as ``output_stride`` change the network without changing a single tensor. Its
``pretrained_cfg`` says how images were prepared (input size, crop, interpolation, mean, std)
and its ``label_names`` what each class is: the import records both
(zoo.preprocessing.read_timm_config). A torchvision state dict says neither; the import records the
eval transform of torchvision's own ImageNet weights (:data:`TORCHVISION_EVAL`).

Writing is the reverse, for configs the libraries can build: the ImageNet stem, width 64,
BatchNorm epsilon 1e-5 (and 3 input channels for torchvision, whose ``conv1`` fixes them).
For timm the ``config.json`` is what ``timm.create_model("local-dir:DIR", pretrained=True)``
reads (its ``pretrained_cfg`` carrying the checkpoint's preprocessing, where it records one), or
equally ``timm.create_model(cfg["architecture"], pretrained=True,
pretrained_cfg_overlay=dict(cfg["pretrained_cfg"], file=".../model.safetensors"),
**cfg["model_args"])``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import ValidationError

from architectures.resnet.config import STAGES, ResNetConfig
from architectures.resnet.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, check_shapes, renamed, timm_variant
from zoo.checkpoint.tables import tensor_specs
from zoo.preprocessing import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImagePreprocessing,
    Preprocessing,
    read_timm_config,
    timm_fields,
)

# timm's ResNets with torchvision's architecture (plain 7x7 stem, 1x1 conv shortcuts): (block, layers).
TIMM_PLAIN = {
    "resnet18": ("basic", [2, 2, 2, 2]),
    "resnet34": ("basic", [3, 4, 6, 3]),
    "resnet26": ("bottleneck", [2, 2, 2, 2]),
    "resnet50": ("bottleneck", [3, 4, 6, 3]),
    "resnet101": ("bottleneck", [3, 4, 23, 3]),
    "resnet152": ("bottleneck", [3, 8, 36, 3]),
    "resnet200": ("bottleneck", [3, 24, 36, 3]),
}
# model_args of a timm config.json that describe nothing beyond the tensors and zoo's config.
TIMM_ARGS = frozenset({"num_classes", "in_chans", "layers", "drop_rate", "global_pool", "zero_init_last"})
STEM_KERNELS = {7: "imagenet", 3: "small"}
# The eval transform of torchvision's ImageNet ResNet weights (``ResNet*_Weights.IMAGENET1K_V1
# .transforms()``: ImageClassification(crop_size=224, resize_size=256), bilinear, ImageNet's mean
# and std; tests/test_image_folder.py checks it against torchvision's own). The V2 weights
# resize to 232 instead: no state dict says which, so set data.resize when fine-tuning those.
TORCHVISION_EVAL = ImagePreprocessing(
    size=224, resize=256, interpolation="bilinear", channels="rgb", mean=IMAGENET_MEAN, std=IMAGENET_STD
)
BLOCK_KEY = re.compile(r"layer([1-9]\d*)\.(\d+)\.")


# ------------------------------------------------------------------------------------ reading


def torchvision_to_zoo(tensors: Tensors, meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
    """A torchvision ``ResNet`` state dict -> (config fields, canonical tensors).

    torchvision writes no ``config.json``: weights that come with one are another library's
    (timm's), whose config says more than the tensors do, so they are left to that format."""
    if meta:
        raise ForeignLayoutError(
            f"these weights come with a config.json (architecture {meta.get('architecture')!r}); torchvision "
            "writes none: read them as the format that wrote it (timm)"
        )
    return _placed(tensors, infer_fields(tensors, "torchvision"), "torchvision")


def timm_to_zoo(tensors: Tensors, meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
    """A timm ``ResNet`` state dict (and its ``config.json``, if any) -> (config fields, tensors)."""
    fields = infer_fields(tensors, "timm")
    if meta:
        fields.update(_check_timm_config(meta, fields))
    return _placed(tensors, fields, "timm")


def torchvision_preprocessing(config: ResNetConfig, meta: Mapping[str, Any]) -> Preprocessing | None:
    """What a torchvision state dict's images went through: torchvision's ImageNet eval
    transform, for the 3-channel nets its weights are."""
    if config.in_channels != 3:
        return None
    return Preprocessing(source="torchvision's ImageNet weights' eval transform", image=TORCHVISION_EVAL)


def timm_preprocessing(config: ResNetConfig, meta: Mapping[str, Any]) -> Preprocessing | None:
    """What timm's config.json says: its pretrained_cfg and label_names (none without one)."""
    size = (config.in_channels, config.image_size, config.image_size)
    return read_timm_config(meta, config.num_classes, size)


def infer_fields(tensors: Mapping[str, np.ndarray], source: str) -> dict[str, Any]:
    """The architecture fields the tensors imply; what they cannot imply is refused by name."""
    conv1 = tensors.get("conv1.weight")
    if conv1 is None or np.ndim(conv1) != 4 or conv1.shape[2] != conv1.shape[3]:
        found = "no 'conv1.weight'" if conv1 is None else f"'conv1.weight' of shape {tuple(np.shape(conv1))}"
        raise ForeignLayoutError(
            f"not a {source} ResNet: {found} (a ResNet's stem is one square convolution "
            f"'conv1.weight' (width, in_channels, k, k)); its first keys are {_first(tensors)}",
            unplaced=_unplaced_first(tensors, {"conv1.weight"}),
            missing=[] if conv1 is not None else ["conv1.weight"],
        )
    kernel = int(conv1.shape[2])
    if kernel not in STEM_KERNELS:
        raise ForeignLayoutError(
            f"'conv1.weight' has a {kernel}x{kernel} kernel: a {source} ResNet stem is 7x7 (ImageNet) "
            "or, in zoo's 32x32 variant, 3x3",
            unplaced=["conv1.weight"],
        )
    blocks: dict[int, set[int]] = {}
    for key in tensors:
        match = BLOCK_KEY.match(key)
        if match:
            blocks.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    extra = sorted(stage for stage in blocks if stage > STAGES)
    if extra:
        keys = [k for k in tensors if (m := BLOCK_KEY.match(k)) and int(m.group(1)) in extra]
        raise ForeignLayoutError(
            f"the weights have stages {', '.join(f'layer{s}' for s in extra)}: "
            f"a ResNet has layer1..layer{STAGES}",
            unplaced=keys,
        )
    absent = [f"layer{stage}" for stage in range(1, STAGES + 1) if stage not in blocks]
    if absent:
        raise ForeignLayoutError(
            f"not a {source} ResNet: no blocks in {', '.join(absent)}; its first keys are {_first(tensors)}",
            unplaced=_unplaced_first(tensors, set()),
            missing=[f"{stage}.0.conv1.weight" for stage in absent],
        )
    fc = tensors.get("fc.weight")
    if fc is None or np.ndim(fc) != 2:
        found = "no 'fc.weight'" if fc is None else f"'fc.weight' of shape {tuple(np.shape(fc))}"
        raise ForeignLayoutError(
            f"{found}: zoo's resnet needs the classifier (num_classes, features) (a timm model created "
            "with num_classes=0 has none)",
            missing=["fc.weight", "fc.bias"] if fc is None else [],
            unplaced=[] if fc is None else ["fc.weight"],
        )
    return {
        "in_channels": int(conv1.shape[1]),
        "num_classes": int(fc.shape[0]),
        "width": int(conv1.shape[0]),
        "stem": STEM_KERNELS[kernel],
        "block": "bottleneck" if "layer1.0.conv3.weight" in tensors else "basic",
        # The highest block index + 1: a gap among the indices shows up as missing keys below.
        "layers": [max(blocks[stage]) + 1 for stage in range(1, STAGES + 1)],
    }


def _check_timm_config(meta: Mapping[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """Check a timm ``config.json`` against the inferred fields; return the fields it adds (dropout)."""
    name = timm_variant(
        meta, TIMM_PLAIN, "zoo's resnet reads timm's plain ResNets with torchvision's structure"
    )
    architecture = meta["architecture"]
    args = dict(meta.get("model_args") or {})
    unknown = {k: args[k] for k in sorted(set(args) - TIMM_ARGS)}
    if unknown:
        raise ForeignLayoutError(
            f"config.json's model_args {unknown} change timm's {name} in ways zoo's "
            f"resnet does not model (it reads only {', '.join(sorted(TIMM_ARGS))})"
        )
    pool = args.get("global_pool", meta.get("global_pool", "avg"))
    if pool != "avg":
        raise ForeignLayoutError(
            f"config.json's global_pool is {pool!r}; zoo's resnet averages layer4's map ('avg')"
        )
    block, layers = TIMM_PLAIN[name]
    expected = {
        "block": block,
        "layers": list(args.get("layers", layers)),
        "num_classes": args.get("num_classes", meta.get("num_classes", fields["num_classes"])),
        "in_channels": args.get("in_chans", fields["in_channels"]),
    }
    differ = {k: (v, fields[k]) for k, v in expected.items() if v != fields[k]}
    if differ:
        raise ForeignLayoutError(
            f"config.json describes timm's {architecture} with "
            + ", ".join(f"{k}={said!r}" for k, (said, _) in differ.items())
            + " but the weights hold "
            + ", ".join(f"{k}={held!r}" for k, (_, held) in differ.items())
        )
    added: dict[str, Any] = {"dropout": float(args["drop_rate"])} if args.get("drop_rate") else {}
    input_size = (meta.get("pretrained_cfg") or {}).get("input_size")
    if input_size and len(input_size) == 3 and input_size[1] == input_size[2]:
        added["image_size"] = int(input_size[1])  # the size its preprocessing crops
    return added


def _placed(tensors: Tensors, fields: dict[str, Any], source: str) -> tuple[dict[str, Any], Tensors]:
    """The tensors in the table order of ``fields``' config, each name and shape checked."""
    try:
        config = ResNetConfig(**fields)
    except ValidationError as error:
        raise ForeignLayoutError(
            f"the {source} weights imply an invalid resnet config {fields}: {error}"
        ) from error
    specs = tensor_specs(table(config))
    # Checkpoints from before BatchNorm counted batches lack the counters; torch's loader starts them at 0.
    counters = {
        k: np.zeros((), np.int64) for k in specs if k.endswith(".num_batches_tracked") and k not in tensors
    }
    present = {**tensors, **counters}
    placed = renamed(present, {k: k for k in specs}, what=f"{source} ResNet weights ({_describe(fields)})")
    # A scalar saved as one element of one axis (torch 0.3 did; so does numpy's ascontiguousarray):
    # torch's loader takes it as the scalar, and so does this.
    placed = {
        k: np.reshape(v, ()) if specs[k].shape == () and np.shape(v) == (1,) else v for k, v in placed.items()
    }
    check_shapes(
        placed, {k: spec.shape for k, spec in specs.items()}, f"{source} ResNet weights ({_describe(fields)})"
    )
    return fields, {k: np.asarray(v).astype(specs[k].dtype, copy=False) for k, v in placed.items()}


def _describe(fields: Mapping[str, Any]) -> str:
    return f"{fields['block']} blocks {fields['layers']}, {fields['stem']} stem, width {fields['width']}"


def _first(tensors: Mapping[str, Any], limit: int = 5) -> str:
    keys = list(tensors)
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _unplaced_first(tensors: Mapping[str, Any], known: set[str]) -> list[str]:
    return [key for key in tensors if key not in known]


# ------------------------------------------------------------------------------------ writing


def zoo_to_torchvision(config: ResNetConfig, tensors: Tensors) -> tuple[Tensors, None]:
    """Canonical tensors -> the state dict ``torchvision.models.resnet*`` loads with ``strict=True``."""
    _check_exportable(config, "torchvision")
    if config.in_channels != 3:
        raise ForeignLayoutError(
            f"torchvision's ResNet builds conv1 for 3 input channels; this model reads {config.in_channels}. "
            "Export it as timm (in_chans) instead"
        )
    return _in_table_order(config, tensors), None


def zoo_to_timm(
    config: ResNetConfig, tensors: Tensors, preprocessing: Preprocessing | None = None
) -> tuple[Tensors, dict[str, Any]]:
    """Canonical tensors -> a timm ResNet state dict and the ``config.json`` timm builds it from,
    with the checkpoint's ``preprocessing`` in its ``pretrained_cfg`` (and its label names)."""
    _check_exportable(config, "timm")
    wanted = (config.block, config.layers)
    named = [name for name, (block, layers) in TIMM_PLAIN.items() if (block, layers) == wanted]
    architecture = named[0] if named else ("resnet18" if config.block == "basic" else "resnet50")
    model_args: dict[str, Any] = {"num_classes": config.num_classes, "in_chans": config.in_channels}
    if not named:
        model_args["layers"] = list(config.layers)
    if config.dropout:
        model_args["drop_rate"] = config.dropout
    model_args["global_pool"] = "avg"
    side = config.feature_size()
    pretrained, top = timm_fields(preprocessing)
    meta = {
        **top,
        "architecture": architecture,
        "num_classes": config.num_classes,
        "num_features": config.num_features,
        "global_pool": "avg",
        "model_args": model_args,
        "pretrained_cfg": {
            "custom_load": False,
            "input_size": [config.in_channels, config.image_size, config.image_size],
            "fixed_input_size": False,
            "num_classes": config.num_classes,
            "pool_size": [side, side],
            "first_conv": "conv1",
            "classifier": "fc",
            **pretrained,
        },
    }
    return _in_table_order(config, tensors), meta


def _check_exportable(config: ResNetConfig, target: str) -> None:
    """Refuse configs the library cannot build (its network would differ from zoo's) with
    :class:`ForeignLayoutError`, which ``zoo export`` reports as "cannot be written as ..."."""
    if config.stem != "imagenet":
        raise ForeignLayoutError(
            f"the {config.stem!r} stem (3x3 stride-1 conv, no max pool) has no {target} equivalent: "
            f"{target}'s ResNet always starts with the 7x7 stride-2 conv and the max pool, so these weights "
            "would run as another network there. Keep the zoo checkpoint (or export to onnx / savedmodel)"
        )
    if config.width != 64:
        raise ForeignLayoutError(
            f"{target}'s ResNet has a 64-channel stem and 64/128/256/512 planes; this model's width is "
            f"{config.width}"
        )
    if config.bn_eps != 1e-5:
        raise ForeignLayoutError(
            f"{target}'s ResNet normalises with BatchNorm epsilon 1e-5; this model uses {config.bn_eps}, "
            "so its outputs would differ there"
        )


def _in_table_order(config: ResNetConfig, tensors: Tensors) -> Tensors:
    return {name: tensors[name] for name in tensor_specs(table(config))}
