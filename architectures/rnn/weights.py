"""Weight table of the RNN family: ``nn.RNN`` layers <-> zoo's Keras ``TorchRNNCell``.

The layout (transposes, both biases kept apart) is :mod:`zoo.nn.recurrent_ports`'.
"""

from __future__ import annotations

from architectures.rnn.config import RNNConfig
from zoo.checkpoint.tables import Port
from zoo.nn.recurrent_ports import sequence_table, simple_rnn


def table(cfg: RNNConfig) -> list[Port]:
    return sequence_table(cfg, simple_rnn)
