"""transformers' Gemma 3 (text) and Gemma 2 state dict and ``config.json`` <-> zoo's gemma config and tensors.

zoo's torch twin holds transformers' tensors under transformers' names; the state dict adds the
``model.`` prefix of a ``*ForCausalLM`` and an ``lm_head.weight`` that, tied, is the embedding
again (dropped on import, refused where it differs; written once on export). The norms' weights
are transformers' own (the offset from one), read and written unchanged.

The shapes decide the vocabulary, width, depth, MLP width, biases and whether the heads have
query/key norms; ``config.json`` the head counts, the head width and the rest, each field left
out taking its class's default (``HF_DEFAULTS``). The rotary settings are read in both of
transformers' spellings: ``rope_theta`` / ``rope_local_base_freq`` / ``rope_scaling`` (every
published file) and ``rope_parameters`` (what transformers 5 writes, per kind of layer for
Gemma 3). What the twins do not compute is refused by field name: another activation or rope
type, bidirectional attention (EmbeddingGemma), Gemma 3's ``attn_logit_softcapping`` (which
transformers' Gemma 3 ignores), quantisation. The multimodal ``Gemma3ForConditionalGeneration``
is refused by its class name: zoo builds the text model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.gemma.config import GemmaConfig
from architectures.gemma.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, causal_lm_parts, check_tied_head, renamed
from zoo.checkpoint.tables import tensor_specs

PREFIX, HEAD = "model.", "lm_head.weight"
CLASSES = {
    "gemma3_text": ("Gemma3ForCausalLM", "Gemma3TextModel"),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Model"),
}
ARCHITECTURES = {
    name: (model_type, task)
    for model_type, names in CLASSES.items()
    for name, task in zip(names, ("language_modeling", "features"), strict=True)
}
_BUFFERS = re.compile(r"(^|\.)(rotary_emb\.\w*inv_freq|embed_tokens\.embed_scale)$")
# config.json -> zoo's field, for the fields that map one to one.
_FIELDS = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "max_position_embeddings", "rms_norm_eps", "query_pre_attn_scalar", "sliding_window",
    "final_logit_softcapping", "attention_dropout", "initializer_range", "tie_word_embeddings",
    "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip
_SHARED = {
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "initializer_range": 0.02,
    "attention_dropout": 0.0, "query_pre_attn_scalar": 256, "tie_word_embeddings": True, "bos_token_id": 2,
    "eos_token_id": 1, "pad_token_id": 0, "attention_bias": False,
}  # fmt: skip
# What each transformers config class (5.23) takes where config.json leaves a field out.
HF_DEFAULTS = {
    "gemma3_text": _SHARED | {
        "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6,
        "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0, "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    },
    "gemma2": _SHARED | {
        "max_position_embeddings": 8192, "sliding_window": 4096, "sliding_window_pattern": 2,
        "rope_theta": 10000.0, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
    },
}  # fmt: skip


def from_hf(tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
    """A Gemma ``*ForCausalLM`` or base-model state dict and its ``config.json`` -> zoo's config
    fields and tensors."""
    model_type, task = _model_type_and_task(meta)
    backbone, head = _backbone(tensors)
    fields = {"model_type": model_type, "task": task, **config_fields(meta, model_type)}
    _agree(fields, backbone)
    if task == "language_modeling":
        check_tied_head(fields["tie_word_embeddings"], head, backbone["embed_tokens.weight"])
    elif head is not None:
        raise ForeignLayoutError(f"config.json's architectures say a base model, which has no {HEAD}", [HEAD])
    try:
        cfg = GemmaConfig(**fields)
    except ValueError as error:
        raise ForeignLayoutError(f"this config.json gives no valid zoo gemma config: {error}") from None
    specs = tensor_specs(table(cfg))
    source = {**backbone, HEAD: head} if HEAD in specs else backbone
    found = renamed(
        source,
        {name: name for name in specs},
        ignore=lambda key: bool(_BUFFERS.search(key)),
        what="Gemma weights",
    )
    wrong = [
        f"{name} {list(np.shape(value))} (zoo needs {list(specs[name].shape)})"
        for name, value in found.items()
        if tuple(np.shape(value)) != specs[name].shape
    ]
    if wrong:
        raise ForeignLayoutError(
            f"these Gemma weights have other shapes than config.json says: {'; '.join(wrong[:5])}"
        )
    return fields, {name: np.asarray(value, dtype=np.float32) for name, value in found.items()}


def _model_type_and_task(meta: Mapping[str, Any]) -> tuple[str, str]:
    if not meta:
        raise ForeignLayoutError(
            "these Gemma-shaped weights come without a config.json: no shape tells the number of attention "
            "heads from their width; put transformers' config.json beside the weights"
        )
    architectures = meta.get("architectures") or []
    unknown = [name for name in architectures if name not in ARCHITECTURES]
    if unknown:
        raise ForeignLayoutError(
            f"config.json's architectures names {unknown}: zoo's gemma is one of {', '.join(ARCHITECTURES)} "
            "(the text model; Gemma3ForConditionalGeneration's vision tower is not built)"
        )
    model_type = meta.get("model_type") or (ARCHITECTURES[architectures[0]][0] if architectures else None)
    if model_type not in CLASSES:
        raise ForeignLayoutError(
            f"config.json's model_type is {model_type!r}, not one of {', '.join(CLASSES)}"
        )
    return model_type, ARCHITECTURES[architectures[0]][1] if architectures else "language_modeling"


def config_fields(meta: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """zoo's config fields from a ``config.json`` of ``model_type``, refusing by name what the
    twins do not compute."""
    meta = {**HF_DEFAULTS[model_type], **meta}
    refused = []
    if meta.get("quantization_config"):
        refused.append(  # zoo import reads compressed-tensors' int8 / int4 as float32 weights before this
            "quantization_config (this format places float weights: zoo import reads compressed-tensors' "
            "int8 / int4 folders; otherwise import the float model, then zoo quantize)"
        )
    activation = meta.get("hidden_activation") or meta.get("hidden_act")
    if activation != "gelu_pytorch_tanh":
        refused.append(f"hidden_activation {activation!r} (zoo computes 'gelu_pytorch_tanh')")
    if meta.get("use_bidirectional_attention"):
        refused.append(
            "use_bidirectional_attention (an encoder such as EmbeddingGemma; zoo's gemma is causal)"
        )
    if model_type == "gemma3_text" and meta.get("attn_logit_softcapping") is not None:
        refused.append(
            f"attn_logit_softcapping {meta['attn_logit_softcapping']} (transformers' Gemma 3 does not apply "
            "it: set it to null)"
        )
    fields: dict[str, Any] = {key: meta[key] for key in _FIELDS}
    if model_type == "gemma2":
        fields["attn_logit_softcapping"] = meta.get("attn_logit_softcapping")
    fields["tie_word_embeddings"] = bool(fields["tie_word_embeddings"])
    rope, rope_refused = _rope(meta, model_type)
    fields |= rope
    refused += rope_refused
    # Gemma 2's class windows every other layer whatever the file says; Gemma 3's reads the pattern
    fields["sliding_window_pattern"] = meta["sliding_window_pattern"] if model_type == "gemma3_text" else 2
    if meta.get("layer_types") is not None:
        fields["layer_types"] = list(meta["layer_types"])
    fields["qk_norm"] = model_type == "gemma3_text"
    fields["attention_bias"] = bool(meta.get("attention_bias", False))
    if refused:
        raise ForeignLayoutError(f"config.json sets what zoo's gemma cannot compute: {'; '.join(refused)}")
    return fields


def _rope(meta: Mapping[str, Any], model_type: str) -> tuple[dict[str, Any], list[str]]:
    """The rotary fields from either spelling: ``rope_parameters`` (per kind of layer for Gemma 3,
    one mapping for Gemma 2) where given, else ``rope_theta``, ``rope_local_base_freq`` and
    ``rope_scaling`` (the global layers' scaling)."""
    parameters = meta.get("rope_parameters")
    if isinstance(parameters, Mapping) and "full_attention" in parameters:
        full, local = (
            dict(parameters["full_attention"] or {}),
            dict(parameters.get("sliding_attention") or {}),
        )
    elif isinstance(parameters, Mapping) and parameters:
        full, local = dict(parameters), dict(parameters)
    else:
        full = {**(meta.get("rope_scaling") or {}), "rope_theta": meta["rope_theta"]}
        local = {"rope_theta": meta.get("rope_local_base_freq", meta["rope_theta"])}
    full.setdefault("rope_theta", meta["rope_theta"])
    local.setdefault("rope_theta", meta.get("rope_local_base_freq", meta["rope_theta"]))
    fields = {
        "rope_theta": float(full.pop("rope_theta")),
        "rope_local_base_freq": float(local.pop("rope_theta")),
    }
    refused = []
    for kind, rope in (("global", full), ("sliding", local)):
        rope_type = rope.pop("rope_type", rope.pop("type", "default"))
        if rope.pop("partial_rotary_factor", 1.0) != 1.0:
            refused.append(
                f"a partial_rotary_factor on the {kind} layers (zoo turns every feature of a head)"
            )
        if rope_type == "linear" and kind == "global":
            fields["rope_scaling"] = {"rope_type": "linear", "factor": rope.pop("factor", 1.0)}
        elif rope_type != "default":
            refused.append(f"rope_type {rope_type!r} on the {kind} layers (zoo computes 'default', and "
                           "'linear' on the global ones)")  # fmt: skip
    return fields, refused


def _backbone(tensors: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    tensors, head, _ = causal_lm_parts(tensors, "Gemma", PREFIX, HEAD)
    needed = [
        "embed_tokens.weight",
        "layers.0.self_attn.q_proj.weight",
        "layers.0.mlp.gate_proj.weight",
        "norm.weight",
    ]
    missing = [key for key in needed if key not in tensors]
    if missing:
        raise ForeignLayoutError(
            "not a transformers Gemma 3 / Gemma 2 text model (*ForCausalLM / *Model): missing "
            + ", ".join(missing),
            [key for key in tensors if not key.startswith(("embed_tokens.", "layers.", "norm."))],
            missing,
        )
    return tensors, head


def _agree(fields: dict[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    """config.json against the shapes: the shapes' sizes win where config.json left them out,
    every disagreement is named."""
    layers = sorted({int(m.group(1)) for key in tensors if (m := re.match(r"layers\.(\d+)\.", key))})
    vocab, width = np.shape(tensors["embed_tokens.weight"])
    shapes = {
        "vocab_size": int(vocab),
        "hidden_size": int(width),
        "num_hidden_layers": len(layers),
        "intermediate_size": int(np.shape(tensors["layers.0.mlp.gate_proj.weight"])[0]),
    }
    disagree = [f"{key} says {fields[key]}, the tensors {value}"
                for key, value in shapes.items() if key in fields and fields[key] != value]  # fmt: skip
    fields |= shapes
    heads, kv, head_dim = fields["num_attention_heads"], fields["num_key_value_heads"], fields["head_dim"]
    for part, count, words in (
        ("q_proj", heads, "num_attention_heads"),
        ("k_proj", kv, "num_key_value_heads"),
    ):
        rows = int(np.shape(tensors.get(f"layers.0.self_attn.{part}.weight", np.zeros((0,))))[0])
        if rows != count * head_dim:
            disagree.append(
                f"{words} {count} x head_dim {head_dim} = {count * head_dim}, the {part} rows {rows}"
            )
    if fields["attention_bias"] != ("layers.0.self_attn.q_proj.bias" in tensors):
        disagree.append(f"attention_bias says {fields['attention_bias']}, the tensors the opposite")
    if fields["qk_norm"] != ("layers.0.self_attn.q_norm.weight" in tensors):
        has = "have" if not fields["qk_norm"] else "lack"
        disagree.append(f"the tensors {has} query/key norms, which a {fields['model_type']} model does not")
    if disagree:
        raise ForeignLayoutError(f"config.json and the weights disagree: {'; '.join(disagree)}")


def to_hf(cfg: GemmaConfig, tensors: Mapping[str, np.ndarray]) -> tuple[Tensors, dict[str, Any]]:
    """zoo's tensors -> the state dict transformers' ``save_pretrained`` writes for the config's
    ``model_type`` (a tied head once, as ``model.embed_tokens.weight``), and its ``config.json``."""
    config = hf_config(cfg)
    lm = cfg.active_task == "language_modeling"
    named = {name: tensors[name] for name in tensor_specs(table(cfg))}
    return {name if name == HEAD or not lm else PREFIX + name: value for name, value in named.items()}, config


def hf_config(cfg: GemmaConfig) -> dict[str, Any]:
    """The ``config.json`` of ``cfg``'s ``model_type`` class; a config that class cannot hold
    raises ``ForeignLayoutError`` naming what would work."""
    gemma3 = cfg.model_type == "gemma3_text"
    problems = []
    if cfg.qk_norm != gemma3:
        problems.append(f"qk_norm {cfg.qk_norm}: only Gemma 3 has the query/key norms (set model.model_type "
                        f"to {'gemma3_text' if cfg.qk_norm else 'gemma2'})")  # fmt: skip
    if gemma3 and cfg.attn_logit_softcapping is not None:
        problems.append("attn_logit_softcapping: transformers' Gemma 3 does not apply it (set it to null, or "
                        "model.model_type to gemma2)")  # fmt: skip
    if not gemma3 and (cfg.rope_local_base_freq != cfg.rope_theta or cfg.rope_scaling is not None):
        problems.append("Gemma 2 has one rotary base and no scaling: set rope_local_base_freq to rope_theta "
                        "and rope_scaling to null")  # fmt: skip
    if cfg.hidden_size % cfg.num_attention_heads:
        problems.append(f"hidden_size {cfg.hidden_size} is not a multiple of num_attention_heads "
                        f"{cfg.num_attention_heads}, which transformers' Gemma classes require (whatever "
                        "head_dim)")  # fmt: skip
    if problems:
        raise ForeignLayoutError(
            f"this gemma config has no transformers {cfg.model_type} form: {'; '.join(problems)}"
        )
    lm = cfg.active_task == "language_modeling"
    config: dict[str, Any] = {
        "model_type": cfg.model_type,
        "architectures": [CLASSES[cfg.model_type][0 if lm else 1]],
        "vocab_size": cfg.vocab_size,
        **{key: getattr(cfg, key) for key in _FIELDS},
        "hidden_activation": cfg.hidden_activation,
        "attention_bias": cfg.attention_bias,
        "attn_logit_softcapping": cfg.attn_logit_softcapping,
        "layer_types": list(cfg.kinds),
        "rope_theta": cfg.rope_theta,
        "use_cache": True,
    }
    if gemma3:
        config["sliding_window_pattern"] = cfg.sliding_window_pattern
        config["rope_local_base_freq"] = cfg.rope_local_base_freq
        config["rope_scaling"] = cfg.rope_scaling.model_dump() if cfg.rope_scaling is not None else None
    return config
