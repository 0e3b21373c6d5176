"""Hyperparameters of the RNN family: the shared recurrent fields plus the Elman nonlinearity."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zoo.nn.recurrent_config import RecurrentConfig


class RNNConfig(RecurrentConfig):
    """Elman RNN: ``h_t = act(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh)``, as ``torch.nn.RNN``."""

    architecture: Literal["rnn"] = "rnn"
    nonlinearity: Literal["tanh", "relu"] = Field("tanh", description="Activation of the recurrence.")
