"""transformers' GPT-2 state dict <-> zoo's canonical tensors, and its ``config.json`` both ways.

transformers' ``GPT2LMHeadModel`` and zoo's torch twin hold the same tensors. The differences:

- names: ``transformer.`` before every backbone key (``GPT2Model`` has none), and zoo's shared
  blocks' names for attention and the MLP::

      h.N.attn.c_attn.{weight,bias}  <-> h.N.attn.in_proj_{weight,bias}
      h.N.attn.c_proj.{weight,bias}  <-> h.N.attn.out_proj.{weight,bias}
      h.N.mlp.c_fc.{weight,bias}     <-> h.N.mlp.fc1.{weight,bias}
      h.N.mlp.c_proj.{weight,bias}   <-> h.N.mlp.fc2.{weight,bias}

- layout: transformers' ``Conv1D`` stores its weight [in, out], ``nn.Linear`` (out, in): the
  four matrices above are transposed;
- the head: ``lm_head.weight`` is the token embedding. Files that carry it (older ones, or a
  ``torch.save`` of the state dict) must carry the very same matrix, which is dropped; one that
  differs is refused, as zoo's twins tie. Written back once, as ``transformer.wte.weight``
  (safetensors refuses two names for one tensor; transformers re-ties on load);
- buffers: ``h.N.attn.bias`` (the causal mask) and ``h.N.attn.masked_bias`` of older files are
  constants, skipped.

The config: ``n_embd``, ``vocab_size``, ``n_positions``, ``n_layer`` and ``n_inner`` come from the
shapes, the head count from ``config.json`` (``n_head``) or, without one, from ``zoo import
--num-heads`` (never guessed from the width), checked against each other. Every field that
changes what the model computes and that zoo's twins do not do (another activation, cross
attention, attention scaled otherwise, an untied head) is refused by name.

Writing back a checkpoint imported from this layout, the fields of its ``config.json`` that
zoo's config does not model (which of the two names of the tanh GELU, the special token ids,
generation settings) are written as they were read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from architectures.gpt2.config import GPT2Config
from architectures.gpt2.weights import table
from zoo.checkpoint.foreign import ForeignLayoutError, Tensors, head_count, renamed, with_source
from zoo.checkpoint.tables import tensor_specs

PREFIX = "transformer."
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # both are the tanh approximation zoo computes
ARCHITECTURES = {"GPT2LMHeadModel": "language_modeling", "GPT2Model": "features"}
_RENAMES = (  # zoo's name pattern -> transformers'
    (r"\.attn\.in_proj_(weight|bias)$", r".attn.c_attn.\1"),
    (r"\.attn\.out_proj\.", ".attn.c_proj."),
    (r"\.mlp\.fc1\.", ".mlp.c_fc."),
    (r"\.mlp\.fc2\.", ".mlp.c_proj."),
)
_CONV1D = re.compile(r"^h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")
_BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
_FIELDS = {  # config.json -> zoo's field, for the fields that map one to one
    "n_embd": "n_embd",
    "n_layer": "n_layer",
    "n_head": "n_head",
    "n_positions": "n_positions",
    "vocab_size": "vocab_size",
    "layer_norm_epsilon": "layer_norm_epsilon",
    "resid_pdrop": "resid_dropout",
    "embd_pdrop": "embd_dropout",
    "attn_pdrop": "attn_dropout",
    "initializer_range": "initializer_range",
}
# What transformers' GPT2Config (5.23) takes where a config.json leaves a field out, for every
# field zoo reads from it that no tensor shape shows (tests/test_hf_defaults.py checks each value
# against the class). Weights with no config.json at all take none: nothing says they are GPT2Config's.
HF_DEFAULTS = {
    "n_head": 12, "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
    "initializer_range": 0.02, "activation_function": "gelu_new", "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False, "tie_word_embeddings": True,
}  # fmt: skip
# config.json fields zoo's config decides (the rest of an imported one is written back as read).
MODELLED = ("model_type", "architectures", "n_inner", *_FIELDS, "dtype", "torch_dtype")
# config.json fields that change what the model computes, at the only value zoo's twins compute.
_REQUIRED = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}


def _hf_names(cfg: GPT2Config) -> dict[str, str]:
    """zoo's canonical name -> transformers' (without the ``transformer.`` prefix)."""
    names = {}
    for name in tensor_specs(table(cfg)):
        hf = name
        for pattern, replacement in _RENAMES:
            hf = re.sub(pattern, replacement, hf)
        names[name] = hf
    return names


# ---------------------------------------------------------------------- transformers -> zoo


def from_hf(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any], num_heads: int | None = None
) -> tuple[dict[str, Any], Tensors]:
    """A ``GPT2LMHeadModel`` or ``GPT2Model`` state dict (and its ``config.json``, or ``{}``) ->
    zoo's config fields and tensors. ``num_heads``: the head count, where no config.json says it."""
    _check_meta_kind(meta)
    if meta:  # a head count the user gives stands where config.json leaves it out
        meta = {**{k: v for k, v in HF_DEFAULTS.items() if k != "n_head" or num_heads is None}, **meta}
    backbone, head, prefixed = _backbone(tensors)
    fields = _shapes_config(backbone)
    fields["task"] = _task(meta, prefixed or head is not None)
    fields = _with_meta(fields, meta, num_heads)
    if head is not None and not np.array_equal(head, backbone["wte.weight"]):
        raise ForeignLayoutError(
            "lm_head.weight differs from transformer.wte.weight: zoo's GPT-2 ties its head to the token "
            "embedding (one matrix); an untied head cannot be represented",
            ["lm_head.weight"],
        )
    try:
        cfg = GPT2Config(**fields)
    except ValueError as error:
        raise ForeignLayoutError(f"these GPT-2 weights give no valid zoo gpt2 config: {error}") from error
    names = {hf: zoo for zoo, hf in _hf_names(cfg).items()}
    found = renamed(backbone, names, ignore=lambda key: bool(_BUFFERS.match(key)), what="GPT-2 weights")
    specs = tensor_specs(table(cfg))
    out, wrong = {}, []
    for hf, name in names.items():
        value = np.asarray(found[name], dtype=np.float32)
        if _CONV1D.match(hf):
            value = np.ascontiguousarray(value.T)
        if value.shape != specs[name].shape:
            wrong.append(
                f"{hf} {list(np.shape(found[name]))} (zoo needs {list(specs[name].shape)}, transposed)"
            )
        out[name] = value
    if wrong:
        raise ForeignLayoutError(f"these GPT-2 weights have other shapes than zoo's: {'; '.join(wrong[:5])}")
    return fields, out


