"""The BERT weight table: torch ``state_dict`` names <-> Keras variables, in ``state_dict`` order.

The masked-LM head has no decoder matrix of its own: it decodes with
``embeddings.word.weight`` (the tie is one tensor), and holds only its bias, dense layer and
LayerNorm.
"""

from __future__ import annotations

import numpy as np

from architectures.bert.config import BertConfig
from zoo.checkpoint.tables import Arrays, Port, TensorSpec, dense, embedding, layernorm
from zoo.nn.ports import mlp, self_attention


def _same(*arrays: np.ndarray) -> Arrays:
    return tuple(arrays)


def classification_head(name: str, in_features: int, num_classes: int) -> list[Port]:
    """``zoo.nn.{torch,keras}.heads.ClassificationHead``: its ``classifier``."""
    return [dense(f"{name}.classifier", in_features, num_classes)]


def masked_lm_head(name: str, hidden_size: int, vocab_size: int) -> list[Port]:
    """``zoo.nn.{torch,keras}.heads.MaskedLMHead``: the decoder bias (the module's own parameter,
    first in its ``state_dict``), the transform's dense layer and LayerNorm."""
    bias = Port((TensorSpec(f"{name}.bias", (vocab_size,)),), name, ("bias",), _same, _same)
    return [bias, dense(f"{name}.dense", hidden_size, hidden_size), layernorm(f"{name}.norm", hidden_size)]


def _block(name: str, cfg: BertConfig) -> list[Port]:
    h = cfg.hidden_size
    return [
        self_attention(f"{name}.attn", h),
        layernorm(f"{name}.norm1", h),
        *mlp(f"{name}.mlp", h, cfg.intermediate_size),
        layernorm(f"{name}.norm2", h),
    ]


def table(cfg: BertConfig) -> list[Port]:
    h = cfg.hidden_size
    ports = [
        embedding("embeddings.word", cfg.vocab_size, h),
        embedding("embeddings.position", cfg.max_len, h),
        embedding("embeddings.token_type", cfg.type_vocab_size, h),
        layernorm("embeddings.norm", h),
    ]
    for i in range(cfg.num_layers):
        ports += _block(f"blocks.{i}", cfg)
    if cfg.has_pooler:
        ports.append(dense("pooler", h, h))
    if cfg.task in ("classification", "token_classification"):
        ports += classification_head("head", h, cfg.num_classes)
    elif cfg.task == "masked_language_modeling":
        ports += masked_lm_head("head", h, cfg.vocab_size)
    return ports
