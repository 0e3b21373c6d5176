"""transformers models saved quantized by compressed-tensors, read as zoo's own quantized
checkpoints where zoo's :class:`~zoo.checkpoint.quantized.Scheme` holds their numbers exactly.

compressed-tensors (what llmcompressor writes, and vLLM and transformers read) stores a quantized
``Linear`` as integers and scales, and its weight is ``q.to(scale.dtype) * scale``. Two of its
schemes are zoo's, save the range: weight-only, symmetric, integer

- 8 bits, one scale per output row (``strategy: channel``; ``tensor``'s one scale is the same
  scale on every row): zoo's ``int8``;
- 4 bits, one scale per ``group_size`` consecutive inputs (``strategy: group``): zoo's ``int4``.

Its symmetric scale is ``max / 127.5`` over [-128, 127] (``max / 7.5`` over [-8, 7]) where zoo's
quantizer divides by 127 (7); zoo's files and both twins hold -128 and -8 all the same, so the
file's integers and scales are kept as they are, never rounded again, the scales made float32
(exact from bfloat16 and float16). The weight zoo computes is their float32 product, which is
transformers' weight for float32 scales; for bfloat16 scales, transformers' is that product rounded
to bfloat16 (an integer times a bfloat16 has at most 16 significant bits: the product is exact).

Formats ``int-quantized`` and ``naive-quantized`` store 8-bit integers as int8 ``weight``;
``pack-quantized`` packs them densely into int32 ``weight_packed`` (element ``i`` at bit
``i * bits``, offset by ``2 ** (bits - 1)``), beside ``weight_shape``. Everything else is refused by
name before a tensor is read: zero points, quantized activations or key/value caches, float8 and
MX formats, other bit widths and strategies, reordered groups (``actorder``), transforms,
sparsity, schemes that differ between layers, and every other method (bitsandbytes, GPTQ, AWQ,
torchao, HQQ...). Layers a file leaves float (its ``ignore`` list: ``lm_head`` usually) stay float.

A family's format places float32 tensors: :func:`held` dequantizes the file's layers, the format
places them, and :func:`stored` finds each placed weight's integers again by placing the scales the
same way (a rename, a split or a concatenation of rows keeps every scale with its weights), dividing
and checking that the product gives the placed weight back bit for bit. A weight whose scales the
format moved off zoo's rows or groups (a transpose) is kept float32, as exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.checkpoint.foreign import Tensors
from zoo.checkpoint.quantized import SCALE, Scheme, dequantize, pack
from zoo.interchange import InterchangeError

METHOD = "compressed-tensors"
FORMATS = ("int-quantized", "naive-quantized", "pack-quantized")  # the layouts zoo reads
FIX = "import the float model, then `zoo quantize CHECKPOINT --scheme int8|int4`"
SUPPORTED = (
    "zoo reads compressed-tensors' weight-only symmetric int8 (a scale per output row) and int4 (a "
    "scale per group of inputs), and no other quantization"
)
RANGE = {"int8": (-128, 127), "int4": (-8, 7)}  # what compressed-tensors' symmetric integers span
# the tensors a quantized layer NAME may store beside NAME.weight_scale, and what each says
EXTRA = {
    "weight_zero_point": "a zero point (asymmetric)",
    "weight_g_idx": "reordered groups (actorder)",
    "weight_global_scale": "a global scale (nvfp4)",
    "input_scale": "quantized activations",
}


@dataclass(frozen=True)
class Held:
    """A compressed-tensors file's quantized layers, read as float32 weights: the scheme, each
    layer weight's float32 scales (rows, groups) under its name in the file, and the file's
    ``quantization_config``."""

    scheme: Scheme
    scales: dict[str, np.ndarray]
    config: dict[str, Any]


# ------------------------------------------------------------------------------ the config


def read_scheme(config: Path, meta: Mapping[str, Any]) -> Scheme | None:
    """The zoo scheme of ``config.json``'s ``quantization_config`` (None where it has none),
    refused before any weight is read where zoo would not compute it exactly."""
    found = meta.get("quantization_config")
    if not found:
        return None
    found = found if isinstance(found, dict) else {}
    method = found.get("quant_method", "unnamed")
    if method != METHOD:
        bits = [key for key in ("load_in_4bit", "load_in_8bit") if found.get(key)]
        kind = found.get("bnb_4bit_quant_type") if found.get("load_in_4bit") else None
        said = f"quant_method {method!r:.40}" + (
            f" ({', '.join([*bits, *([kind] if kind else [])])})" if bits else ""
        )
        _refuse(config, said, [f"{method!r:.40} packs and scales its integers its own way"])
    problems = _config_problems(found)
    schemes = {}
    for name, group in (found.get("config_groups") or {}).items():
        scheme = _group_scheme(f"config_groups.{name}", group if isinstance(group, dict) else {}, problems)
        if scheme is not None:
            schemes[name] = scheme
    if len(set(schemes.values())) > 1:
        problems.append(
            "config_groups with different schemes ("
            + ", ".join(f"{name}: {s.describe()}" for name, s in schemes.items())
            + "; a zoo checkpoint has one)"
        )
    if not schemes and not problems:
        problems.append("no config_groups quantizing weights")
    if problems:
        _refuse(config, f"quant_method {METHOD!r}", problems)
    return next(iter(schemes.values()))


def _refuse(config: Path, said: str, problems: list[str]) -> None:
    raise InterchangeError(
        f"{config}: a quantized model (quantization_config: {said}) that zoo does not read exactly: "
        f"{'; '.join(problems[:4])}. {SUPPORTED}; {FIX}"
    )


def _config_problems(found: Mapping[str, Any]) -> list[str]:
    """The whole model's fields zoo does not compute: each named, with what it means."""
    problems = []
    status = found.get("quantization_status")
    if status not in (None, "compressed"):
        problems.append(
            f"quantization_status {status!r} (zoo reads the compressed integers save_pretrained writes)"
        )
    fmt = found.get("format")
    if fmt not in (*FORMATS, "mixed-precision", None):
        problems.append(f"format {fmt!r} (zoo reads {', '.join(FORMATS)})")
    for key, what in (
        ("kv_cache_scheme", "a quantized key/value cache"),
        ("transform_config", "rotations applied as the model runs"),
        ("sparsity_config", "sparse weights"),
        ("moe_sparsity_config", "experts pruned or replaced"),
    ):
        if found.get(key):
            problems.append(f"{key} ({what})")
    return problems


