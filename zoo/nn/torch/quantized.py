"""A quantized checkpoint's weights held as its integers in the torch twin.

Each quantized weight becomes a buffer of the integers as stored (int8, or int4 packed two to
a byte) and a parametrization (``torch.nn.utils.parametrize``) holding the float32 scales:
reading ``module.weight`` makes the float32 weight ``q * scale`` there and then, the same
arithmetic as ``zoo.checkpoint.quantized.dequantize`` (one float32 product per weight), so the
numbers are the float load's to the bit while the twin holds 1 (int8) or 1/2 (int4) byte per
weight. The float weight lives only while the forward uses it (autocast then casts it to
the compute dtype, as it casts a float parameter). Ties stay tied: a tied head reads the
embedding's ``weight``, so it reads the same integers.

The integers are frozen (buffers, not parameters): a quantized model is served, or trained
through LoRA over it. ``nn.RNN``/``nn.LSTM``/``nn.GRU`` read their weights through a list made
when they are built, not through the attribute: their matrices stay float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from zoo.checkpoint.quantized import SCALE, Scheme

PARAMETRIZED = ".parametrizations."  # where torch keeps a parametrized tensor in a state dict


class Dequantized(nn.Module):
    """The float32 weight of ``shape`` that integers stand for, made from them when it is read."""

    def __init__(self, scale: torch.Tensor, shape: tuple[int, ...], scheme: Scheme) -> None:
        super().__init__()
        self.register_buffer("scale", scale)
        self.shape, self.group_size = tuple(shape), scheme.group_size
        self.dtype = torch.float32  # the weight's, which a "-true" precision's ``model.to`` changes

    def _apply(self, fn, recurse=True):
        """``model.to(dtype)`` (Lightning's bf16-true, 64-true) changes the weight's dtype, not the
        scales': the weight is made in float32, then rounded once, as the float weight was."""
        probe = fn(torch.zeros((), dtype=torch.float32, device=self.scale.device))
        self.dtype = probe.dtype
        self.scale = self.scale.to(probe.device)
        return self

    def forward(self, integers: torch.Tensor) -> torch.Tensor:
        rows, columns = self.shape[0], math.prod(self.shape[1:])
        values = integers.reshape(rows, columns) if self.group_size is None else unpack(integers, columns)
        groups = self.scale.shape[1]
        size = self.group_size or columns
        if groups * size != columns:  # the last group is shorter: padded as the quantizer pads it
            values = nn.functional.pad(values, (0, groups * size - columns))
        # converted, then scaled in place: the same float32 products as ``int8 * float32``'s
        # promotion, faster on one quiet run (a (3072, 768) matrix: 1.3 ms against 3.2-7.2 ms;
        # gpt2's embedding: 60 ms against 99 ms)
        weight = values.float().reshape(rows, groups, size).mul_(self.scale[:, :, None])
        return weight.reshape(rows, groups * size)[:, :columns].reshape(self.shape).to(self.dtype)


def unpack(packed: torch.Tensor, columns: int) -> torch.Tensor:
    """int4 bytes (low nibble first, two's complement) as (rows, columns) int8: each byte read as
    int8 and shifted, the arithmetic right shift extending the sign (gpt2's embedding: 38 ms;
    in int32 arithmetic 713 ms, which the ONNX export takes: onnxruntime has no signed shift)."""
    if torch.onnx.is_in_onnx_export():
        wide = packed.to(torch.int32)
        nibbles = torch.stack([wide % 16, wide // 16], dim=2).reshape(packed.shape[0], -1)[:, :columns]
        return torch.where(nibbles > 7, nibbles - 16, nibbles).to(torch.int8)
    signed = packed.view(torch.int8)
    nibbles = torch.stack([(signed << 4) >> 4, signed >> 4], dim=2)
    return nibbles.reshape(packed.shape[0], -1)[:, :columns]


def hold_integers(model: nn.Module, stored: Mapping[str, np.ndarray], scheme: Scheme) -> list[str]:
    """Replace each weight of ``model`` that ``stored`` (a quantized checkpoint's tensors as
    stored) holds as integers and scales by those integers; returns the names now held so."""
    held = []
    for name in stored:
        if not name.endswith(SCALE) or (weight := name.removesuffix(SCALE)) not in stored:
            continue
        path, _, attribute = weight.rpartition(".")
        module = model.get_submodule(path)
        if isinstance(module, nn.RNNBase):  # reads its flat weight list, not the attribute
            continue
        shape = tuple(getattr(module, attribute).shape)
        delattr(module, attribute)
        module.register_buffer(attribute, torch.from_numpy(np.array(stored[weight])))
        scale = Dequantized(torch.from_numpy(np.array(stored[name])), shape, scheme)
        parametrize.register_parametrization(module, attribute, scale, unsafe=True)
        held.append(weight)
    return held


def canonical_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` (``model.state_dict()``) with each weight held as integers under its own name, as
    the float32 weight it stands for (what a checkpoint of the twin holds)."""
    canonical = {}
    for key, value in state.items():
        if PARAMETRIZED not in f".{key}":
            canonical[key] = value
        elif key.endswith(".original"):
            path, _, rest = f".{key}".partition(PARAMETRIZED)
            attribute = rest.removesuffix(".original")
            module = model.get_submodule(path[1:])
            canonical[f"{path[1:]}.{attribute}".lstrip(".")] = getattr(module, attribute).detach()
    return canonical


def held_bytes(model: nn.Module) -> int:
    """Bytes of the tensors ``model`` holds (parameters and buffers, each storage once)."""
    seen = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return sum(seen.values())
