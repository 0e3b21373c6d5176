"""transformers' Llama / Mistral / Qwen2 / Qwen3 / Phi-3 state dict <-> zoo's canonical tensors
(the ``config.json`` beside them is read and written by ``architectures.llama.config_json``).

zoo's torch twin holds transformers' tensors under transformers' names; the differences are:

- the prefix: ``model.`` before every backbone key of a ``*ForCausalLM`` (a base ``*Model``
  has none), and ``lm_head.weight`` beside them;
- the head: a tied head (``tie_word_embeddings``) is the token embedding. Files that carry
  ``lm_head.weight`` anyway must carry the very same matrix, which is dropped; one that differs
  is refused. Written back once, as ``model.embed_tokens.weight`` (transformers re-ties on load);
- buffers: the ``rotary_emb.inv_freq`` of older files is recomputed, skipped;
- Phi-3 stacks the query, key and value projections in one ``qkv_proj`` and the gate and up
  projections in one ``gate_up_proj``: split on import, stacked again on export.

The config: the shapes decide the vocabulary, width, depth, MLP width and which biases exist;
``config.json`` the head counts, head width, rotary embedding and the rest, checked against the
shapes, each disagreement named. A ``config.json`` is required: no shape tells the query heads
from the head width.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.llama.config import LlamaConfig
from architectures.llama.config_json import HF_DEFAULTS, config_fields, hf_config, model_type_and_task
from architectures.llama.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, causal_lm_parts, check_tied_head, renamed
from zoo.checkpoint.tables import tensor_specs

PREFIX = "model."
HEAD = "lm_head.weight"
_BUFFERS = re.compile(r"(^|\.)rotary_emb\.inv_freq$")
FUSED_QKV, FUSED_MLP = "self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"  # Phi-3's
# Mixtral's router and experts (w1 the gate, w3 the up and w2 the down projection)
_MIXTRAL = re.compile(r"block_sparse_moe\.(gate|experts\.\d+\.)(w1|w2|w3|)(?=\.weight$)")
_MIXTRAL_PARTS = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


# ---------------------------------------------------------------------- transformers -> zoo


def from_hf(tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> tuple[dict[str, Any], Tensors]:
    """A ``*ForCausalLM`` or ``*Model`` state dict of Llama, Mistral or Qwen2 (and its
    ``config.json``) -> zoo's config fields and tensors."""
    backbone, head, prefixed = causal_lm_parts(tensors, "Llama", PREFIX, HEAD)
    if any(key.endswith(FUSED_QKV) for key in backbone):  # Phi-3's fused projections
        backbone = _unfused(backbone, meta)
    backbone = {_MIXTRAL.sub(_zoo_expert_name, key): value for key, value in backbone.items()}
    shapes = _shapes(backbone)
    model_type, task = model_type_and_task(meta, prefixed or head is not None)
    fields = {"model_type": model_type, "task": task, **config_fields(meta, model_type)}
    if "vocab_size" in meta:
        fields["vocab_size"] = meta["vocab_size"]
    try:
        _agree(fields, shapes, backbone, model_type)
    except ForeignLayoutError as error:
        left_out = [key for key in ("num_attention_heads", "num_key_value_heads") if key not in meta]
        counted = "num_key_value_heads" in HF_DEFAULTS[model_type]  # a number, not the query heads
        if not left_out or (not counted and left_out == ["num_key_value_heads"]):
            raise
        raise ForeignLayoutError(
            f"{error} ({', '.join(left_out)} left out of config.json: transformers' {model_type} "
            "default was taken; write the model's own count into config.json)"
        ) from None
    fields["vocab_size"] = shapes["vocab_size"]
    if task == "language_modeling":
        check_tied_head(fields["tie_word_embeddings"], head, backbone["embed_tokens.weight"])
    elif head is not None:
        raise ForeignLayoutError(f"config.json's architectures say a base model, which has no {HEAD}", [HEAD])
    try:
        cfg = LlamaConfig(**fields)
    except ValueError as error:
        raise ForeignLayoutError(
            f"this config.json gives no valid zoo llama config: {_pydantic_words(error)}"
        ) from None
    specs = tensor_specs(table(cfg))
    source = {**backbone, HEAD: head} if HEAD in specs else backbone
    found = renamed(
        source,
        {name: name for name in specs},
        ignore=lambda key: bool(_BUFFERS.search(key)),
        what="Llama weights",
    )
    wrong = [
        f"{name} {list(np.shape(value))} (zoo needs {list(specs[name].shape)})"
        for name, value in found.items()
        if tuple(np.shape(value)) != specs[name].shape
    ]
    if wrong:
        raise ForeignLayoutError(
            f"these Llama weights have other shapes than config.json says: {'; '.join(wrong[:5])}"
        )
    return fields, {name: np.asarray(value, dtype=np.float32) for name, value in found.items()}


