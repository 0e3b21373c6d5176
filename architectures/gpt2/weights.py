"""The GPT-2 weight table: torch ``state_dict`` names <-> Keras variables, in ``state_dict`` order.

The language-model head has no row: it is the token embedding ``wte`` itself, in both twins,
so the common checkpoint holds that matrix once and the parameter count counts it once.
"""

from __future__ import annotations

from architectures.gpt2.config import GPT2Config
from zoo.checkpoint.tables import Port, embedding, layernorm
from zoo.nn.ports import mlp, self_attention


def table(cfg: GPT2Config) -> list[Port]:
    d = cfg.n_embd
    ports = [embedding("wte", cfg.vocab_size, d), embedding("wpe", cfg.n_positions, d)]
    for i in range(cfg.n_layer):
        ports += [
            layernorm(f"h.{i}.ln_1", d),
            self_attention(f"h.{i}.attn", d),
            layernorm(f"h.{i}.ln_2", d),
            *mlp(f"h.{i}.mlp", d, cfg.inner),
        ]
    return [*ports, layernorm("ln_f", d)]
