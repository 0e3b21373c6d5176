"""Task heads written once for every token-sequence family (the Keras twins: ``zoo.nn.keras.heads``).

- :class:`ClassificationHead`: dropout -> linear. On a pooled vector (N, H) it is
  transformers' sequence classifier after the pooler (``BertForSequenceClassification``);
  on every token (N, T, H) its token classifier (``BertForTokenClassification``): one
  module for both, since a Linear acts on the last axis.
- :class:`MaskedLMHead`: transformers' ``BertLMPredictionHead``: dense -> activation ->
  LayerNorm -> a decoder whose matrix is the word embedding itself, plus a bias of its own.
  The decoder matrix is passed in at call time instead of being held: the tie is then one
  tensor in the ``state_dict`` (and in zoo's checkpoint), where transformers holds it
  under two names and re-ties it on load.
- :func:`mean_pool`: the mean of the non-padding tokens' hidden states, the sentence
  embedding sentence-transformers computes (``Pooling(pooling_mode_mean_tokens=True)``).

Heads initialise as transformers does for these models: weights N(0, ``init_std``^2),
biases zero, LayerNorm 1 and 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.nn.torch.mlp import ACTIVATIONS


class ClassificationHead(nn.Module):
    """(..., in_features) -> (..., num_classes): dropout, then ``classifier`` (a Linear)."""

    def __init__(self, in_features: int, num_classes: int, dropout: float = 0.0, init_std: float = 0.02):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(in_features, num_classes)
        nn.init.normal_(self.classifier.weight, std=init_std)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x))


class MaskedLMHead(nn.Module):
    """(N, T, hidden) -> (N, T, vocab) logits, decoded with the (vocab, hidden) word embedding.

    Tensors: ``bias`` (vocab,), ``dense`` (hidden -> hidden), ``norm`` (LayerNorm); the
    decoder matrix is the ``embedding`` argument of :meth:`forward`, so gradients reach the
    word embedding from both ends, as through transformers' tied ``decoder.weight``.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        layer_norm_eps: float,
        activation: str = "gelu",
        init_std: float = 0.02,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of: {', '.join(ACTIVATIONS)}")
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = ACTIVATIONS[activation]()
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        nn.init.normal_(self.dense.weight, std=init_std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, h: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        if embedding.shape != (self.bias.shape[0], h.shape[-1]):
            raise ValueError(
                f"the decoder matrix must be the ({self.bias.shape[0]}, {h.shape[-1]}) word embedding; "
                f"got {tuple(embedding.shape)}"
            )
        return F.linear(self.norm(self.act(self.dense(h))), embedding, self.bias)


def mean_pool(hidden: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(N, T, H) -> (N, H): the mean over the tokens that are not padding (``padding_mask``
    (N, T), True at padding), sentence-transformers' mean pooling. A row of padding only
    gives zeros (its count is clamped, as there, instead of dividing by zero)."""
    if padding_mask is None:
        return hidden.mean(dim=1)
    keep = (~padding_mask.to(device=hidden.device, dtype=torch.bool)).unsqueeze(-1).to(hidden.dtype)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1e-9)
