"""A sparse mixture-of-experts feed-forward block: transformers' ``MixtralSparseMoeBlock`` and
``Qwen3MoeSparseMoeBlock``, written out so the Keras twin (``zoo.nn.keras.moe``) computes the same.

A router (``gate``, a Linear without bias) scores every expert; the softmax of the scores, in
float32, picks the ``top_k`` most likely experts per token, whose probabilities weigh their
outputs (renormalised to sum to one where ``normalise``: Mixtral always, Qwen3-MoE with
``norm_topk_prob``). Each expert is a :class:`GatedMlp` under transformers' names
(``experts.E.gate_proj`` / ``up_proj`` / ``down_proj``). The output sums the weighted experts in
expert order, as transformers' ``index_add_`` loop does.

Ties among the probabilities go to the lower expert index, in both twins (a stable sort here,
``top_k`` in TensorFlow). transformers' ``torch.topk`` breaks them by its kernel's order (eight
equal scores gave experts 6 and 5): on a tie zoo and transformers may choose differently, zoo's
twins never.

Every expert runs on every token and the weights of the unchosen are zero (an exact zero in
the sum): the same numbers as running each expert on its tokens only, at num_experts / top_k
times the compute. Fine for the sizes zoo trains; a gathering kernel is what serving a
128-expert model would want.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.nn.torch.mlp import GatedMlp


def routing(logits: torch.Tensor, top_k: int, normalise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, experts) router scores -> each token's chosen experts (tokens, top_k), most likely
    first, ties to the lower index, and the dense (tokens, experts) weights: the chosen experts'
    probabilities (float32), zero elsewhere."""
    probs = torch.softmax(logits.float(), dim=-1)
    values, chosen = torch.sort(probs, dim=-1, descending=True, stable=True)
    values, chosen = values[:, :top_k], chosen[:, :top_k]
    if normalise:
        values = values / values.sum(dim=-1, keepdim=True)
    return chosen, torch.zeros_like(probs).scatter(1, chosen, values)


class SparseMoe(nn.Module):
    """(..., hidden) -> (..., hidden) through the ``top_k`` of ``num_experts`` gated MLPs a router
    picks per token. ``router_logits`` keeps the last call's (tokens, experts) scores, for the
    load-balancing loss (:func:`load_balancing_loss`)."""

    router_logits: torch.Tensor | None = None

    def __init__(
        self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int, normalise: bool
    ):
        super().__init__()
        self.top_k, self.normalise = top_k, normalise
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList(GatedMlp(hidden_size, intermediate_size) for _ in range(num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        self.router_logits = self.gate(flat)
        _, weights = routing(self.router_logits, self.top_k, self.normalise)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            out = out + (expert(flat) * weights[:, e : e + 1]).to(out.dtype)
        return out.reshape(x.shape)


def load_balancing_loss(
    router_logits: list[torch.Tensor], top_k: int, padding: torch.Tensor | None = None
) -> torch.Tensor:
    """Switch Transformer's auxiliary loss over every MoE layer, as transformers'
    ``load_balancing_loss_func``: num_experts * sum over experts of (the share of top-k
    assignments it got) * (its mean router probability), over the real tokens (``padding``
    (N, T), True at padding)."""
    experts = router_logits[0].shape[-1]
    real = None if padding is None else (~padding).reshape(-1).float()
    counts = torch.zeros(experts, device=router_logits[0].device)
    probs_sum = torch.zeros(experts, device=router_logits[0].device)
    rows = 0.0
    for logits in router_logits:
        probs = torch.softmax(logits.float(), dim=-1)
        chosen, _ = routing(logits, top_k, normalise=False)
        mask = torch.ones(len(probs), device=probs.device) if real is None else real
        counts = counts + torch.zeros(experts, device=probs.device).scatter_add(
            0, chosen.reshape(-1), mask.repeat_interleave(top_k)
        )
        probs_sum = probs_sum + (probs * mask[:, None]).sum(dim=0)
        rows = rows + mask.sum()
    return torch.sum((counts / rows) * (probs_sum / rows)) * experts
