"""The recurrent families' torch twin: a plain ``nn.Module``, trained by zoo's Lightning task.

Every recurrent layer is its own single-layer ``nn.RNN``/``nn.LSTM``/``nn.GRU`` in the
``recurrent`` list rather than one multi-layer module, so a layer is a block that can be
wrapped on its own (activation checkpointing per layer) and dropout between layers is
ours, identical in both twins. The list is called ``recurrent`` because ``keras.Model``
already owns ``layers`` and both twins must share attribute names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from architectures.rnn.config import RecurrentConfig, RNNConfig
from zoo.nn.torch import Embedding
from zoo.torch_remat import checkpointed_call

# (input size of the layer) -> a single-layer, batch-first recurrent module
LayerFactory = Callable[[int], nn.Module]


class RecurrentNet(nn.Module):
    """Classification: (N, T, input_size) float -> (N, num_classes).
    Language modeling: (N, T) int64 token ids -> (N, T, vocab_size).

    With ``grad_checkpointing`` on, training keeps only each recurrent layer's input for
    backward and reruns the layer there, instead of keeping every step's gates.
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: RecurrentConfig, make_layer: LayerFactory):
        super().__init__()
        self.zoo_config = cfg
        # zoo's Embedding: nn.Embedding that refuses ids outside the vocabulary as the Keras twin does.
        self.embedding = Embedding(cfg.vocab_size, cfg.embedding_dim) if cfg.language_model else None
        self.recurrent = nn.ModuleList(make_layer(cfg.layer_input_size(i)) for i in range(cfg.num_layers))
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(cfg.features, cfg.output_size)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The last recurrent layer's outputs at every step, (N, T, hidden * directions)."""
        if self.embedding is not None:
            x = self.embedding(x)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for index, layer in enumerate(self.recurrent):
            if index:
                x = self.dropout(x)
            x, _ = checkpointed_call(layer, x) if checkpointing else layer(x)
        return x

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.zoo_config
        if not cfg.language_model:
            x = pool(x, cfg)
        return self.head(self.dropout(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def pool(x: torch.Tensor, cfg: RecurrentConfig) -> torch.Tensor:
    """(N, T, D) -> (N, D): the mean over steps, or each direction's final state."""
    if cfg.pooling == "mean":
        return x.mean(dim=1)
    if not cfg.bidirectional:
        return x[:, -1]
    # The backward direction has read the whole sequence when it reaches step 0.
    h = cfg.hidden_size
    return torch.cat([x[:, -1, :h], x[:, 0, h:]], dim=-1)


def build(cfg: RNNConfig) -> RecurrentNet:
    def make_layer(input_size: int) -> nn.Module:
        return nn.RNN(
            input_size,
            cfg.hidden_size,
            num_layers=1,
            nonlinearity=cfg.nonlinearity,
            batch_first=True,
            bidirectional=cfg.bidirectional,
        )

    return RecurrentNet(cfg, make_layer)
