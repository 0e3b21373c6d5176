"""Weight ports of the shared building blocks: torch tensors <-> Keras variables, pure numpy."""

from __future__ import annotations

import numpy as np

from zoo.checkpoint.tables import Arrays, Port, TensorSpec, dense

SELF_ATTENTION_VARIABLES = ("in_proj_kernel", "in_proj_bias", "out_proj.kernel", "out_proj.bias")


def self_attention(name: str, embed_dim: int) -> Port:
    """``zoo.nn.torch.SelfAttention`` <-> ``zoo.nn.keras.SelfAttention``.

    The torch tensors are ``nn.MultiheadAttention``'s (so its checkpoints load unchanged):
    a fused (3E, E) query/key/value projection that multiplies from the left, its (3E,)
    bias, and the output Linear. The Keras layer keeps the same fused projection as an
    (E, 3E) kernel that multiplies from the right: every matrix is a transpose, every
    bias the same vector.
    """
    e = embed_dim
    tensors = (
        TensorSpec(f"{name}.in_proj_weight", (3 * e, e)),
        TensorSpec(f"{name}.in_proj_bias", (3 * e,)),
        TensorSpec(f"{name}.out_proj.weight", (e, e)),
        TensorSpec(f"{name}.out_proj.bias", (e,)),
    )

    layouts = ((1, 0), None, (1, 0), None)
    return Port(tensors, name, SELF_ATTENTION_VARIABLES, _transpose_matrices, _transpose_matrices, layouts)


def _transpose_matrices(
    in_matrix: np.ndarray, in_bias: np.ndarray, out_matrix: np.ndarray, out_bias: np.ndarray
) -> Arrays:
    """Either direction: torch's (out, in) weights are the transposed (in, out) kernels."""
    return in_matrix.T, in_bias, out_matrix.T, out_bias


def mlp(name: str, in_features: int, hidden_features: int, out_features: int | None = None) -> list[Port]:
    """``zoo.nn.torch.Mlp`` <-> ``zoo.nn.keras.Mlp``: its two dense layers, ``fc1`` and ``fc2``."""
    return [
        dense(f"{name}.fc1", in_features, hidden_features),
        dense(f"{name}.fc2", hidden_features, out_features or in_features),
    ]


def grouped_query_attention(
    name: str,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    qkv_bias: bool = False,
    out_bias: bool = False,
    layer: str | None = None,
) -> list[Port]:
    """``zoo.nn.torch.GroupedQueryAttention`` <-> ``zoo.nn.keras.GroupedQueryAttention``: four
    dense layers, ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj``."""
    layer = layer or name
    query, key_value = num_heads * head_dim, num_kv_heads * head_dim
    shapes = {"q_proj": (hidden_size, query), "k_proj": (hidden_size, key_value)}
    shapes |= {"v_proj": (hidden_size, key_value), "o_proj": (query, hidden_size)}
    return [
        dense(
            f"{name}.{part}", *shape, bias=out_bias if part == "o_proj" else qkv_bias, layer=f"{layer}.{part}"
        )
        for part, shape in shapes.items()
    ]


def gated_mlp(
    name: str, hidden_size: int, intermediate_size: int, *, bias: bool = False, layer: str | None = None
) -> list[Port]:
    """``zoo.nn.torch.GatedMlp`` <-> ``zoo.nn.keras.GatedMlp``: ``gate_proj``, ``up_proj``, ``down_proj``."""
    layer = layer or name
    shapes = {
        "gate_proj": (hidden_size, intermediate_size),
        "up_proj": (hidden_size, intermediate_size),
        "down_proj": (intermediate_size, hidden_size),
    }
    return [
        dense(f"{name}.{part}", *shape, bias=bias, layer=f"{layer}.{part}") for part, shape in shapes.items()
    ]
