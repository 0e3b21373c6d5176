"""transformers' BERT state dicts <-> zoo's canonical tensors (the ``config.json`` beside them is
read and written by ``architectures.bert.config_json``).

Names (transformers' on the left, inside ``bert.`` for the ``BertFor*`` heads; a bare
``BertModel``, as sentence-transformers saves it, has no prefix)::

    embeddings.{word,position,token_type}_embeddings   <-> embeddings.{word,position,token_type}
    embeddings.LayerNorm                               <-> embeddings.norm
    encoder.layer.N.attention.self.{query,key,value}   <-> blocks.N.attn.in_proj_{weight,bias} (stacked)
    encoder.layer.N.attention.output.dense             <-> blocks.N.attn.out_proj
    encoder.layer.N.attention.output.LayerNorm         <-> blocks.N.norm1
    encoder.layer.N.intermediate.dense                 <-> blocks.N.mlp.fc1
    encoder.layer.N.output.dense                       <-> blocks.N.mlp.fc2
    encoder.layer.N.output.LayerNorm                   <-> blocks.N.norm2
    pooler.dense                                       <-> pooler
    classifier (sequence and token classification)     <-> head.classifier
    cls.predictions.bias                               <-> head.bias
    cls.predictions.transform.{dense,LayerNorm}        <-> head.{dense,norm}

Reading. The task is the class ``config.json``'s ``architectures`` names (``BertModel``:
features; ``BertForSequenceClassification``, ``BertForTokenClassification``,
``BertForMaskedLM`` or ``BertForPreTraining``: its head), or, without one, the head
tensors present. What real files carry besides is handled as transformers does: the
LayerNorm ``gamma``/``beta`` of older files are its ``weight``/``bias``; the
``position_ids``/``token_type_ids`` buffers are skipped; the tied
``cls.predictions.decoder.weight`` is dropped when it equals the word embedding (and
refused when it differs: zoo's decoder is the embedding), ``cls.predictions.decoder.bias``
when it equals ``cls.predictions.bias``; the pooler and the next-sentence head
(``cls.seq_relationship``) that a ``BertForPreTraining`` file (bert-base-uncased) holds are
left out of the heads that transformers builds without them, with a warning naming them.
The config comes from the shapes, checked against ``config.json`` (its left-out fields at
transformers' defaults), and the tensors' shapes are checked against the weight table of it.

Writing: the names above for the task's class, and the ``config.json`` its
``from_pretrained`` reads; the tied decoder is written once, as the word embedding, and
transformers re-ties it on load (``tie_word_embeddings``). A classifier's label names are the
checkpoint's own (its preprocessing record: ``id2label`` at import, the data's class names when
zoo trained it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.bert.config import HF_CLASSES, BertConfig
from architectures.bert.config_json import HF_DEFAULTS, config_fields, exported_config
from architectures.bert.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, renamed
from zoo.checkpoint.tables import tensor_specs
from zoo.preprocessing import Preprocessing, label_names

log = logging.getLogger("zoo")

_TASKS = {cls: task for task, cls in HF_CLASSES.items()} | {"BertForPreTraining": "masked_language_modeling"}
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_QKV = ("query", "key", "value")


def _backbone_names(cfg: BertConfig) -> dict[str, str]:
    """zoo's canonical name -> transformers' (inside ``bert.``), every backbone tensor but
    the stacked attention projection."""
    names = {
        "embeddings.word.weight": "embeddings.word_embeddings.weight",
        "embeddings.position.weight": "embeddings.position_embeddings.weight",
        "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
    }
    pairs = [("embeddings.norm", "embeddings.LayerNorm")]
    for i in range(cfg.num_layers):
        ours, theirs = f"blocks.{i}", f"encoder.layer.{i}"
        pairs += [
            (f"{ours}.attn.out_proj", f"{theirs}.attention.output.dense"),
            (f"{ours}.norm1", f"{theirs}.attention.output.LayerNorm"),
            (f"{ours}.mlp.fc1", f"{theirs}.intermediate.dense"),
            (f"{ours}.mlp.fc2", f"{theirs}.output.dense"),
            (f"{ours}.norm2", f"{theirs}.output.LayerNorm"),
        ]
    if cfg.has_pooler:
        pairs.append(("pooler", "pooler.dense"))
    for ours, theirs in pairs:
        names.update({f"{ours}.{p}": f"{theirs}.{p}" for p in ("weight", "bias")})
    return names


def _head_names(cfg: BertConfig) -> dict[str, str]:
    """zoo's name -> transformers' (at the top level, beside ``bert.``) for the head."""
    if cfg.task in ("classification", "token_classification"):
        return {"head.classifier.weight": "classifier.weight", "head.classifier.bias": "classifier.bias"}
    if cfg.task == "masked_language_modeling":
        names = {"head.bias": "cls.predictions.bias"}
        for ours, theirs in (("head.dense", "transform.dense"), ("head.norm", "transform.LayerNorm")):
            names.update({f"{ours}.{p}": f"cls.predictions.{theirs}.{p}" for p in ("weight", "bias")})
        return names
    return {}


# ---------------------------------------------------------------------------- transformers -> zoo


def from_hf(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], num_heads: int | None = None
) -> tuple[dict[str, Any], Tensors]:
    """A transformers BERT state dict (and its ``config.json``, or ``{}``) -> zoo's fields and
    tensors. ``num_heads``: the head count, where no config.json says it."""
    tensors = {_modern_name(key): value for key, value in tensors.items()}
    if meta:  # a head count the user gives stands where config.json leaves it out
        given = {"num_attention_heads"} if num_heads is not None else set()
        meta = {**{k: v for k, v in HF_DEFAULTS.items() if k not in given}, **meta}
    prefix = "bert." if any(key.startswith("bert.") for key in tensors) else ""
    if f"{prefix}embeddings.word_embeddings.weight" not in tensors:
        raise ForeignLayoutError(
            "not a transformers BERT: no embeddings.word_embeddings.weight (nor bert.embeddings...)",
            list(tensors),
            ["embeddings.word_embeddings.weight"],
        )
    tensors = {k: v for k, v in tensors.items() if not k.removeprefix(prefix).endswith(_BUFFERS)}
    task = _task(tensors, meta, prefix)
    tensors = _without_tied_decoder(tensors, meta, prefix, task)
    tensors = _without_unused(tensors, prefix, task)
    fields = config_fields(tensors, meta, prefix, task, num_heads)
    try:
        cfg = BertConfig(**fields)
    except ValueError as error:
        raise ForeignLayoutError(
            f"these transformers BERT weights give no valid zoo bert config: {error}"
        ) from None
    names = {prefix + theirs: ours for ours, theirs in _backbone_names(cfg).items()}
    names |= {theirs: ours for ours, theirs in _head_names(cfg).items()}
    qkv = {
        f"{prefix}encoder.layer.{i}.attention.self.{part}.{p}"
        for i in range(cfg.num_layers)
        for part in _QKV
        for p in ("weight", "bias")
    }
    found = renamed(tensors, names, ignore=qkv.__contains__, what="transformers BERT weights")
    missing = sorted(key for key in qkv if key not in tensors)
    if missing:
        raise ForeignLayoutError(
            f"these transformers BERT weights lack {', '.join(missing[:5])}", [], missing
        )
    for i in range(cfg.num_layers):
        self_attention = f"{prefix}encoder.layer.{i}.attention.self"
        for p, ours in (("weight", "in_proj_weight"), ("bias", "in_proj_bias")):
            found[f"blocks.{i}.attn.{ours}"] = np.concatenate(
                [tensors[f"{self_attention}.{part}.{p}"] for part in _QKV], axis=0
            )
    _check_shapes(cfg, found)
    return fields, {name: np.asarray(value, dtype=np.float32) for name, value in found.items()}


def _modern_name(key: str) -> str:
    """Older BERT files (Google's TF conversion) call LayerNorm's weight and bias gamma and beta."""
    return re.sub(
        r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
    )


def _task(tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], prefix: str) -> str:
    architectures = meta.get("architectures") or []
    if architectures:
        name = architectures[0]
        if name not in _TASKS:
            raise ForeignLayoutError(
                f"config.json's architectures is {architectures}: zoo's bert reads "
                f"{', '.join(sorted(_TASKS))} (question answering, multiple choice, next-sentence "
                "prediction and BERT as a decoder have no zoo task)"
            )
        return _TASKS[name]
    if any(key.startswith("cls.predictions.") for key in tensors):
        return "masked_language_modeling"
    if "classifier.weight" in tensors:
        pooled = f"{prefix}pooler.dense.weight" in tensors  # BertForTokenClassification has no pooler
        return "classification" if pooled else "token_classification"
    return "features"


def _without_tied_decoder(
    tensors: dict[str, np.ndarray], meta: Mapping[str, Any], prefix: str, task: str
) -> dict[str, np.ndarray]:
    """The MLM decoder is the word embedding (and its bias ``cls.predictions.bias``): copies of
    either that a file holds are dropped when equal, refused when not."""
    tensors = dict(tensors)
    decoder = tensors.pop("cls.predictions.decoder.weight", None)
    decoder_bias = tensors.pop("cls.predictions.decoder.bias", None)
    if task != "masked_language_modeling":
        for key, value in (
            ("cls.predictions.decoder.weight", decoder),
            ("cls.predictions.decoder.bias", decoder_bias),
        ):
            if value is not None:
                tensors[key] = value  # left for the rename to report as unplaced
        return tensors
    embedding = tensors[f"{prefix}embeddings.word_embeddings.weight"]
    if decoder is None and meta.get("tie_word_embeddings") is False:
        raise ForeignLayoutError(
            "config.json's tie_word_embeddings is false but the file holds no cls.predictions.decoder.weight"
        )
    if decoder is not None and not np.array_equal(decoder, embedding):
        raise ForeignLayoutError(
            "cls.predictions.decoder.weight differs from the word embedding: zoo's masked-LM head decodes "
            "with the word embedding itself (transformers' tie_word_embeddings=true), so an untied decoder "
            "has no place; tie it (copy the embedding in) or import the backbone alone"
        )
    if decoder_bias is not None:
        bias = tensors.setdefault("cls.predictions.bias", decoder_bias)
        if not np.array_equal(bias, decoder_bias):
            raise ForeignLayoutError(
                "cls.predictions.decoder.bias differs from cls.predictions.bias: transformers ties them "
                "(the decoder's bias is the head's), so one of them is not what transformers would use"
            )
    return tensors


def _without_unused(tensors: dict[str, np.ndarray], prefix: str, task: str) -> dict[str, np.ndarray]:
    """Drop what transformers' class for ``task`` leaves unused in a pre-training file: the pooler
    (token classification, masked LM) and the next-sentence head (masked LM)."""
    unused = []
    if task in ("token_classification", "masked_language_modeling"):
        unused += [k for k in tensors if k.startswith(f"{prefix}pooler.")]
    if task == "masked_language_modeling":
        unused += [k for k in tensors if k.startswith("cls.seq_relationship.")]
    if unused:
        log.warning(
            "importing as %s (transformers' %s) leaves out what that class does not have, as "
            "transformers does: %s",
            task,
            HF_CLASSES[task],
            ", ".join(sorted(unused)),
        )
    return {k: v for k, v in tensors.items() if k not in unused}


def _check_shapes(cfg: BertConfig, found: Mapping[str, np.ndarray]) -> None:
    specs = tensor_specs(table(cfg))
    wrong = [
        f"{name} {list(np.shape(value))} (this config needs {list(specs[name].shape)})"
        for name, value in found.items()
        if tuple(np.shape(value)) != specs[name].shape
    ]
    if wrong:
        raise ForeignLayoutError(
            f"these transformers BERT weights have other shapes than zoo's: {'; '.join(wrong[:5])}"
        )


# ---------------------------------------------------------------------------- zoo -> transformers


def hf_preprocessing(cfg: BertConfig, meta: Mapping[str, Any]) -> Preprocessing | None:
    """A classifier's label names, from config.json's ``id2label`` (transformers' defaults
    LABEL_0, LABEL_1... included: they are what transformers names them)."""
    if cfg.task not in ("classification", "token_classification"):
        return None
    labels = label_names(meta.get("id2label"), cfg.num_classes, "config.json's id2label")
    return Preprocessing(source="transformers config.json", labels=labels) if labels else None


def to_hf(
    cfg: BertConfig,
    tensors: Mapping[str, np.ndarray],
    source: Mapping[str, Any] | None = None,
    preprocessing: Preprocessing | None = None,
) -> tuple[Tensors, dict[str, Any]]:
    """zoo's tensors -> the state dict transformers' class for the task saves, and its ``config.json``
    (with what ``source``, the one imported, says and zoo's config does not model, and the label
    names ``preprocessing`` records)."""
    prefix = "" if cfg.task == "features" else "bert."
    names = {ours: prefix + theirs for ours, theirs in _backbone_names(cfg).items()} | _head_names(cfg)
    stacked = {f"blocks.{i}.attn.in_proj_{p}" for i in range(cfg.num_layers) for p in ("weight", "bias")}
    out = renamed({k: v for k, v in tensors.items() if k not in stacked}, names, what="zoo bert tensors")
    h = cfg.hidden_size
    for i in range(cfg.num_layers):
        for p in ("weight", "bias"):
            parts = np.asarray(tensors[f"blocks.{i}.attn.in_proj_{p}"]).reshape(
                3, h, *(() if p == "bias" else (h,))
            )
            for part, value in zip(_QKV, parts, strict=True):
                out[f"{prefix}encoder.layer.{i}.attention.self.{part}.{p}"] = np.ascontiguousarray(value)
    return out, exported_config(cfg, source, preprocessing)