def _unfused(backbone: dict[str, np.ndarray], meta: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Phi-3's ``qkv_proj`` (the query, key and value rows stacked) and ``gate_up_proj`` (the
    gate's rows, then the up projection's) as the separate projections zoo's twins hold."""
    if meta.get("model_type") != "phi3":
        raise ForeignLayoutError(
            f"fused qkv_proj / gate_up_proj weights are Phi-3's, but config.json's model_type is "
            f"{meta.get('model_type')!r}: give Phi-3's config.json (model_type phi3)"
        )
    heads = meta.get("num_attention_heads", HF_DEFAULTS["phi3"]["num_attention_heads"])
    kv = meta.get("num_key_value_heads") or heads
    width = np.shape(backbone.get("embed_tokens.weight", np.zeros((0, 0))))[1]
    head_dim = width // heads if isinstance(heads, int) and heads > 0 else 0
    out = dict(backbone)
    for key in [k for k in backbone if k.endswith(FUSED_QKV)]:
        qkv, stem = out.pop(key), key.removesuffix("qkv_proj.weight")
        rows = (heads * head_dim, kv * head_dim, kv * head_dim)
        if head_dim == 0 or len(qkv) != sum(rows):
            raise ForeignLayoutError(
                f"{key} has {len(qkv)} rows; num_attention_heads {heads} and num_key_value_heads {kv} of "
                f"width {head_dim} make {sum(rows)}: config.json's head counts do not fit the weights"
            )
        q, k, v = np.split(qkv, np.cumsum(rows)[:2])
        out |= {f"{stem}q_proj.weight": q, f"{stem}k_proj.weight": k, f"{stem}v_proj.weight": v}
    for key in [k for k in backbone if k.endswith(FUSED_MLP)]:
        gate_up, stem = out.pop(key), key.removesuffix("gate_up_proj.weight")
        if len(gate_up) % 2:
            raise ForeignLayoutError(f"{key} has {len(gate_up)} rows: no gate and up projection of one width")
        gate, up = np.split(gate_up, 2)
        out |= {f"{stem}gate_proj.weight": gate, f"{stem}up_proj.weight": up}
    return out


def _zoo_expert_name(match: re.Match) -> str:
    """Mixtral's ``block_sparse_moe.gate`` / ``experts.E.w1|w2|w3`` under zoo's (Qwen3-MoE's) names."""
    return f"mlp.{match.group(1)}{_MIXTRAL_PARTS.get(match.group(2), match.group(2))}"


def _mixtral_names(tensors: dict[str, Any]) -> dict[str, Any]:
    """zoo's expert names as Mixtral writes them (the inverse of :func:`_zoo_expert_name`)."""
    back = {zoo: theirs for theirs, zoo in _MIXTRAL_PARTS.items()}
    renamed = {}
    for key, value in tensors.items():
        match = re.search(r"mlp\.(gate|experts\.\d+\.)(gate_proj|up_proj|down_proj|)(?=\.weight$)", key)
        if match and (match.group(1) == "gate" or match.group(2)):
            theirs = back.get(match.group(2), match.group(2))
            key = key[: match.start()] + f"block_sparse_moe.{match.group(1)}{theirs}" + key[match.end() :]
        renamed[key] = value
    return renamed


