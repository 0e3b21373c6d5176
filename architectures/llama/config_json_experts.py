"""The mixture-of-experts fields of a transformers ``config.json`` (Mixtral's, Qwen3-MoE's), read
and written for ``architectures.llama.config_json``: Mixtral's experts are on every layer,
``intermediate_size`` wide, their chosen probabilities always renormalised; Qwen3-MoE names its
count ``num_experts`` and has ``moe_intermediate_size``, ``norm_topk_prob``,
``decoder_sparse_step`` and ``mlp_only_layers``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from architectures.llama.config import LlamaConfig

MOE = ("mixtral", "qwen3_moe")


def experts_fields(meta: Mapping[str, Any], model_type: str) -> tuple[dict[str, Any], list[str]]:
    """The mixture-of-experts fields: Mixtral's ``num_local_experts`` on every layer, its chosen
    probabilities always renormalised; Qwen3-MoE's ``num_experts``, ``moe_intermediate_size``,
    ``norm_topk_prob``, ``decoder_sparse_step`` and ``mlp_only_layers``."""
    experts = meta.get("num_experts", meta.get("num_local_experts"))
    fields = {
        "num_local_experts": experts,
        "num_experts_per_tok": meta["num_experts_per_tok"],
        "router_aux_loss_coef": meta["router_aux_loss_coef"],
        "output_router_logits": bool(meta["output_router_logits"]),
    }
    refused = []
    if model_type == "mixtral":
        if meta.get("router_jitter_noise"):
            refused.append(
                f"router_jitter_noise {meta['router_jitter_noise']} (zoo's router draws no noise: set 0)"
            )
        return fields, refused
    return fields | {
        "moe_intermediate_size": meta["moe_intermediate_size"],
        "norm_topk_prob": bool(meta["norm_topk_prob"]),
        "decoder_sparse_step": meta["decoder_sparse_step"],
        "mlp_only_layers": list(meta["mlp_only_layers"] or []),
    }, refused


def experts_config(cfg: LlamaConfig) -> dict[str, Any]:
    shared = {
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        "output_router_logits": cfg.output_router_logits,
    }
    if cfg.model_type == "mixtral":
        return {"num_local_experts": cfg.num_local_experts, **shared, "router_jitter_noise": 0.0}
    return {
        "num_experts": cfg.num_local_experts, **shared, "moe_intermediate_size": cfg.expert_size,
        "norm_topk_prob": cfg.norm_topk_prob, "decoder_sparse_step": cfg.decoder_sparse_step,
        "mlp_only_layers": cfg.mlp_only_layers,
    }  # fmt: skip


def experts_problem(cfg: LlamaConfig) -> str | None:
    """Why ``cfg``'s experts have no form in its ``model_type``'s class, or None."""
    moe = cfg.num_local_experts is not None
    if moe != (cfg.model_type in MOE):
        fix = "mixtral or qwen3_moe" if moe else "one of the dense classes, or give num_local_experts"
        return (
            f"num_local_experts {cfg.num_local_experts}: only transformers' Mixtral and Qwen3-MoE have "
            f"experts (set model.model_type to {fix})"
        )
    mixtral_shape = (
        cfg.moe_intermediate_size in (None, cfg.intermediate_size) and cfg.norm_topk_prob
        and cfg.decoder_sparse_step == 1 and not cfg.mlp_only_layers
    )  # fmt: skip
    if cfg.model_type == "mixtral" and not mixtral_shape:
        return (
            "Mixtral's experts are on every layer, intermediate_size wide, their probabilities renormalised: "
            "set moe_intermediate_size null, norm_topk_prob true, decoder_sparse_step 1 and mlp_only_layers "
            "[] (or model.model_type qwen3_moe)"
        )
    return None
