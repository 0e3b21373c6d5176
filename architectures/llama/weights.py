"""The Llama weight table: torch ``state_dict`` names <-> Keras variables, in ``state_dict`` order.

The torch names are transformers' ``LlamaModel`` names (``layers.N.self_attn.q_proj.weight``),
so the common checkpoint reads as that model's state dict. The Keras twin holds its decoder
layers as ``blocks`` (a Keras model's ``layers`` attribute is Keras' own list of sub-layers).
A tied head has no row: it is ``embed_tokens`` itself, in both twins; an untied one is
``lm_head`` (no bias). The features task (``LlamaModel``) has no head. A mixture-of-experts
layer holds its router and experts where a dense layer holds its MLP.
"""

from __future__ import annotations

from architectures.llama.config import LlamaConfig
from zoo.checkpoint.tables import Port, dense, embedding, rmsnorm
from zoo.nn.ports import gated_mlp, grouped_query_attention


def table(cfg: LlamaConfig) -> list[Port]:
    d = cfg.hidden_size
    ports = [embedding("embed_tokens", cfg.vocab_size, d)]
    for i, moe in enumerate(cfg.moe_layers):
        name, layer = f"layers.{i}", f"blocks.{i}"
        ports += [
            rmsnorm(f"{name}.input_layernorm", d, layer=f"{layer}.input_layernorm"),
            *grouped_query_attention(
                f"{name}.self_attn",
                d,
                cfg.num_attention_heads,
                cfg.key_value_heads,
                cfg.attention_head_dim,
                qkv_bias=cfg.qkv_bias,
                out_bias=cfg.output_bias,
                layer=f"{layer}.self_attn",
            ),
            *(
                rmsnorm(f"{name}.self_attn.{part}", cfg.attention_head_dim, layer=f"{layer}.self_attn.{part}")
                for part in (("q_norm", "k_norm") if cfg.qk_norm else ())
            ),
            rmsnorm(f"{name}.post_attention_layernorm", d, layer=f"{layer}.post_attention_layernorm"),
            *(_experts(cfg, name, layer) if moe else gated_mlp(
                f"{name}.mlp", d, cfg.intermediate_size, bias=cfg.mlp_bias, layer=f"{layer}.mlp"
            )),
        ]  # fmt: skip
    ports.append(rmsnorm("norm", d))
    if cfg.active_task == "language_modeling" and not cfg.tie_word_embeddings:
        ports.append(dense("lm_head", d, cfg.vocab_size, bias=False))
    return ports


def _experts(cfg: LlamaConfig, name: str, layer: str) -> list[Port]:
    """A mixture-of-experts layer: the router ``mlp.gate`` (num_local_experts x hidden, no bias), then
    each expert's gated MLP, ``mlp.experts.E`` (transformers' Qwen3-MoE names; Mixtral's are
    renamed by the hf format)."""
    d = cfg.hidden_size
    ports = [dense(f"{name}.mlp.gate", d, cfg.num_local_experts, bias=False, layer=f"{layer}.mlp.gate")]
    for e in range(cfg.num_local_experts):
        ports += gated_mlp(f"{name}.mlp.experts.{e}", d, cfg.expert_size, layer=f"{layer}.mlp.experts.{e}")
    return ports
