"""timm's ViT state dict <-> zoo's canonical tensors, and timm's ``config.json`` both ways.

timm's ``VisionTransformer`` and zoo's torch twin hold the same tensors; only attention is
named differently (zoo's shared ``SelfAttention`` keeps ``nn.MultiheadAttention``'s names):

    blocks.N.attn.qkv.{weight,bias}   <-> blocks.N.attn.in_proj_{weight,bias}
    blocks.N.attn.proj.{weight,bias}  <-> blocks.N.attn.out_proj.{weight,bias}

Everything else (``cls_token``, ``pos_embed``, ``patch_embed.proj``, ``blocks.N.norm1/norm2``,
``blocks.N.mlp.fc1/fc2``, ``norm``, ``head``) keeps its name and layout.

Reading: the config comes from the tensors' shapes (width, patch, image size, channels,
depth, MLP width, classes), except the head count, which no shape shows: it is taken from
the ``config.json`` beside the weights (``model_args.num_heads``, or the variant its
``architecture`` names), else from ``zoo import --num-heads``; never from the width (timm's
vit_small is 384 wide with 6 heads, a 384-wide ViT of 12 heads has the very same tensors).
What the ``config.json`` says is checked against the shapes. Tensors that zoo's ViT has no
place for (a register token, layer scale, an ``fc_norm`` of average pooling, CLIP's
``norm_pre``) and ``model_args`` that change what the tensors mean (another pooling,
activation or norm) are refused by name.

The ``pretrained_cfg`` says how the images were prepared (crop, interpolation, mean, std) and
``label_names`` what each class is; the import records both (zoo.preprocessing.read_timm_config), and
the export writes a checkpoint's preprocessing back there.

Writing: timm's names and the ``config.json`` timm's ``save_config_for_hf`` would write for
the same model. timm reads it back with ``timm.create_model("local-dir:" + folder,
pretrained=True)``, or, for a lone weights file, with::

    timm.create_model(cfg["architecture"], pretrained=True,
                      pretrained_cfg_overlay=dict(file=path, **cfg["pretrained_cfg"]), **cfg["model_args"])

where ``pretrained_cfg`` carries ``custom_load=False`` (timm's ViT configs point at the
original ``.npz`` files and would otherwise read the file as one) and ``num_classes`` (timm
silently drops a head whose class count differs from the pretrained config's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.vit.config import ViTConfig
from architectures.vit.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, head_count, renamed
from zoo.checkpoint.tables import tensor_specs
from zoo.preprocessing import Preprocessing, read_timm_config, timm_fields

# timm's vit_<size>_patch16_224 factories: embed_dim, depth, num_heads (mlp_ratio 4).
VARIANTS = {
    "tiny": (192, 12, 3),
    "small": (384, 12, 6),
    "base": (768, 12, 12),
    "large": (1024, 24, 16),
}
_NAME = re.compile(r"^vit_(?P<size>[a-z]+)_patch(?P<patch>\d+)_(?P<image>\d+)$")
# model_args that are harmless at these values (timm's defaults for this architecture) ...
_DEFAULT_ARGS: dict[str, Any] = {
    "global_pool": "token",
    "class_token": True,
    "qkv_bias": True,
    "proj_bias": True,
    "qk_norm": False,
    "no_embed_class": False,
    "pre_norm": False,
    "final_norm": True,
    "fc_norm": None,
    "reg_tokens": 0,
    "init_values": None,
    "pos_embed": "learn",
    "patch_drop_rate": 0.0,
    "drop_path_rate": 0.0,
}
# ... and those that change only training or initialisation, or only other image sizes.
_IGNORED_ARGS = ("weight_init", "fix_init", "dynamic_img_size", "dynamic_img_pad", "pretrained_model_args")
_ARG_FIELDS = {  # timm's model_args -> zoo's config fields
    "img_size": "image_size",
    "in_chans": "in_channels",
    "num_classes": "num_classes",
    "patch_size": "patch_size",
    "embed_dim": "dim",
    "depth": "depth",
    "num_heads": "num_heads",
    "mlp_ratio": "mlp_ratio",
}
_DROPOUTS = {  # timm's model_args -> zoo's config fields
    "proj_drop_rate": "dropout",
    "attn_drop_rate": "attn_dropout",
    "pos_drop_rate": "pos_dropout",
    "drop_rate": "head_dropout",
}


def _timm_names(cfg: ViTConfig) -> dict[str, str]:
    """zoo's canonical name -> timm's, for every tensor of ``cfg``."""
    names = {}
    for name in tensor_specs(table(cfg)):
        timm = re.sub(r"\.attn\.in_proj_(weight|bias)$", r".attn.qkv.\1", name)
        names[name] = re.sub(r"\.attn\.out_proj\.", ".attn.proj.", timm)
    return names


# ---------------------------------------------------------------------------- timm -> zoo


def from_timm(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], num_heads: int | None = None
) -> tuple[dict[str, Any], Tensors]:
    """timm's ViT state dict (and its ``config.json``, or ``{}``) -> zoo's config fields and
    tensors. ``num_heads``: the head count, where no config.json says it."""
    tensors = _without_prefix(tensors, "module.")  # a DistributedDataParallel state dict
    fields = _shapes_config(tensors)
    fields = _with_meta(fields, meta, num_heads)
    try:
        cfg = ViTConfig(**fields)
    except ValueError as error:
        raise ForeignLayoutError(f"these timm ViT weights give no valid zoo vit config: {error}") from error
    names = {timm: zoo for zoo, timm in _timm_names(cfg).items()}
    found = renamed(tensors, names, what="timm ViT weights")
    specs = tensor_specs(table(cfg))
    wrong = [
        f"{timm_key} {list(np.shape(found[name]))} (a {cfg.depth}-block dim-{cfg.dim} ViT needs "
        f"{list(specs[name].shape)})"
        for timm_key, name in names.items()
        if tuple(np.shape(found[name])) != specs[name].shape
    ]
    if wrong:
        raise ForeignLayoutError(
            f"these timm ViT weights have other shapes than zoo's: {'; '.join(wrong[:5])}"
        )
    return fields, {name: np.asarray(value, dtype=np.float32) for name, value in found.items()}


def _without_prefix(tensors: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    if tensors and all(key.startswith(prefix) for key in tensors):
        return {key[len(prefix) :]: value for key, value in tensors.items()}
    return dict(tensors)


def _shapes_config(tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Every config field the tensors' shapes decide (all but the head count)."""
    needed = [
        "cls_token", "pos_embed", "patch_embed.proj.weight", "blocks.0.mlp.fc1.weight", "norm.weight",
        "head.weight",
    ]  # fmt: skip
    missing = [key for key in needed if key not in tensors]
    if missing:
        known = ("cls_token", "pos_embed", "patch_embed.", "blocks.", "norm.", "head.")
        raise ForeignLayoutError(
            f"not a timm VisionTransformer with a classifier head: missing {', '.join(missing)}",
            [key for key in tensors if not key.startswith(known)],
            missing,
        )
    blocks = sorted({int(m.group(1)) for key in tensors if (m := re.match(r"blocks\.(\d+)\.", key))})
    if blocks != list(range(len(blocks))):
        raise ForeignLayoutError(f"timm ViT blocks are not numbered 0..{len(blocks) - 1}: found {blocks}")
    proj, pos = np.shape(tensors["patch_embed.proj.weight"]), np.shape(tensors["pos_embed"])
    if len(proj) != 4 or proj[2] != proj[3] or len(pos) != 3:
        raise ForeignLayoutError(
            f"patch_embed.proj.weight {list(proj)} / pos_embed {list(pos)}: zoo's vit needs square patches "
            "(dim, channels, p, p) and a (1, tokens, dim) position embedding"
        )
    dim, grid = proj[0], math.isqrt(max(pos[1] - 1, 0))
    if grid * grid + 1 != pos[1]:
        raise ForeignLayoutError(
            f"pos_embed has {pos[1]} rows, not a class token plus a square grid of patches: zoo's vit "
            "has exactly one prefix token (no register tokens, no position-free class token)"
        )
    hidden = int(np.shape(tensors["blocks.0.mlp.fc1.weight"])[0])
    return {
        "in_channels": int(proj[1]),
        "image_size": int(grid * proj[2]),
        "num_classes": int(np.shape(tensors["head.weight"])[0]),
        "patch_size": int(proj[2]),
        "dim": int(dim),
        "depth": len(blocks),
        "mlp_ratio": _ratio(hidden, int(dim)),
    }