def _group_scheme(where: str, group: Mapping[str, Any], problems: list[str]) -> Scheme | None:
    """One config group's weights as a zoo scheme; what it cannot be is added to ``problems``."""
    before = len(problems)
    for key in ("input_activations", "output_activations"):
        if group.get(key):
            problems.append(f"{where}.{key} (activations quantized as well: zoo quantizes weights only)")
    fmt = group.get("format")
    if fmt is not None and fmt not in FORMATS:
        problems.append(f"{where}.format {fmt!r} (zoo reads {', '.join(FORMATS)})")
    weights = group.get("weights")
    if not isinstance(weights, dict):
        return None
    problems += [f"{where}.weights.{problem}" for problem in _weight_problems(weights)]
    if len(problems) > before:
        return None
    if weights["num_bits"] == 8:
        return Scheme(scheme="int8")
    return Scheme(scheme="int4", group_size=weights["group_size"])


def _weight_problems(weights: Mapping[str, Any]) -> list[str]:
    bits, strategy, group = weights.get("num_bits"), weights.get("strategy"), weights.get("group_size")
    problems = []
    if weights.get("type", "int") != "int":
        problems.append(f"type {weights.get('type')!r} (zoo holds integers)")
    if weights.get("symmetric") is False:
        problems.append("symmetric false (a zero point per scale; zoo's integers have none)")
    if weights.get("dynamic"):
        problems.append(f"dynamic {weights.get('dynamic')!r} (scales made as the model runs)")
    if weights.get("actorder") not in (None, "static"):
        problems.append(f"actorder {weights.get('actorder')!r} (groups of reordered inputs)")
    if bits == 8 and strategy not in ("channel", "tensor"):
        problems.append(f"num_bits 8 with strategy {strategy!r} (zoo's int8 has a scale per output row)")
    elif bits == 4 and (strategy != "group" or not isinstance(group, int) or group < 2 or group % 2):
        problems.append(
            f"num_bits 4 with strategy {strategy!r}, group_size {group!r} (zoo's int4 has a scale per "
            "group of an even number of inputs: strategy group)"
        )
    elif bits not in (4, 8):
        problems.append(f"num_bits {bits!r} (zoo holds int8 and int4)")
    return problems


