"""The LSTM family's torch twin: zoo's recurrent net with ``nn.LSTM`` or ``nn.GRU`` layers."""

from __future__ import annotations

from torch import nn

from architectures.lstm.config import LSTMConfig
from zoo.nn.torch.recurrent import RecurrentNet


def build(cfg: LSTMConfig) -> RecurrentNet:
    module = nn.LSTM if cfg.cell == "lstm" else nn.GRU

    def make_layer(input_size: int) -> nn.Module:
        return module(
            input_size, cfg.hidden_size, num_layers=1, batch_first=True, bidirectional=cfg.bidirectional
        )

    return RecurrentNet(cfg, make_layer)
