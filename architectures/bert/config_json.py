"""transformers' BERT ``config.json``, read and written: what each field means to zoo's config.

Reading: ``config_fields`` takes the sizes from the tensors' shapes and checks ``config.json``
against them; the fields no shape shows (the head count, dropouts, norm epsilon...) come from
``config.json``, or, where a file leaves one out, from transformers' ``BertConfig`` default
(``HF_DEFAULTS``, which ``architectures.bert.formats.from_hf`` fills in). A field that asks for
something zoo's BERT does not compute (another activation, relative positions, a decoder) is
refused naming it. The head count, which no shape shows, comes from ``num_attention_heads``,
else from ``zoo import --num-heads`` (never guessed: MiniLM is 384 wide with 12 heads, not 6).

Writing: ``hf_config`` is the ``config.json`` ``from_pretrained`` reads for a zoo config;
``exported_config`` adds back the fields of an imported ``config.json`` that zoo's config does
not model (label names, token ids, the tokenizer class...) as they were read, and a
classifier's label names as ``id2label``/``label2id``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.bert.config import HF_CLASSES, BertConfig
from zoo.checkpoint.foreign import ForeignLayoutError, head_count, with_source
from zoo.preprocessing import Preprocessing

# config.json fields that must have these values, because zoo's BERT computes only this.
_REQUIRED = {
    "hidden_act": "gelu",
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "model_type": "bert",
}
# config.json fields the tensors' shapes also show.
_SHAPE_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_len",
    "type_vocab_size": "type_vocab_size",
}
# config.json fields that only config.json shows (transformers' defaults when it is missing).
_META_FIELDS = {
    "num_attention_heads": "num_heads",
    "layer_norm_eps": "layer_norm_eps",
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "classifier_dropout": "classifier_dropout",
    "pad_token_id": "pad_token_id",
    "initializer_range": "initializer_range",
}
# What transformers' BertConfig (5.23) takes where a config.json leaves a field out, for every
# field zoo reads from it that no tensor shape shows (tests/test_hf_defaults.py checks each value
# against the class). Weights with no config.json at all take none: nothing says they are BertConfig's.
HF_DEFAULTS = {
    "num_attention_heads": 12, "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1, "classifier_dropout": None, "pad_token_id": 0,
    "initializer_range": 0.02, "hidden_act": "gelu",
    "is_decoder": False, "add_cross_attention": False, "tie_word_embeddings": True,
}  # fmt: skip
# config.json fields zoo's config decides (the rest of an imported one is written back as read);
# the label names too, where the class count is no longer theirs.
MODELLED = ("architectures", "model_type", *_SHAPE_FIELDS, *_META_FIELDS, "dtype", "torch_dtype")
_LABELS = ("id2label", "label2id")


def config_fields(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], prefix: str, task: str, num_heads: int | None
) -> dict[str, Any]:
    """zoo's config fields for transformers BERT ``tensors`` of ``task`` (keys under ``prefix``)
    and their ``config.json`` (``meta``, its defaults filled in): the shapes decide the sizes,
    ``config.json`` the rest, and a disagreement between the two, or a field zoo's BERT does not
    compute, is refused by name."""
    for key, value in _REQUIRED.items():
        if key in meta and meta[key] != value:
            raise ForeignLayoutError(
                f"config.json's {key} is {meta[key]!r}: zoo's bert computes {key}={value!r} only "
                "(transformers' BERT with exact GELU, absolute positions, as an encoder)"
            )
    word = np.shape(tensors[f"{prefix}embeddings.word_embeddings.weight"])
    layers = sorted(
        {
            int(m.group(1))
            for key in tensors
            if (m := re.match(rf"{re.escape(prefix)}encoder\.layer\.(\d+)\.", key))
        }
    )
    if not layers or layers != list(range(len(layers))):
        raise ForeignLayoutError(f"transformers BERT layers are not numbered 0..N-1: found {layers}")
    shape = lambda key: np.shape(tensors.get(prefix + key, np.zeros((0, 0))))  # noqa: E731
    fields: dict[str, Any] = {
        "task": task,
        "vocab_size": int(word[0]),
        "hidden_size": int(word[1]),
        "num_layers": len(layers),
        "intermediate_size": int(shape("encoder.layer.0.intermediate.dense.weight")[0]),
        "max_len": int(shape("embeddings.position_embeddings.weight")[0]),
        "type_vocab_size": int(shape("embeddings.token_type_embeddings.weight")[0]),
    }
    if task == "features" and f"{prefix}pooler.dense.weight" not in tensors:
        fields["pooler"] = False  # BertModel(add_pooling_layer=False)
    if task in ("classification", "token_classification"):
        fields["num_classes"] = (
            int(np.shape(tensors["classifier.weight"])[0]) if "classifier.weight" in tensors else 2
        )
    disagree = [
        f"{key} is {meta[key]!r}, the tensors say {fields[field]!r}"
        for key, field in _SHAPE_FIELDS.items()
        if key in meta and meta[key] != fields[field]
    ]
    labels = meta.get("id2label")
    if labels and "num_classes" in fields and len(labels) != fields["num_classes"]:
        disagree.append(f"id2label has {len(labels)} labels, the classifier {fields['num_classes']} rows")
    if disagree:
        raise ForeignLayoutError(f"config.json and the weights disagree: {'; '.join(disagree)}")
    for key, field in _META_FIELDS.items():
        if key in meta:
            fields[field] = meta[key]
    fields["num_heads"] = head_count(
        meta.get("num_attention_heads"), "num_attention_heads", num_heads, fields["hidden_size"], "BERT",
        "transformers' config.json",
    )  # fmt: skip
    return fields


def hf_config(cfg: BertConfig, labels: tuple[str, ...] | None = None) -> dict[str, Any]:
    """transformers' ``config.json`` for a model of ``cfg`` (``BertConfig``'s fields)."""
    config: dict[str, Any] = {
        "architectures": [HF_CLASSES[cfg.task]],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "classifier_dropout": cfg.classifier_dropout,
        "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size,
        "layer_norm_eps": cfg.layer_norm_eps,
        "initializer_range": cfg.initializer_range,
        "pad_token_id": cfg.pad_token_id,
        "is_decoder": False,
        "add_cross_attention": False,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }
    if cfg.task in ("classification", "token_classification"):
        names = labels or [f"LABEL_{i}" for i in range(cfg.num_classes)]
        config["id2label"] = {str(i): name for i, name in enumerate(names)}
        config["label2id"] = {name: i for i, name in enumerate(names)}
    return config


def exported_config(
    cfg: BertConfig, source: Mapping[str, Any] | None, preprocessing: Preprocessing | None
) -> dict[str, Any]:
    """The ``config.json`` an export writes: ``hf_config`` with what ``source`` (the one imported)
    says and zoo's config does not model, and the label names ``preprocessing`` records (the
    source's own label names stay only while its class count is still the model's)."""
    labels = (source or {}).get("id2label") or {}
    named = preprocessing.labels if preprocessing is not None else None
    relabelled = cfg.task in ("classification", "token_classification") and (
        named is not None or len(labels) != cfg.num_classes
    )
    return with_source(hf_config(cfg, named), source, MODELLED + (_LABELS if relabelled else ()))