def _fused(tensors: dict[str, Any]) -> dict[str, Any]:
    """zoo's projections as Phi-3 stacks them (the inverse of :func:`_unfused`)."""
    out = dict(tensors)
    for key in [k for k in tensors if k.endswith("self_attn.q_proj.weight")]:
        stem = key.removesuffix("q_proj.weight")
        parts = [out.pop(f"{stem}{name}_proj.weight") for name in "qkv"]
        out[stem + "qkv_proj.weight"] = np.concatenate(parts)
    for key in [k for k in tensors if k.endswith("mlp.gate_proj.weight")]:
        stem = key.removesuffix("gate_proj.weight")
        gate, up = out.pop(f"{stem}gate_proj.weight"), out.pop(f"{stem}up_proj.weight")
        out[stem + "gate_up_proj.weight"] = np.concatenate([gate, up])
    return out


def _pydantic_words(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if errors is None:
        return str(error)
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg'].removeprefix('Value error, ')}"
        for e in errors()
    )


def _shapes(tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """What the shapes say: vocabulary, width, depth, MLP width, projection rows, biases."""
    needed = ["embed_tokens.weight", "layers.0.self_attn.q_proj.weight"]
    missing = [key for key in [*needed, "norm.weight"] if key not in tensors]
    if missing:
        known = ("embed_tokens.", "layers.", "norm.")
        raise ForeignLayoutError(
            "not a transformers Llama / Mistral / Qwen2 / Qwen3 (*Model / *ForCausalLM): missing "
            + ", ".join(missing),
            [key for key in tensors if not key.startswith(known)],
            missing,
        )
    layers = sorted({int(m.group(1)) for key in tensors if (m := re.match(r"layers\.(\d+)\.", key))})
    if layers != list(range(len(layers))):
        raise ForeignLayoutError(f"Llama layers are not numbered 0..{len(layers) - 1}: found {layers}")
    vocab, width = np.shape(tensors["embed_tokens.weight"])
    attention = "layers.0.self_attn"
    return {
        "vocab_size": int(vocab),
        "hidden_size": int(width),
        "num_hidden_layers": len(layers),
        **_mlp_shapes(tensors, len(layers)),
        "query_rows": int(np.shape(tensors[f"{attention}.q_proj.weight"])[0]),
        "key_rows": int(np.shape(tensors.get(f"{attention}.k_proj.weight", np.zeros((0,))))[0]),
        "qkv_bias": f"{attention}.q_proj.bias" in tensors,
        "output_bias": f"{attention}.o_proj.bias" in tensors,
        "mlp_bias": any(key.endswith("mlp.gate_proj.bias") for key in tensors),
    }


def _mlp_shapes(tensors: Mapping[str, np.ndarray], layers: int) -> dict[str, Any]:
    """The dense MLPs' width (None where every layer has experts), and for a mixture of experts
    which layers route, how many experts and how wide."""
    dense = [i for i in range(layers) if f"layers.{i}.mlp.gate_proj.weight" in tensors]
    routed = tuple(f"layers.{i}.mlp.gate.weight" in tensors for i in range(layers))
    missing = [f"layers.{i}.mlp.gate_proj.weight" for i in range(layers) if i not in dense and not routed[i]]
    if missing:
        raise ForeignLayoutError(f"these layers have neither an MLP nor experts: {', '.join(missing[:5])}")
    width = int(np.shape(tensors[f"layers.{dense[0]}.mlp.gate_proj.weight"])[0]) if dense else None
    found: dict[str, Any] = {"intermediate_size": width, "moe_layers": routed}
    if any(routed):
        first = routed.index(True)
        expert = re.compile(rf"layers\.{first}\.mlp\.experts\.(\d+)\.")
        found["experts"] = len({m.group(1) for key in tensors if (m := expert.match(key))})
        found["expert_size"] = int(np.shape(tensors[f"layers.{first}.mlp.experts.0.gate_proj.weight"])[0])
    return found


def _agree(fields: dict[str, Any], shapes: dict[str, Any], tensors, model_type: str) -> None:
    """config.json against the shapes: every disagreement named."""
    disagree = []
    if "vocab_size" in fields and fields["vocab_size"] != shapes["vocab_size"]:
        disagree.append(f"vocab_size says {fields['vocab_size']}, the tensors {shapes['vocab_size']}")
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers"):
        if shapes[key] is None:  # every layer has experts: config.json's MLP width is kept as it says,
            if model_type == "mixtral":  # which for Mixtral is the experts' own
                fields.setdefault(key, shapes["expert_size"])
            continue
        if key in fields and fields[key] != shapes[key]:
            disagree.append(f"{key} says {fields[key]}, the tensors {shapes[key]}")
        fields[key] = shapes[key]
    disagree += _experts_disagree(fields, shapes)
    heads, kv = fields["num_attention_heads"], fields["num_key_value_heads"]
    head_dim = fields.get("head_dim") or fields["hidden_size"] // heads
    if shapes["query_rows"] != heads * head_dim:
        disagree.append(
            f"num_attention_heads {heads} x head width {head_dim} = {heads * head_dim}, the q_proj rows "
            f"{shapes['query_rows']}"
        )
    if shapes["key_rows"] != kv * head_dim:
        disagree.append(
            f"num_key_value_heads {kv} x head width {head_dim} = {kv * head_dim}, the k_proj rows "
            f"{shapes['key_rows']}"
        )
    for key in ("qkv_bias", "output_bias", "mlp_bias"):
        if fields[key] != shapes[key]:
            disagree.append(f"a {model_type} config gives {key} {fields[key]}, the tensors {shapes[key]}")
    if disagree:
        raise ForeignLayoutError(f"config.json and the weights disagree: {'; '.join(disagree)}")


def _experts_disagree(fields: dict[str, Any], shapes: dict[str, Any]) -> list[str]:
    """config.json's experts against the tensors': which layers route, how many experts, how wide."""
    if not any(shapes["moe_layers"]):
        return (
            ["config.json describes experts but the tensors have no router"]
            if fields.get("num_local_experts")
            else []
        )
    if not fields.get("num_local_experts"):
        return [f"the tensors have experts, which a {fields['model_type']} config does not "
                "(model_type mixtral or qwen3_moe)"]  # fmt: skip
    said = LlamaConfig.model_construct(**{**LlamaConfig().model_dump(), **fields})
    disagree = []
    if said.moe_layers != shapes["moe_layers"]:
        disagree.append(f"the experts are on layers {[i for i, m in enumerate(shapes['moe_layers']) if m]}, "
                        f"config.json says {[i for i, m in enumerate(said.moe_layers) if m]}")  # fmt: skip
    if fields["num_local_experts"] != shapes["experts"]:
        disagree.append(
            f"num_local_experts says {fields['num_local_experts']}, the tensors {shapes['experts']}"
        )
    if said.expert_size != shapes["expert_size"]:
        disagree.append(f"the experts' width is {said.expert_size} in config.json, "
                        f"{shapes['expert_size']} in the tensors")  # fmt: skip
    return disagree


# ---------------------------------------------------------------------- zoo -> transformers


def to_hf(cfg: LlamaConfig, tensors: Mapping[str, np.ndarray]) -> tuple[Tensors, dict[str, Any]]:
    """zoo's tensors -> the state dict transformers' ``save_pretrained`` writes for the config's
    ``model_type`` (a tied head once, as ``model.embed_tokens.weight``), and its ``config.json``."""
    config = hf_config(cfg)
    lm = cfg.active_task == "language_modeling"
    named = {name: tensors[name] for name in tensor_specs(table(cfg))}
    if cfg.model_type == "phi3":
        named = _fused(named)
    if cfg.model_type == "mixtral":
        named = _mixtral_names(named)
    return {name if name == HEAD or not lm else PREFIX + name: value for name, value in named.items()}, config
