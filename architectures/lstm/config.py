"""Hyperparameters of the LSTM family, whose ``cell`` can also be a GRU."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zoo.nn.recurrent_config import RecurrentConfig


class LSTMConfig(RecurrentConfig):
    """Gated recurrent nets: LSTM (torch ``nn.LSTM``) or GRU (torch ``nn.GRU``) layers.

    The GRU is torch's: the reset gate acts after the recurrent matmul, which is Keras'
    ``GRU(reset_after=True)``.
    """

    architecture: Literal["lstm"] = "lstm"
    cell: Literal["lstm", "gru"] = Field("lstm", description="The gated cell of every recurrent layer.")

    def variant(self) -> str:
        """The cell, ``bi``-prefixed when bidirectional: lstm, bilstm, gru, bigru."""
        return ("bi" if self.bidirectional else "") + self.cell

    @property
    def gates(self) -> int:
        return 4 if self.cell == "lstm" else 3
