"""The Gemma weight table: torch ``state_dict`` names <-> Keras variables, in ``state_dict`` order.

The torch names are transformers' ``Gemma3TextModel`` / ``Gemma2Model`` names, so the common
checkpoint reads as that model's state dict. The norms' weights are stored as transformers
stores them, the offset from a scale of one. A tied head has no row; an untied one is
``lm_head``.
"""

from __future__ import annotations

from architectures.gemma.config import GemmaConfig
from zoo.checkpoint.tables import Port, dense, embedding, rmsnorm
from zoo.nn.ports import gated_mlp, grouped_query_attention

NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)


def table(cfg: GemmaConfig) -> list[Port]:
    d, head_dim = cfg.hidden_size, cfg.head_dim
    ports = [embedding("embed_tokens", cfg.vocab_size, d)]
    for i in range(cfg.num_hidden_layers):
        name, layer = f"layers.{i}", f"blocks.{i}"
        attention = grouped_query_attention(
            f"{name}.self_attn", d, cfg.num_attention_heads, cfg.num_key_value_heads, head_dim,
            qkv_bias=cfg.attention_bias, out_bias=cfg.attention_bias, layer=f"{layer}.self_attn",
        )  # fmt: skip
        qk_norms = [
            rmsnorm(f"{name}.self_attn.{part}", head_dim, layer=f"{layer}.self_attn.{part}")
            for part in (("q_norm", "k_norm") if cfg.qk_norm else ())
        ]
        norms = {norm: rmsnorm(f"{name}.{norm}", d, layer=f"{layer}.{norm}") for norm in NORMS}
        ports += [
            norms["input_layernorm"],
            *attention,
            *qk_norms,
            norms["post_attention_layernorm"],
            norms["pre_feedforward_layernorm"],
            *gated_mlp(f"{name}.mlp", d, cfg.intermediate_size, layer=f"{layer}.mlp"),
            norms["post_feedforward_layernorm"],
        ]
    ports.append(rmsnorm("norm", d))
    if cfg.active_task == "language_modeling" and not cfg.tie_word_embeddings:
        ports.append(dense("lm_head", d, cfg.vocab_size, bias=False))
    return ports
