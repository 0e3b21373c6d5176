"""The RNN family's torch twin: zoo's recurrent net with ``nn.RNN`` layers."""

from __future__ import annotations

from torch import nn

from architectures.rnn.config import RNNConfig
from zoo.nn.torch.recurrent import RecurrentNet


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
