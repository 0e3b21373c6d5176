"""The LSTM family's Keras twin: zoo's recurrent net over zoo's LSTM cell or Keras' own GRU.

Keras' GRU with ``reset_after=True`` is torch's GRU up to the gate order, which the weight
table handles. Keras' LSTM has a single bias, so the LSTM layers use ``TorchLSTMCell``.
"""

from __future__ import annotations

from architectures.lstm.config import LSTMConfig
from zoo.nn.keras.recurrent import RecurrentNet, build_model
from zoo.nn.keras.recurrent_cells import gru_layer, lstm_layer


def build(cfg: LSTMConfig) -> RecurrentNet:
    if cfg.cell == "gru":
        return build_model(cfg, lambda: gru_layer(cfg.hidden_size))
    return build_model(cfg, lambda: lstm_layer(cfg.hidden_size))
