"""Weight tables of the LSTM family: ``nn.LSTM`` / ``nn.GRU`` <-> zoo's LSTM cell / Keras' GRU.

The layout and the reason both biases are kept apart are described in
``architectures.rnn.weights``. LSTM gates are in the same order in both frameworks
(input, forget, cell, output). GRU gates are not: torch stacks (reset, update, new),
Keras (update, reset, new), so the first two H-row blocks of every GRU tensor swap
(without the swap outputs differ by ~0.5). Keras' ``GRU(reset_after=True)`` already
keeps two biases as a (2, 3H) variable, exactly torch's ``bias_ih`` and ``bias_hh``.
"""

from __future__ import annotations

import numpy as np

from architectures.lstm.config import LSTMConfig
from architectures.rnn.weights import recurrent, sequence_table
from zoo.weights import Port


def swap_reset_update(array: np.ndarray) -> np.ndarray:
    """torch (r, z, n) <-> Keras (z, r, h) along the first axis; its own inverse."""
    r, z, n = np.split(array, 3, axis=0)
    return np.concatenate([z, r, n], axis=0)


def lstm(name: str, cell: str, input_size: int, hidden_size: int, suffix: str = "") -> Port:
    """``nn.LSTM`` (one layer, one direction) <-> zoo's Keras ``TorchLSTMCell``."""
    return recurrent(name, cell, input_size, hidden_size, suffix, gates=4)


def gru(name: str, cell: str, input_size: int, hidden_size: int, suffix: str = "") -> Port:
    """``nn.GRU`` (one layer, one direction) <-> ``keras.layers.GRU(reset_after=True)``'s cell."""
    return recurrent(name, cell, input_size, hidden_size, suffix, gates=3, reorder=swap_reset_update)


def table(cfg: LSTMConfig) -> list[Port]:
    return sequence_table(cfg, lstm if cfg.cell == "lstm" else gru)