def _ratio(hidden: int, dim: int) -> float:
    """An mlp_ratio with int(dim * ratio) == hidden (hidden / dim may round just below it)."""
    ratio = hidden / dim
    while int(dim * ratio) < hidden:
        ratio = math.nextafter(ratio, math.inf)
    return ratio


def _with_meta(fields: dict[str, Any], meta: Mapping[str, Any], num_heads: int | None) -> dict[str, Any]:
    """``fields`` with the head count and dropout rates of the config.json, after checking that
    everything it says about the architecture agrees with the shapes."""
    said: dict[str, tuple[Any, str]] = {}  # config field -> (value, where the config.json says it)
    name = str(meta.get("architecture", "")).split(".")[0]  # "vit_tiny_patch16_224.augreg_in21k"
    variant = _NAME.match(name)
    if variant and variant["size"] in VARIANTS:
        dim, depth, heads = VARIANTS[variant["size"]]
        where = f"architecture {name!r}"
        said.update(
            dim=(dim, where),
            depth=(depth, where),
            num_heads=(heads, where),
            patch_size=(int(variant["patch"]), where),
            image_size=(int(variant["image"]), where),
            mlp_ratio=(4.0, where),
        )
    args = dict(meta.get("model_args") or {})
    refused = {
        key: value
        for key, value in args.items()
        if key not in _IGNORED_ARGS
        and key not in _DROPOUTS
        and key not in _ARG_FIELDS
        and (key not in _DEFAULT_ARGS or value != _DEFAULT_ARGS[key])
    }
    if refused:
        raise ForeignLayoutError(
            f"config.json's model_args set {refused}: zoo's vit is timm's ViT with token pooling, a class "
            "token, qkv bias, exact GELU and LayerNorm(1e-6) only"
        )
    for key, field in _ARG_FIELDS.items():
        if key in args:
            said[field] = (_square(args[key]) if key == "img_size" else args[key], f"model_args.{key}")
    if "num_classes" in meta:
        said["num_classes"] = (meta["num_classes"], "num_classes")
    input_size = (meta.get("pretrained_cfg") or {}).get("input_size")
    if input_size and "in_chans" not in args:
        said["in_channels"] = (input_size[0], "pretrained_cfg.input_size")
    if input_size and "img_size" not in args:
        said["image_size"] = (_square(input_size[1:]), "pretrained_cfg.input_size")
    heads, where = said.get("num_heads", (None, ""))
    fields["num_heads"] = head_count(heads, where, num_heads, fields["dim"], "ViT", "timm's config.json")
    disagree = []
    for field, (value, where) in said.items():
        ours = fields[field]
        if field == "mlp_ratio":  # the hidden width is what the tensors show
            same = int(fields["dim"] * value) == int(fields["dim"] * ours)
        else:
            same = value == ours
        if not same:
            disagree.append(f"{where} says {field} {value!r}, the tensors {ours!r}")
    if disagree:
        raise ForeignLayoutError(f"config.json and the weights disagree: {'; '.join(disagree)}")
    fields.update({_DROPOUTS[key]: float(args[key]) for key in _DROPOUTS if args.get(key)})
    return fields


