"""transformers' Llama / Mistral / Qwen2 / Qwen3 ``config.json``, read and written: what each field means
to zoo's llama config.

Reading (``config_fields``): the fields that map one to one, the head counts, the rotary
embedding, the sliding window and the bias layout of the ``model_type``'s class; a field a file
leaves out takes that class's default (``HF_DEFAULTS``). The rotary settings are read in both of
transformers' spellings, ``rope_theta`` + ``rope_scaling`` (every published file) and
``rope_parameters`` (what transformers 5 writes). Everything that changes what the model
computes and that zoo's twins do not do is refused by field name: another rope type, a partial
rotary factor, another activation, quantisation; a count, rotary mapping or wavelength
transformers cannot use is refused too. The shapes are checked against these fields by
``architectures.llama.formats``.

Writing (``hf_config``): the ``config.json`` of the config's ``model_type`` class, the rotary
settings in both spellings, so that older and newer readers agree; a config that class cannot
express (a bias layout or sliding window it does not have) is refused naming what would work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from architectures.llama.config import LlamaConfig
from architectures.llama.config_json_experts import MOE, experts_config, experts_fields, experts_problem
from zoo.checkpoint.foreign import ForeignLayoutError

CLASSES = {  # model_type -> class prefix
    "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "phi3": "Phi3",
    "mixtral": "Mixtral", "qwen3_moe": "Qwen3Moe",
}  # fmt: skip
WINDOW_EVERYWHERE = ("mistral", "phi3", "mixtral")  # a sliding_window applies to every layer
WINDOW_SOME = ("qwen2", "qwen3")  # use_sliding_window from max_window_layers on (Qwen3-MoE: every layer)
QK_NORM = ("qwen3", "qwen3_moe")
ARCHITECTURES = {
    f"{name}{suffix}": (model_type, task)
    for model_type, name in CLASSES.items()
    for suffix, task in (("ForCausalLM", "language_modeling"), ("Model", "features"))
}
ACTIVATIONS = ("silu", "swish")
# config.json -> zoo's field, for the fields that map one to one.
_FIELDS = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
    "rms_norm_eps", "initializer_range", "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip
# What each transformers config class (5.23) takes where config.json leaves a field out, for
# every field zoo reads from config.json that no tensor shape shows (tests/test_hf_defaults.py
# checks each value against the classes themselves). Llama and Qwen2 default their key/value
# heads to the query heads, which no table can say; Mistral's and Qwen3's are a number. Qwen3's
# head_dim is 128 where config.json leaves it out, whatever the width.
_SHARED_DEFAULTS = {
    "num_attention_heads": 32, "hidden_act": "silu", "rms_norm_eps": 1e-6, "initializer_range": 0.02,
    "attention_dropout": 0.0, "pad_token_id": None, "tie_word_embeddings": False, "rope_theta": 10000.0,
}  # fmt: skip
HF_DEFAULTS = {
    "llama": _SHARED_DEFAULTS | {
        "max_position_embeddings": 2048, "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False,
        "mlp_bias": False,
    },
    "mistral": _SHARED_DEFAULTS | {
        "num_key_value_heads": 8, "max_position_embeddings": 131072, "bos_token_id": 1, "eos_token_id": 2,
        "sliding_window": 4096,
    },
    "qwen2": _SHARED_DEFAULTS | {
        "max_position_embeddings": 32768, "bos_token_id": None, "eos_token_id": None,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 28,
    },
    "qwen3": _SHARED_DEFAULTS | {
        "num_key_value_heads": 32, "head_dim": 128, "max_position_embeddings": 32768, "bos_token_id": None,
        "eos_token_id": None, "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 28,
    },
    "mixtral": _SHARED_DEFAULTS | {
        "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "bos_token_id": 1,
        "eos_token_id": 2, "sliding_window": None, "rope_theta": 1000000.0, "num_local_experts": 8,
        "num_experts_per_tok": 2, "router_aux_loss_coef": 0.001, "output_router_logits": False,
        "router_jitter_noise": 0.0,
    },
    "qwen3_moe": _SHARED_DEFAULTS | {
        "num_key_value_heads": 4, "max_position_embeddings": 32768, "bos_token_id": None,
        "eos_token_id": None, "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "num_local_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "router_aux_loss_coef": 0.001, "output_router_logits": False,
    },
    "phi3": _SHARED_DEFAULTS | {
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 32000,
        "pad_token_id": 32000, "sliding_window": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
    },
}  # fmt: skip
# Phi-3's dropouts zoo's llama does not have: refused unless 0 (what every released Phi-3 sets).
_PHI3_DROPOUTS = ("resid_pdrop", "embd_pdrop")
# config.json's counts and sizes: whole numbers of at least 1 where given (transformers divides by them).
_COUNTS = ("num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "vocab_size")


def model_type_and_task(meta: Mapping[str, Any], has_head: bool) -> tuple[str, str]:
    """(model_type, task) from config.json's ``model_type`` and ``architectures``."""
    if not meta:
        raise ForeignLayoutError(
            "these Llama-shaped weights come without a config.json: no shape tells the number of attention "
            "heads from their width; put transformers' config.json beside the weights"
        )
    architectures = meta.get("architectures") or []
    unknown = [name for name in architectures if name not in ARCHITECTURES]
    if unknown:
        raise ForeignLayoutError(
            f"config.json's architectures names {unknown}: zoo's llama is one of {', '.join(ARCHITECTURES)} "
            "(a classification or question-answering head is not built)"
        )
    model_type = meta.get("model_type") or (ARCHITECTURES[architectures[0]][0] if architectures else None)
    if model_type not in CLASSES:
        raise ForeignLayoutError(
            f"config.json's model_type is {model_type!r}, not one of {', '.join(map(repr, CLASSES))}"
        )
    if architectures:
        return model_type, ARCHITECTURES[architectures[0]][1]
    return model_type, "language_modeling" if has_head else "features"


