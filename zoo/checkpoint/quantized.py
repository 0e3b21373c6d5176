"""Weight-only quantized tensors in the common checkpoint: one quantizer, written once in numpy.

Both twins compute with exactly the weights this module gives back (``dequantize``): the
integers and scales are made once, here, and the float32 weights ``q * scale`` are the same
array for torch and for Keras, so a quantized model's twins agree as closely as any two twins
of one float checkpoint do. Two symmetric schemes:

- ``int8``: one scale per output channel (a matrix's row, a convolution's output filter),
  ``max |w| / 127``; the integers are stored as int8, in the tensor's own shape.
- ``int4``: one scale per ``group_size`` consecutive inputs of an output channel (the last
  group may be shorter), ``max |w| / 7``; two integers in [-7, 7] per byte (the even input
  in the low nibble, two's complement), stored as uint8 (rows, ceil(inputs / 2)).

Rounding is to nearest, ties to even (numpy's and torch's ``round``); a row of zeros (or of
values so small that their scale would underflow) gets the scale 1 and becomes zeros. Every
floating tensor of two or more dimensions with more than one row is quantized (linear and
embedding matrices, convolution kernels, recurrent matrices); vectors
(biases, norms) and one-row tensors (ViT's class token and position table) stay as they are.
In the file a quantized tensor ``NAME`` holds the integers and ``NAME.scale`` the float32
scales (rows, groups); the metadata key ``quantization`` names the scheme (:class:`Scheme`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zoo.checkpoint.file import CheckpointError, some

SCALE = ".scale"  # a quantized tensor's scales: NAME.scale beside NAME's integers
LEVELS = {"int8": 127, "int4": 7}  # the largest integer of each symmetric scheme
STORED = {"int8": "int8", "int4": "uint8"}  # the dtype its integers are stored in
DEFAULT_GROUP_SIZE = 32  # llama.cpp's Q4_0 block: fine enough for the small inputs of zoo's micro presets


class Scheme(BaseModel):
    """What the ``quantization`` metadata records, and ``zoo quantize`` is asked for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: Literal["int8", "int4"] = Field(description="int8: per output channel; int4: per group of inputs")
    group_size: int | None = Field(
        default=None, ge=2, le=1 << 20, description="int4's inputs per scale (even); none for int8"
    )

    def model_post_init(self, _context) -> None:
        if self.scheme == "int8" and self.group_size is not None:
            raise ValueError("int8 has one scale per output channel: leave group_size out (int4 takes one)")
        if self.scheme == "int4" and (self.group_size is None or self.group_size % 2):
            raise ValueError(f"int4 needs an even group_size (two integers a byte), not {self.group_size}")

    @classmethod
    def of(cls, scheme: str, group_size: int | None = None) -> Scheme:
        """The scheme ``zoo quantize`` was asked for (int4's group size defaulted)."""
        if scheme == "int4" and group_size is None:
            group_size = DEFAULT_GROUP_SIZE
        return cls(scheme=scheme, group_size=group_size)

    def groups(self, columns: int) -> int:
        return 1 if self.group_size is None else math.ceil(columns / self.group_size)

    def stored_shapes(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The integers' and the scales' shapes in the file, for a tensor of ``shape``."""
        rows, columns = shape[0], math.prod(shape[1:])
        integers = shape if self.scheme == "int8" else (rows, (columns + 1) // 2)
        return integers, (rows, self.groups(columns))

    def describe(self) -> str:
        return self.scheme if self.group_size is None else f"{self.scheme}, groups of {self.group_size}"


def quantizable(shape: tuple[int, ...], dtype: str) -> bool:
    """A matrix or kernel: floating, two or more dimensions, more than one row."""
    return dtype.startswith(("float", "bfloat")) and len(shape) >= 2 and shape[0] > 1


# ------------------------------------------------------------------------- the arithmetic


def quantize(weight: np.ndarray, scheme: Scheme) -> tuple[np.ndarray, np.ndarray]:
    """``weight``'s integers (as stored) and float32 scales (rows, groups)."""
    rows = weight.shape[0]
    flat = np.asarray(weight, np.float32).reshape(rows, -1)
    grouped = _grouped(flat, scheme)  # (rows, groups, group) with zeros past the last input
    levels = LEVELS[scheme.scheme]
    peak = np.abs(grouped).max(axis=2)
    scale = (peak / np.float32(levels)).astype(np.float32)
    scale[scale == 0] = 1  # a group of zeros, or of subnormals whose scale would underflow: zeros
    integers = np.clip(np.rint(grouped / scale[:, :, None]), -levels, levels).astype(np.int8)
    integers = integers.reshape(rows, -1)[:, : flat.shape[1]]
    if scheme.scheme == "int8":
        return integers.reshape(weight.shape), scale
    return pack(integers), scale


def dequantize(integers: np.ndarray, scale: np.ndarray, shape: tuple[int, ...], scheme: Scheme) -> np.ndarray:
    """The float32 weight of ``shape`` the twins compute with: each integer times its scale."""
    rows, columns = shape[0], math.prod(shape[1:])
    values = integers.reshape(rows, columns) if scheme.scheme == "int8" else unpack(integers, columns)
    grouped = _grouped(values.astype(np.float32), scheme)
    weight = (grouped * scale[:, :, None]).reshape(rows, -1)[:, :columns]
    return np.ascontiguousarray(weight).reshape(shape)


def _grouped(flat: np.ndarray, scheme: Scheme) -> np.ndarray:
    """(rows, columns) as (rows, groups, group_size), the last group padded with zeros."""
    rows, columns = flat.shape
    size = scheme.group_size or columns
    padded = scheme.groups(columns) * size
    if padded != columns:
        flat = np.pad(flat, ((0, 0), (0, padded - columns)))
    return flat.reshape(rows, -1, size)


def pack(integers: np.ndarray) -> np.ndarray:
    """(rows, columns) integers in [-8, 7] as (rows, ceil(columns / 2)) bytes, low nibble first."""
    if integers.shape[1] % 2:
        integers = np.pad(integers, ((0, 0), (0, 1)))
    nibbles = integers.astype(np.uint8) & 0x0F
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def unpack(packed: np.ndarray, columns: int) -> np.ndarray:
    """:func:`pack`'s inverse: (rows, columns) int8."""
    low, high = packed & 0x0F, packed >> 4
    nibbles = np.stack([low, high], axis=2).reshape(packed.shape[0], -1)[:, :columns]
    return ((nibbles ^ 8).astype(np.int8) - 8).astype(np.int8)


# ----------------------------------------------------------------------- whole checkpoints


def quantize_tensors(tensors: Mapping[str, np.ndarray], scheme: Scheme) -> dict[str, np.ndarray]:
    """A checkpoint's tensors as stored quantized: each quantizable one as integers and scales."""
    out: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        if quantizable(value.shape, value.dtype.name):
            out[name], out[name + SCALE] = quantize(value, scheme)
        else:
            out[name] = value
    return out


def dequantize_tensors(
    tensors: Mapping[str, np.ndarray], scheme: Scheme, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """The stored tensors with every quantized one as its float32 weight (``shapes``: the
    canonical shapes, from the weight table)."""
    out = {}
    for name, value in tensors.items():
        if name.endswith(SCALE) and name.removesuffix(SCALE) in tensors:
            continue
        scale = tensors.get(name + SCALE)
        out[name] = value if scale is None else dequantize(value, scale, shapes[name], scheme)
    return out


def read_scheme(text: str, source: str) -> Scheme:
    """The ``quantization`` metadata, refused in one line when it is not a scheme zoo reads."""
    try:
        return Scheme.model_validate(json.loads(text))
    except (ValueError, ValidationError) as error:
        problems = error.errors() if isinstance(error, ValidationError) else [{"msg": str(error)}]
        said = "; ".join(str(p.get("msg", "")).removeprefix("Value error, ") for p in problems[:3])
        raise CheckpointError(
            f"{source}: its quantization metadata {text!r:.80} is not a scheme zoo reads ({said}); "
            'zoo writes {"scheme": "int8"} or {"scheme": "int4", "group_size": 32} (zoo quantize)'
        ) from None


def canonical_view(
    found: Mapping[str, tuple[tuple[int, ...], str]],
    expected: Mapping[str, tuple[int, ...]],
    scheme: Scheme,
    float_dtype: str,
    source: str,
) -> dict[str, tuple[tuple[int, ...], str]]:
    """The stored tensors' (shape, dtype) as the weights they stand for: each quantized tensor
    checked against the canonical shape ``expected`` gives it, then shown at that shape in
    ``float_dtype``. Its integers and scales at the wrong shape or dtype are refused here."""
    view, problems = dict(found), []
    for key in found:
        if not key.endswith(SCALE) or (name := key.removesuffix(SCALE)) not in found or name not in expected:
            continue
        integers, scales = scheme.stored_shapes(expected[name])
        for what, (shape, dtype), want in (
            ("integers", found[name], (integers, STORED[scheme.scheme])),
            ("scales", found[key], (scales, "float32")),
        ):
            if (shape, dtype) != want:
                problems.append(f"{name}'s {what} are {dtype} {list(shape)}, not {want[1]} {list(want[0])}")
        view[name] = (expected[name], float_dtype)
        del view[key]
    if problems:
        raise CheckpointError(
            f"{source}: quantized tensors ({scheme.describe()}) do not match the architecture: "
            f"{some(problems, 4)}; the file is damaged: quantize its float checkpoint again"
        )
    return view