def _square(size: Any) -> int | list:
    """timm's img_size (an int or [h, w]) as zoo's one side; a non-square size stays a list,
    which then disagrees with the (square) image_size."""
    if isinstance(size, int):
        return size
    size = list(size)
    return int(size[0]) if len(size) == 2 and size[0] == size[1] else size


# ---------------------------------------------------------------------------- zoo -> timm


def timm_preprocessing(cfg: ViTConfig, meta: Mapping[str, Any]) -> Preprocessing | None:
    """What timm's config.json says: its pretrained_cfg and label_names (none without one)."""
    return read_timm_config(meta, cfg.num_classes, (cfg.in_channels, cfg.image_size, cfg.image_size))


def to_timm(
    cfg: ViTConfig, tensors: Mapping[str, np.ndarray], preprocessing: Preprocessing | None = None
) -> tuple[Tensors, dict[str, Any]]:
    """zoo's tensors -> timm's state dict, and the ``config.json`` timm builds the model from
    (with the checkpoint's ``preprocessing`` in its pretrained_cfg, and its label names)."""
    out = renamed(tensors, _timm_names(cfg), what="zoo vit tensors")
    config = timm_config(cfg)
    pretrained, top = timm_fields(preprocessing)
    config["pretrained_cfg"].update(pretrained)
    return out, {**top, **config}


def timm_name(cfg: ViTConfig) -> str:
    """The timm factory whose definition is closest: the variant of this width, else vit_base."""
    size = next((s for s, (d, _, h) in VARIANTS.items() if (d, h) == (cfg.dim, cfg.num_heads)), "base")
    return f"vit_{size}_patch16_224"


def timm_config(cfg: ViTConfig) -> dict[str, Any]:
    """timm's ``config.json`` (as ``save_config_for_hf`` writes it) for a model of ``cfg``."""
    name = timm_name(cfg)
    dim, depth, heads = VARIANTS[name.split("_")[1]]
    args: dict[str, Any] = {
        "num_classes": cfg.num_classes,
        "img_size": [cfg.image_size, cfg.image_size],
        "in_chans": cfg.in_channels,
        "global_pool": "token",
    }
    for key, value, standard in (
        ("patch_size", cfg.patch_size, 16),
        ("embed_dim", cfg.dim, dim),
        ("depth", cfg.depth, depth),
        ("num_heads", cfg.num_heads, heads),
        ("mlp_ratio", cfg.mlp_ratio, 4.0),
    ):
        if value != standard:
            args[key] = value
    args.update({key: getattr(cfg, field) for key, field in _DROPOUTS.items() if getattr(cfg, field)})
    return {
        "architecture": name,
        "num_classes": cfg.num_classes,
        "num_features": cfg.dim,
        "global_pool": "token",
        "model_args": args,
        "pretrained_cfg": {
            "custom_load": False,
            "input_size": [cfg.in_channels, cfg.image_size, cfg.image_size],
            "fixed_input_size": True,
            "num_classes": cfg.num_classes,
            "first_conv": "patch_embed.proj",
            "classifier": "head",
        },
    }