def config_fields(meta: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """zoo's config fields from a ``config.json`` of ``model_type`` (without the shapes' checks),
    refusing by name what the twins do not compute."""
    meta = {**HF_DEFAULTS[model_type], **meta}
    _check_numbers(meta)
    refused = []
    if meta.get("quantization_config"):
        refused.append(  # zoo import reads compressed-tensors' int8 / int4 as float32 weights before this
            "quantization_config (this format places float weights: zoo import reads compressed-tensors' "
            "int8 / int4 folders; otherwise import the float model, then zoo quantize)"
        )
    activation = meta.get("hidden_act", "silu")
    if activation not in ACTIVATIONS:
        refused.append(f"hidden_act {activation!r} (zoo computes {' / '.join(ACTIVATIONS)})")
    if model_type == "phi3":
        refused += [f"{key} {meta[key]} (zoo's llama has no such dropout: set it to 0)"
                    for key in _PHI3_DROPOUTS if meta.get(key)]  # fmt: skip
    fields: dict[str, Any] = {key: meta[key] for key in _FIELDS if key in meta}
    fields["hidden_act"] = activation
    heads = meta["num_attention_heads"]
    fields["num_key_value_heads"] = meta.get("num_key_value_heads") or heads
    head_dim = meta.get("head_dim")
    # Qwen3's head width is its own (128 where left out), never derived from the width
    if head_dim is not None and (model_type in QK_NORM or head_dim != meta.get("hidden_size", 0) // heads):
        fields["head_dim"] = head_dim
    fields["tie_word_embeddings"] = bool(meta.get("tie_word_embeddings", False))
    theta, scaling, rope_refused = _rope(meta)
    refused += rope_refused
    fields["rope_theta"], fields["rope_scaling"] = theta, scaling
    fields["sliding_window"], fields["layer_types"] = _sliding_window(meta, model_type)
    fields |= _biases(meta, model_type)
    fields["qk_norm"] = model_type in QK_NORM
    if model_type in MOE:
        moe, moe_refused = experts_fields(meta, model_type)
        fields |= moe
        refused += moe_refused
    if refused:
        raise ForeignLayoutError(f"config.json sets what zoo's llama cannot compute: {'; '.join(refused)}")
    return fields


def _check_numbers(meta: Mapping[str, Any]) -> None:
    """The counts, the rotary settings' shape and the wavelength are what transformers divides by
    or reads as a mapping: a zero, a string or a NaN there is refused by its config.json name."""
    wrong = [
        f"{key} is {meta[key]!r} (a whole number of at least 1)"
        for key in _COUNTS
        if meta.get(key) is not None and (type(meta[key]) is not int or meta[key] < 1)
    ]
    for key in ("rope_scaling", "rope_parameters"):
        if meta.get(key) is not None and not isinstance(meta[key], Mapping):
            wrong.append(
                f'{key} is {meta[key]!r} (an object such as {{"rope_type": "llama3", ...}}, or null)'
            )
    thetas = [("rope_theta", meta.get("rope_theta"))] + [
        (f"{key}.rope_theta", meta[key]["rope_theta"])
        for key in ("rope_scaling", "rope_parameters")
        if isinstance(meta.get(key), Mapping) and "rope_theta" in meta[key]
    ]
    for key, theta in thetas:
        if not (type(theta) in (int, float) and math.isfinite(theta) and theta > 0):
            wrong.append(f"{key} is {theta!r} (a finite wavelength above 0, such as 10000.0)")
    if wrong:
        raise ForeignLayoutError(f"config.json has values transformers cannot use: {'; '.join(wrong)}")


def _rope(meta: Mapping[str, Any]) -> tuple[float, dict[str, Any] | None, list[str]]:
    """(rope_theta, llama3 scaling or None, refusals), from either spelling transformers reads:
    ``rope_scaling`` wins over ``rope_parameters`` (transformers' own order)."""
    parameters = dict(meta.get("rope_scaling") or meta.get("rope_parameters") or {})
    theta = float(parameters.pop("rope_theta", meta["rope_theta"]))
    rope_type = parameters.pop("rope_type", parameters.pop("type", "default"))
    refused = []
    partial = parameters.pop("partial_rotary_factor", meta.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        refused.append(f"partial_rotary_factor {partial} (zoo turns every feature of a head)")
    if rope_type == "default":
        return theta, None, refused
    if rope_type in ("longrope", "su") and meta.get("model_type") == "phi3":  # su: its older name
        return theta, _longrope(parameters, meta), refused
    if rope_type != "llama3":
        return (
            theta,
            None,
            [
                *refused,
                f"rope_scaling.rope_type {rope_type!r} (zoo computes 'default' and 'llama3', and Phi-3's "
                "'longrope')",
            ],
        )
    parameters.setdefault("original_max_position_embeddings", meta.get("max_position_embeddings"))
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    extra = sorted(set(parameters) - set(keys))
    if extra:
        refused.append(f"rope_scaling keys {extra} (a llama3 scaling has {', '.join(keys)})")
    return theta, {"rope_type": "llama3", **{k: parameters[k] for k in keys if k in parameters}}, refused


def _longrope(parameters: dict[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Phi-3's ``longrope`` as zoo's ``rope_scaling``: the pre-training context from the scaling
    or, as transformers reads it, the config's ``original_max_position_embeddings``."""
    original = parameters.pop(
        "original_max_position_embeddings", meta.get("original_max_position_embeddings")
    )
    return {
        "rope_type": "longrope",
        **{key: parameters[key] for key in ("short_factor", "long_factor", "factor", "attention_factor")
           if parameters.get(key) is not None},
        "original_max_position_embeddings": original if original is not None else 4096,
    }  # fmt: skip


def _sliding_window(meta: Mapping[str, Any], model_type: str) -> tuple[int | None, list[str] | None]:
    """The attention window transformers applies (or None) and the layers it applies to (None:
    every layer): Mistral's and Phi-3's ``sliding_window`` on every layer; Qwen2's (and Qwen3's)
    only with ``use_sliding_window``, on the layers ``layer_types`` marks, or from
    ``max_window_layers`` on where it marks none, as transformers reads them."""
    if model_type in WINDOW_EVERYWHERE:
        return meta.get("sliding_window"), None
    if model_type == "qwen3_moe":  # use_sliding_window puts the window on every layer
        window = meta.get("sliding_window")
        return (window, None) if meta.get("use_sliding_window") and window is not None else (None, None)
    window = meta.get("sliding_window")
    if model_type not in WINDOW_SOME or not meta.get("use_sliding_window", False) or window is None:
        return None, None
    layer_types = meta.get("layer_types")
    if layer_types is None:  # transformers windows the layers from max_window_layers on
        first = meta.get("max_window_layers", 28)
        layer_types = [
            "full_attention" if i < first else "sliding_attention"
            for i in range(meta.get("num_hidden_layers", 0))
        ]
    if "sliding_attention" not in layer_types:
        return None, None
    return window, None if "full_attention" not in layer_types else list(layer_types)


def _biases(meta: Mapping[str, Any], model_type: str) -> dict[str, bool]:
    """The bias layout each class has: Llama's ``attention_bias`` (all four attention projections)
    and ``mlp_bias``; Qwen3's ``attention_bias`` (the four attention projections); Qwen2's
    query/key/value biases; Mistral and Phi-3 none."""
    if model_type in ("llama", *QK_NORM):
        attention = bool(meta.get("attention_bias", False))
        return {
            "qkv_bias": attention,
            "output_bias": attention,
            "mlp_bias": model_type == "llama" and bool(meta.get("mlp_bias", False)),
        }
    return {"qkv_bias": model_type == "qwen2", "output_bias": False, "mlp_bias": False}


def hf_config(cfg: LlamaConfig) -> dict[str, Any]:
    """The ``config.json`` transformers reads for a model of ``cfg`` as its ``model_type``; a
    config that class cannot express raises ``ForeignLayoutError`` naming what would work."""
    model_type = cfg.model_type
    _check_expressible(cfg)
    suffix = "ForCausalLM" if cfg.active_task == "language_modeling" else "Model"
    rope_scaling = cfg.rope_scaling.model_dump(exclude_none=True) if cfg.rope_scaling is not None else None
    config: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [CLASSES[model_type] + suffix],
        "vocab_size": cfg.vocab_size,
        **{key: getattr(cfg, key) for key in _FIELDS},
        "num_key_value_heads": cfg.key_value_heads,
        "hidden_act": cfg.hidden_act,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": rope_scaling,
        "rope_parameters": {"rope_type": "default", **(rope_scaling or {}), "rope_theta": cfg.rope_theta},
        "use_cache": True,
    }
    if model_type == "llama":
        config |= {"attention_bias": cfg.qkv_bias, "mlp_bias": cfg.mlp_bias, "pretraining_tp": 1}
    if model_type in ("llama", "mistral", "qwen3") or (cfg.head_dim is not None and model_type != "phi3"):
        config["head_dim"] = cfg.attention_head_dim
    if model_type in QK_NORM:
        config["attention_bias"] = cfg.qkv_bias
    if model_type in WINDOW_EVERYWHERE:
        config["sliding_window"] = cfg.sliding_window
    if model_type in MOE:
        config |= experts_config(cfg)
    if model_type == "qwen3_moe":
        config |= {"use_sliding_window": cfg.sliding_window is not None, "sliding_window": cfg.sliding_window}
    if model_type == "phi3":
        config |= {key: 0.0 for key in _PHI3_DROPOUTS}
        longrope = cfg.rope_scaling if cfg.rope_scaling and cfg.rope_scaling.rope_type == "longrope" else None
        original = longrope.original_max_position_embeddings if longrope else cfg.max_position_embeddings
        config["original_max_position_embeddings"] = original
    if model_type in WINDOW_SOME:
        kinds = cfg.layer_types or ["sliding_attention"] * cfg.num_hidden_layers
        windowed = cfg.sliding_window is not None and "sliding_attention" in kinds
        config |= {
            "use_sliding_window": windowed,
            "sliding_window": cfg.sliding_window,
            "max_window_layers": kinds.index("sliding_attention") if windowed else cfg.num_hidden_layers,
            "layer_types": kinds if windowed else ["full_attention"] * cfg.num_hidden_layers,
        }
    return config


def _check_expressible(cfg: LlamaConfig) -> None:
    """What each transformers class can hold: Llama one attention bias switch, Mistral no biases,
    Qwen2 query/key/value biases only, Qwen3 one attention bias switch and no MLP bias; only Qwen3
    has the query/key norms; Llama has no sliding window; Phi-3 no biases and no head width of
    its own."""
    biases = (cfg.qkv_bias, cfg.output_bias, cfg.mlp_bias)
    layout = {"llama": cfg.qkv_bias == cfg.output_bias, "mistral": not any(biases), "phi3": not any(biases)}
    layout["qwen2"] = biases == (True, False, False)
    layout["qwen3"] = cfg.qkv_bias == cfg.output_bias and not cfg.mlp_bias
    layout["mixtral"], layout["qwen3_moe"] = layout["mistral"], layout["qwen3"]
    moe = cfg.num_local_experts is not None
    layout = {t: fits and cfg.qk_norm == (t in QK_NORM) and moe == (t in MOE) for t, fits in layout.items()}
    problems = []
    if cfg.qk_norm != (cfg.model_type in QK_NORM):
        fix = "set model.model_type to qwen3" if cfg.qk_norm else "set qk_norm true, or another model_type"
        problems.append(f"qk_norm {cfg.qk_norm}: only transformers' Qwen3 has the query/key norms ({fix})")
    elif experts_problem(cfg):
        problems.append(experts_problem(cfg))
    elif not layout[cfg.model_type]:
        fitting = [t for t, fits in layout.items() if fits]
        problems.append(
            f"its biases (qkv_bias {cfg.qkv_bias}, output_bias {cfg.output_bias}, mlp_bias {cfg.mlp_bias}) "
            f"are not a {cfg.model_type} layout"
            + (
                f"; set model.model_type to {' or '.join(fitting)}"
                if fitting
                else "; no transformers class has it"
            )
        )
    if cfg.layer_types is not None and cfg.model_type not in WINDOW_SOME and cfg.sliding_window:
        problems.append(
            f"layer_types: transformers' {CLASSES[cfg.model_type]} windows every layer or none; only Qwen2 "
            "and Qwen3 window some layers (set model.model_type to qwen2 or qwen3, or layer_types to null)"
        )
    if cfg.model_type == "llama" and cfg.sliding_window is not None:
        problems.append(
            "transformers' Llama has no sliding_window: set model.model_type to mistral (or sliding_window "
            "to null)"
        )
    if cfg.model_type == "phi3" and cfg.attention_head_dim * cfg.num_attention_heads != cfg.hidden_size:
        problems.append(
            f"head_dim {cfg.attention_head_dim}: transformers' Phi-3 derives it (hidden_size / "
            "num_attention_heads); set head_dim to null, or another model_type"
        )
    if problems:
        raise ForeignLayoutError(
            f"this llama config has no transformers {CLASSES[cfg.model_type]} form: {'; '.join(problems)}"
        )
