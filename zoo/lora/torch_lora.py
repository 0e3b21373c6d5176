"""LoRA on the torch twin: adapters beside a frozen base, added as PEFT adds them.

The adapters live in one module, ``model.lora``, so Lightning's optimizer, state (resume) and
device moves see them; the base's own modules and parameter names are untouched. A Linear
point adds its adapter through a forward hook; a fused q/k/v projection through the attention
module's ``in_proj_delta``, one adapter per row block.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from zoo.checkpoint.tensors import model_tensors
from zoo.lora.adapter import BIAS, A, Adapter, B, EmbeddingPoint, key
from zoo.recipe.lora_targets import FUSED


class LowRank(nn.Module):
    """``scale * B(A(dropout(x)))``: PEFT's ``lora_B(lora_A(dropout(x))) * scaling``, B with
    its bias under PEFT's ``lora_bias``."""

    def __init__(
        self, in_features: int, out_features: int, rank: int, scale: float, dropout: float, bias: bool = False
    ):
        super().__init__()
        self.lora_A = nn.Parameter(torch.zeros(rank, in_features))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank))
        self.lora_bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.scale = scale
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(self.dropout(x), self.lora_A), self.lora_B, self.lora_bias) * self.scale


class EmbeddingLowRank(LowRank):
    """PEFT's ``Embedding`` LoRA: ``(embedding(ids, A.T) @ B.T) * scaling`` (no dropout)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return (F.embedding(ids, self.lora_A.T) @ self.lora_B.T) * self.scale


class Adapters(nn.Module):
    def __init__(self, adapter: Adapter):
        super().__init__()
        self.adapters = nn.ModuleDict(
            {
                key(p.name): (EmbeddingLowRank if isinstance(p, EmbeddingPoint) else LowRank)(
                    p.in_features,
                    p.out_features,
                    adapter.ranks[p.name],
                    adapter.scales[p.name],
                    0.0 if isinstance(p, EmbeddingPoint) else adapter.dropout,
                    adapter.biased(p),
                )
                for p in adapter.points
            }
        )


class FusedDelta:
    """The q/k/v adapters of one fused projection, as one (N, T, 3E) addition (zeros where a
    block has no adapter). A plain callable, not a module: the adapters are ``model.lora``'s."""

    def __init__(self, parts: dict[str, LowRank], embed: int):
        self.parts, self.embed = parts, embed

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        outputs = {name: module(x) for name, module in self.parts.items()}
        like = next(iter(outputs.values()))
        return torch.cat([outputs.get(name, torch.zeros_like(like)) for name in FUSED], dim=-1)


def _add_output(adapter: LowRank):
    def hook(module, args, output):
        return output + adapter(args[0])

    return hook


def attach(model: nn.Module, adapter: Adapter, tensors: dict[str, np.ndarray], bias_names: list[str]) -> None:
    """Freeze ``model``'s base, attach the adapters holding ``tensors`` (A and B by point name),
    and let ``bias_names`` (canonical names) train with them."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    model.lora = Adapters(adapter)
    fused: dict[str, dict[str, LowRank]] = {}
    for point in adapter.points:
        module = model.lora.adapters[key(point.name)]
        with torch.no_grad():
            module.lora_A.copy_(torch.from_numpy(np.asarray(tensors[f"{point.name}.{A}"])))
            module.lora_B.copy_(torch.from_numpy(np.asarray(tensors[f"{point.name}.{B}"])))
            if module.lora_bias is not None:
                module.lora_bias.copy_(torch.from_numpy(np.asarray(tensors[f"{point.name}.{BIAS}"])))
        if point.fused:
            fused.setdefault(point.module, {})[point.name.rsplit(".", 1)[1]] = module
        else:
            model.get_submodule(point.module).register_forward_hook(_add_output(module))
    for name, parts in fused.items():
        attention = model.get_submodule(name)
        attention.in_proj_delta = FusedDelta(parts, attention.embed_dim)
    named = dict(model.named_parameters())
    for name in bias_names:
        named[name].requires_grad_(True)


def adapter_tensors(model: nn.Module, adapter: Adapter, bias_names: list[str]) -> dict[str, np.ndarray]:
    """The adapter's A and B by point name, and the trained biases by their canonical names."""
    out = {}
    for point in adapter.points:
        module = model.lora.adapters[key(point.name)]
        out[f"{point.name}.{A}"] = module.lora_A.detach().float().cpu().numpy().copy()
        out[f"{point.name}.{B}"] = module.lora_B.detach().float().cpu().numpy().copy()
        if module.lora_bias is not None:
            out[f"{point.name}.{BIAS}"] = module.lora_bias.detach().float().cpu().numpy().copy()
    named = dict(model.named_parameters())
    for name in bias_names:
        out[name] = named[name].detach().float().cpu().numpy().copy()
    return out


def base_tensors(model: nn.Module) -> dict[str, np.ndarray]:
    """The base's canonical tensors (everything but ``model.lora``)."""
    return {k: v for k, v in model_tensors(model).items() if not k.startswith("lora.")}
