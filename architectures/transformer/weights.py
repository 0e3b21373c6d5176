"""The transformer weight table: torch ``state_dict`` names <-> Keras variables, layer by layer."""

from __future__ import annotations

from architectures.transformer.config import TransformerConfig
from zoo.checkpoint.tables import Port, dense, embedding, layernorm
from zoo.nn.ports import self_attention


def _block(name: str, cfg: TransformerConfig) -> list[Port]:
    d = cfg.d_model
    return [
        layernorm(f"{name}.norm1", d),
        self_attention(f"{name}.attn", d),
        layernorm(f"{name}.norm2", d),
        dense(f"{name}.ff1", d, cfg.ff_dim),
        dense(f"{name}.ff2", cfg.ff_dim, d),
    ]


def table(cfg: TransformerConfig) -> list[Port]:
    d = cfg.d_model
    # Token ids index an Embedding; feature vectors go through a Linear.
    embed = embedding("embed", cfg.vocab_size, d) if cfg.causal else dense("embed", cfg.input_size, d)
    ports = [embed]
    if cfg.positions == "learned":
        ports.append(embedding("pos_embed", cfg.max_len, d))
    for i in range(cfg.num_layers):
        ports += _block(f"blocks.{i}", cfg)
    if cfg.norm_first:
        ports.append(layernorm("norm", d))
    ports.append(dense("head", d, cfg.outputs))
    return ports