def _check_meta_kind(meta: Mapping[str, Any]) -> None:
    model_type = meta.get("model_type")
    if model_type is not None and model_type != "gpt2":
        raise ForeignLayoutError(f"config.json's model_type is {model_type!r}, not 'gpt2'")


def _backbone(tensors: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray | None, bool]:
    """The backbone's tensors without ``transformer.``, the ``lm_head.weight`` if any, and whether
    the keys were prefixed (a ``GPT2LMHeadModel`` state dict)."""
    tensors = dict(tensors)
    head = tensors.pop("lm_head.weight", None)
    prefixed = any(key.startswith(PREFIX) for key in tensors)
    if prefixed:
        unprefixed = [key for key in tensors if not key.startswith(PREFIX)]
        if unprefixed:
            raise ForeignLayoutError(
                f"GPT-2 weights mix {PREFIX}-prefixed keys with others: {', '.join(unprefixed[:5])}",
                unprefixed,
            )
        tensors = {key.removeprefix(PREFIX): value for key, value in tensors.items()}
    return tensors, head, prefixed


def _shapes_config(tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Every config field the shapes decide (all but the head count)."""
    needed = ["wte.weight", "wpe.weight", "h.0.mlp.c_fc.weight", "ln_f.weight"]
    missing = [key for key in needed if key not in tensors]
    if missing:
        known = ("wte.", "wpe.", "h.", "ln_f.")
        raise ForeignLayoutError(
            f"not a transformers GPT-2 (GPT2Model / GPT2LMHeadModel): missing {', '.join(missing)}",
            [key for key in tensors if not key.startswith(known)],
            missing,
        )
    blocks = sorted({int(m.group(1)) for key in tensors if (m := re.match(r"h\.(\d+)\.", key))})
    if blocks != list(range(len(blocks))):
        raise ForeignLayoutError(f"GPT-2 blocks are not numbered 0..{len(blocks) - 1}: found {blocks}")
    vocab, width = np.shape(tensors["wte.weight"])
    fc = np.shape(tensors["h.0.mlp.c_fc.weight"])
    if len(fc) != 2 or fc[0] != width:
        raise ForeignLayoutError(
            f"h.0.mlp.c_fc.weight is {list(fc)}: a transformers Conv1D weight is [n_embd {width}, n_inner]"
        )
    return {
        "vocab_size": int(vocab),
        "n_embd": int(width),
        "n_positions": int(np.shape(tensors["wpe.weight"])[0]),
        "n_layer": len(blocks),
        "n_inner": None if fc[1] == 4 * width else int(fc[1]),
    }


def _task(meta: Mapping[str, Any], has_head: bool) -> str:
    """``GPT2LMHeadModel`` -> language modelling, ``GPT2Model`` -> features (config.json's
    ``architectures``, else whether the file is a head model's)."""
    architectures = meta.get("architectures") or []
    if not architectures:
        return "language_modeling" if has_head else "features"
    unknown = [name for name in architectures if name not in ARCHITECTURES]
    if unknown:
        raise ForeignLayoutError(
            f"config.json's architectures names {unknown}: zoo's gpt2 is {' or '.join(ARCHITECTURES)} "
            "(a classification or double-heads GPT-2 has a head zoo does not build)"
        )
    return ARCHITECTURES[architectures[0]]


def _with_meta(fields: dict[str, Any], meta: Mapping[str, Any], num_heads: int | None) -> dict[str, Any]:
    """``fields`` with the head count, epsilon, dropout rates and initialiser range of the
    config.json, after checking that it describes a model zoo computes and agrees with the shapes."""
    refused = [f"{key} {meta[key]!r} (zoo computes {value!r})" for key, value in _REQUIRED.items()
               if key in meta and meta[key] != value]  # fmt: skip
    activation = meta.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        refused.append(
            f"activation_function {activation!r} (zoo computes the tanh GELU, {' / '.join(ACTIVATIONS)})"
        )
    if refused:
        raise ForeignLayoutError(f"config.json sets what zoo's GPT-2 cannot represent: {'; '.join(refused)}")
    inner = meta.get("n_inner")
    disagree = []
    if inner is not None and inner != (fields["n_inner"] or 4 * fields["n_embd"]):
        disagree.append(f"n_inner says {inner}, the tensors {fields['n_inner'] or 4 * fields['n_embd']}")
    out = dict(fields)
    for key, field in _FIELDS.items():
        if key not in meta:
            continue
        if field in fields and fields[field] != meta[key]:
            disagree.append(f"{key} says {meta[key]!r}, the tensors {fields[field]!r}")
        out[field] = meta[key]
    if disagree:
        raise ForeignLayoutError(f"config.json and the weights disagree: {'; '.join(disagree)}")
    out["n_head"] = head_count(
        meta.get("n_head"), "n_head", num_heads, fields["n_embd"], "GPT-2", "transformers' config.json"
    )
    return out


# ---------------------------------------------------------------------- zoo -> transformers


def to_hf(
    cfg: GPT2Config, tensors: Mapping[str, np.ndarray], source: Mapping[str, Any] | None = None
) -> tuple[Tensors, dict[str, Any]]:
    """zoo's tensors -> the state dict transformers' ``save_pretrained`` writes (the head once,
    as ``transformer.wte.weight``; none for a ``GPT2Model``), and its ``config.json`` (with what
    ``source``, the one imported, says and zoo's config does not model)."""
    lm = cfg.active_task == "language_modeling"
    prefix = PREFIX if lm else ""
    out = {}
    for name, hf in _hf_names(cfg).items():
        value = tensors[name]
        if _CONV1D.match(hf):
            value = np.ascontiguousarray(value.T)
        out[prefix + hf] = value
    return out, with_source(hf_config(cfg), source, MODELLED)


def hf_config(cfg: GPT2Config) -> dict[str, Any]:
    """The ``config.json`` transformers' ``GPT2Config`` reads for a model of ``cfg``."""
    end = min(50256, cfg.vocab_size - 1)  # GPT-2's <|endoftext|>, where the vocabulary has it
    config: dict[str, Any] = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel" if cfg.active_task == "language_modeling" else "GPT2Model"],
        "activation_function": "gelu_new",
        "n_inner": cfg.n_inner,
        **{key: getattr(cfg, field) for key, field in _FIELDS.items()},
        **_REQUIRED,
        "reorder_and_upcast_attn": False,
        "bos_token_id": end,
        "eos_token_id": end,
        "use_cache": True,
        "dtype": "float32",  # the weights zoo writes
    }
    return config
