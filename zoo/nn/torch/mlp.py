"""The transformer feed-forward block (``fc1 -> act -> drop1 -> fc2 -> drop2``), written once.

ViT (timm's ``Mlp``), BERT's intermediate/output pair and GPT-2's ``c_fc``/``c_proj`` are all
this block; only the activation and where dropout sits differ, and those are arguments here.
The tensors are two ``nn.Linear`` (``fc1``, ``fc2``), so a timm ``Mlp`` state dict loads
unchanged; ``zoo.nn.keras.Mlp`` is the Keras twin and :func:`zoo.nn.ports.mlp` its weight port.
"""

from __future__ import annotations

import torch
from torch import nn

# The activations the Keras twin computes identically (exact GELU, tanh-approximated GELU as
# GPT-2's "gelu_new", ReLU); nn.GELU() is the exact erf form.
ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
    "silu": lambda: nn.SiLU(),
}


class Mlp(nn.Module):
    """(..., in_features) -> (..., out_features) through ``hidden_features`` units.

    ``hidden_dropout`` drops the activated hidden units (timm's ``drop1``), ``output_dropout``
    the block's output (timm's ``drop2``, GPT-2's residual dropout); timm's ViT uses its
    ``proj_drop_rate`` for both. Initialised as ``nn.Linear`` is: families that initialise
    otherwise (timm's truncated normal) re-initialise ``fc1``/``fc2`` themselves.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        activation: str = "gelu",
        hidden_dropout: float = 0.0,
        output_dropout: float = 0.0,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of: {', '.join(ACTIVATIONS)}")
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = ACTIVATIONS[activation]()
        self.drop1 = nn.Dropout(hidden_dropout)
        self.fc2 = nn.Linear(hidden_features, out_features or in_features)
        self.drop2 = nn.Dropout(output_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class GatedMlp(nn.Module):
    """The gated feed-forward block of Llama-class models (SwiGLU with ``silu``):
    ``down_proj(act(gate_proj(x)) * up_proj(x))``, transformers' ``LlamaMLP`` under its names
    (``gate_proj``, ``up_proj``, ``down_proj``; biases on all three with ``bias``, Llama's
    ``mlp_bias``). No dropout: transformers' has none. Initialised as ``nn.Linear`` is."""

    def __init__(
        self, hidden_size: int, intermediate_size: int, activation: str = "silu", bias: bool = False
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of: {', '.join(ACTIVATIONS)}")
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