# ----------------------------------------------------------------------------- the tensors


def held(tensors: Tensors, scheme: Scheme, meta: Mapping[str, Any], source: Path) -> tuple[Tensors, Held]:
    """``tensors`` with each quantized layer's integers and scales (``weight`` or ``weight_packed``,
    ``weight_scale``, ``weight_shape``) as its float32 ``weight``, and what they were (``meta``:
    the config.json)."""
    _refuse_tied_head(tensors, meta, source)
    out, scales = dict(tensors), {}
    for key in [k for k in tensors if k.endswith(".weight_scale")]:
        layer = key.removesuffix(".weight_scale")
        extra = [f"{layer}.{name} ({what})" for name, what in EXTRA.items() if f"{layer}.{name}" in tensors]
        if extra:
            raise InterchangeError(
                f"{source}: {', '.join(extra)}, which a symmetric weight-only scheme does not store; {FIX}"
            )
        integers, shape = _integers(out, layer, scheme, source)
        scale = _scales(out.pop(key), shape, scheme, f"{source}: {key}")
        name = f"{layer}.weight"
        out[name] = dequantize(integers, scale, shape, scheme)
        scales[name] = scale
    if not scales:
        raise InterchangeError(
            f"{source}: its config.json says compressed-tensors but no tensor is quantized (no "
            "NAME.weight_scale); the weights and config.json do not belong together"
        )
    return out, Held(scheme, scales, dict(meta["quantization_config"]))


def _refuse_tied_head(tensors: Tensors, meta: Mapping[str, Any], source: Path) -> None:
    """A head quantized while config.json ties it to the float token embedding: transformers then
    loads the two untied (the head from the integers), which a tied zoo model cannot hold."""
    tied = meta.get("tie_word_embeddings", meta.get("model_type") == "gpt2")  # gpt2's default ties
    if tied and "lm_head.weight_scale" in tensors:
        raise InterchangeError(
            f"{source}: lm_head is quantized while config.json ties it to the token embedding "
            "(tie_word_embeddings true), which stays float: transformers loads the two untied. Quantize "
            "with lm_head in the ignore list (compressed-tensors' usual), or set tie_word_embeddings false "
            "in config.json to import the head as a matrix of its own"
        )


