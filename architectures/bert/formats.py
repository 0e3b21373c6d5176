"""transformers' BERT state dicts <-> zoo's canonical tensors, and transformers' ``config.json`` both ways.

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
The config comes from the shapes, checked against ``config.json``; the head count, which no
shape shows, from ``num_attention_heads``, else from ``zoo import --num-heads`` (never guessed:
MiniLM is 384 wide with 12 heads, not 6). A ``config.json`` that asks for something zoo's BERT
does not compute (another activation, relative positions, a decoder) is refused naming the field.

Writing: the names above for the task's class, and the ``config.json`` its
``from_pretrained`` reads; the tied decoder is written once, as the word embedding, and
transformers re-ties it on load (``tie_word_embeddings``). A checkpoint imported from this
layout gets back the fields of its ``config.json`` that zoo's config does not model (label
names, token ids, the tokenizer class...) as they were read. A classifier's label names are
the checkpoint's own (its preprocessing record: ``id2label`` at import, the data's class names
when zoo trained it), written as ``id2label``/``label2id``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.bert.config import HF_CLASSES, BertConfig
from architectures.bert.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, head_count, renamed, with_source
from zoo.checkpoint.tables import tensor_specs
from zoo.preprocessing import Preprocessing, label_names

log = logging.getLogger("zoo")

_TASKS = {cls: task for task, cls in HF_CLASSES.items()} | {"BertForPreTraining": "masked_language_modeling"}
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_QKV = ("query", "key", "value")
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
    fields = _config_fields(tensors, meta, prefix, task, num_heads)
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


def _config_fields(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], prefix: str, task: str, num_heads: int | None
) -> dict[str, Any]:
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
    labels = (source or {}).get("id2label") or {}
    named = preprocessing.labels if preprocessing is not None else None
    relabelled = cfg.task in ("classification", "token_classification") and (
        named is not None or len(labels) != cfg.num_classes
    )
    return out, with_source(hf_config(cfg, named), source, MODELLED + (_LABELS if relabelled else ()))


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
