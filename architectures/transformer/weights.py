"""The transformer weight table: torch ``state_dict`` names <-> Keras variables, layer by layer."""

from __future__ import annotations

import numpy as np

from architectures.transformer.config import TransformerConfig
from zoo.weights import Arrays, Port, TensorSpec, dense, embedding, layernorm

MHA_VARIABLES = (
    "_query_dense.kernel",
    "_key_dense.kernel",
    "_value_dense.kernel",
    "_query_dense.bias",
    "_key_dense.bias",
    "_value_dense.bias",
    "_output_dense.kernel",
    "_output_dense.bias",
)


def multihead_attention(name: str, embed_dim: int, num_heads: int) -> Port:
    """``nn.MultiheadAttention`` <-> ``keras.layers.MultiHeadAttention`` (self-attention, biases on).

    torch packs the query, key and value projections into one (3E, E) ``in_proj_weight``
    that multiplies from the left; Keras keeps three einsum kernels (E, heads, head_dim)
    that multiply from the right, and an output kernel (heads, head_dim, E). Heads are
    consecutive blocks of ``head_dim`` rows in both, so a transpose and reshape suffice.
    """
    e, h = embed_dim, num_heads
    d = e // h
    tensors = (
        TensorSpec(f"{name}.in_proj_weight", (3 * e, e)),
        TensorSpec(f"{name}.in_proj_bias", (3 * e,)),
        TensorSpec(f"{name}.out_proj.weight", (e, e)),
        TensorSpec(f"{name}.out_proj.bias", (e,)),
    )

    def to_keras(in_weight: np.ndarray, in_bias: np.ndarray, out_weight: np.ndarray, out_bias: np.ndarray):
        kernels = tuple(w.T.reshape(e, h, d) for w in in_weight.reshape(3, e, e))
        biases = tuple(b.reshape(h, d) for b in in_bias.reshape(3, e))
        return (*kernels, *biases, out_weight.T.reshape(h, d, e), out_bias)

    def to_torch(*variables: np.ndarray) -> Arrays:
        kernels, biases, (out_kernel, out_bias) = variables[:3], variables[3:6], variables[6:]
        in_weight = np.concatenate([k.reshape(e, e).T for k in kernels])
        in_bias = np.concatenate([b.reshape(e) for b in biases])
        return in_weight, in_bias, out_kernel.reshape(e, e).T, out_bias

    return Port(tensors, name, MHA_VARIABLES, to_keras, to_torch)


def _block(name: str, cfg: TransformerConfig) -> list[Port]:
    d = cfg.d_model
    return [
        layernorm(f"{name}.norm1", d),
        multihead_attention(f"{name}.attn", d, cfg.num_heads),
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