def _integers(
    tensors: Tensors, layer: str, scheme: Scheme, source: Path
) -> tuple[np.ndarray, tuple[int, ...]]:
    """A layer's integers as zoo stores them (int8, or int4 two a byte) and its weight's shape,
    taken out of ``tensors``."""
    if f"{layer}.weight_packed" in tensors:
        packed = tensors.pop(f"{layer}.weight_packed")
        shape = tuple(int(n) for n in np.asarray(tensors.pop(f"{layer}.weight_shape", ())).reshape(-1))
        bits = 8 if scheme.scheme == "int8" else 4
        if (
            packed.dtype != np.int32
            or len(shape) != 2
            or packed.shape != (shape[0], math.ceil(shape[1] * bits / 32))
        ):
            raise InterchangeError(
                f"{source}: {layer}.weight_packed is {packed.dtype} {list(packed.shape)} for a weight of "
                f"shape {list(shape) or 'unknown (no weight_shape)'}; {bits}-bit pack-quantized weights are "
                f"int32 (rows, ceil(columns * {bits} / 32)): the file is damaged"
            )
        data = packed.astype("<i4", copy=False).view(np.uint8).reshape(shape[0], -1)
        if bits == 8:  # one integer a byte, offset by 128
            return (data[:, : shape[1]].astype(np.int16) - 128).astype(np.int8), shape
        # two a byte, even input in the low nibble, offset by 8: flipping each nibble's top bit
        # makes it two's complement, zoo's int4 byte
        return data[:, : (shape[1] + 1) // 2] ^ np.uint8(0x88), shape
    integers = tensors.get(f"{layer}.weight")
    if integers is None or integers.dtype != np.int8 or scheme.scheme != "int8" or integers.ndim != 2:
        found = "nothing" if integers is None else f"{integers.dtype} {list(integers.shape)}"
        raise InterchangeError(
            f"{source}: {layer}.weight_scale stands beside {found} as {layer}.weight; zoo reads "
            "int-quantized weights as int8 matrices with 8-bit schemes, and pack-quantized ones "
            "(weight_packed, weight_shape): the file is damaged or another format"
        )
    return tensors.pop(f"{layer}.weight"), tuple(integers.shape)


def _scales(scale: np.ndarray, shape: tuple[int, ...], scheme: Scheme, where: str) -> np.ndarray:
    """A layer's scales as zoo's float32 (rows, groups): a whole tensor's one scale on every row."""
    want = scheme.stored_shapes(shape)[1]
    scale = np.asarray(scale, np.float32)
    if scale.size == 1 and scheme.scheme == "int8":  # strategy tensor
        scale = np.full(want, scale.reshape(()), np.float32)
    if scale.shape != want:
        raise InterchangeError(
            f"{where} is {list(scale.shape)}; a weight of shape {list(shape)} quantized {scheme.describe()} "
            f"has scales {list(want)}: the file is damaged"
        )
    return np.ascontiguousarray(scale)


def stored(
    read: Callable[[Tensors], tuple[Any, Tensors]], tensors: Tensors, canonical: Tensors, found: Held
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The checkpoint's tensors: each placed weight whose file layer was quantized as its integers
    and ``NAME.scale``, the rest as placed; and the names of quantized weights left float32.
    ``read`` is the format that placed ``tensors`` as ``canonical``; it places the scales too."""
    traced = dict(tensors)
    for name, scale in found.scales.items():
        columns = tensors[name].shape[1]
        traced[name] = np.repeat(scale, math.ceil(columns / scale.shape[1]), axis=1)[:, :columns]
    placed = read(traced)[1]
    out, left = {}, []
    for name, weight in canonical.items():
        trace = placed[name]
        if trace is weight or np.array_equal(trace, weight):  # not a quantized layer's
            out[name] = weight
            continue
        integers = _recovered(weight, trace, found.scheme)
        if integers is None:
            out[name] = weight
            left.append(name)
        else:
            out[name], out[name + SCALE] = integers
    return out, left


def _recovered(weight: np.ndarray, trace: np.ndarray, scheme: Scheme) -> tuple[np.ndarray, np.ndarray] | None:
    """A placed weight's integers (as zoo stores them) and scales, where its placed scales are one per
    zoo row or group and each integer times its scale is the weight to the bit; else None."""
    rows, columns = weight.shape[0], math.prod(weight.shape[1:])
    size = scheme.group_size or columns
    if weight.ndim != 2 or columns % size or trace.shape != weight.shape:
        return None
    grouped = trace.reshape(rows, -1, size)
    scale = np.ascontiguousarray(grouped[:, :, 0])
    if not np.array_equal(grouped, np.broadcast_to(scale[:, :, None], grouped.shape)):
        return None
    values = weight.reshape(rows, -1, size)
    with np.errstate(divide="ignore", invalid="ignore"):
        integers = np.where(scale[:, :, None] != 0, np.rint(values / scale[:, :, None]), 0)
    low, high = RANGE[scheme.scheme]
    if integers.min() < low or integers.max() > high:
        return None
    integers = integers.astype(np.int8).reshape(rows, columns)
    if scheme.scheme == "int4":
        integers = pack(integers)
    if not np.array_equal(dequantize(integers, scale, weight.shape, scheme), weight):
        return None  # zoo's own product (both twins') does not give the placed weight back
    return integers, scale
