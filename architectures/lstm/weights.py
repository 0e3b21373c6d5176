"""Weight table of the LSTM family: ``nn.LSTM`` / ``nn.GRU`` <-> zoo's LSTM cell / Keras' GRU.

The layouts (transposes, both biases kept apart, the GRU's reset/update swap) are
:mod:`zoo.nn.recurrent_ports`'.
"""

from __future__ import annotations

from architectures.lstm.config import LSTMConfig
from zoo.checkpoint.tables import Port
from zoo.nn.recurrent_ports import gru, lstm, sequence_table


def table(cfg: LSTMConfig) -> list[Port]:
    return sequence_table(cfg, lstm if cfg.cell == "lstm" else gru)
