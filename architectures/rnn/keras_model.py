"""The RNN family's Keras twin: zoo's recurrent net over ``TorchRNNCell`` layers (torch's two biases)."""

from __future__ import annotations

from architectures.rnn.config import RNNConfig
from zoo.nn.keras.recurrent import RecurrentNet, build_model
from zoo.nn.keras.recurrent_cells import simple_rnn_layer


def build(cfg: RNNConfig) -> RecurrentNet:
    return build_model(cfg, lambda: simple_rnn_layer(cfg.hidden_size, cfg.nonlinearity))
