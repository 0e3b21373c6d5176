"""The LSTM family's Keras twin: zoo's LSTM cell (torch's two biases) or Keras' own GRU.

Keras' GRU with ``reset_after=True`` is torch's GRU up to the gate order, which the weight
table handles. Keras' LSTM has a single bias, so the LSTM layers use ``TorchLSTMCell``.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from architectures.lstm.config import LSTMConfig
from architectures.rnn.keras_model import RecurrentNet, build_model
from zoo.keras.layers import torch_recurrent_init
from zoo.nn.keras import add_bias


@keras.saving.register_keras_serializable(package="zoo")
class TorchLSTMCell(layers.Layer):
    """``torch.nn.LSTM``'s step, gates (input, forget, cell, output) as in Keras' LSTM.

    ``bias`` is (2, 4 * units): row 0 is torch's ``bias_ih``, row 1 ``bias_hh``.
    Registered as serializable because ``Bidirectional`` clones its layer from the config.

    Not a low-precision product layer: torch's autocast runs ``nn.LSTM`` in oneDNN's
    bfloat16 kernel, whose gradients measured closer to this cell in float32 than to the
    cell in bfloat16 (docs/precision.md).
    """

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = [units, units]
        self.output_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=(input_shape[-1], 4 * self.units),
            initializer=torch_recurrent_init(self.units),
            name="kernel",
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, 4 * self.units),
            initializer=torch_recurrent_init(self.units),
            name="recurrent_kernel",
        )
        self.bias = self.add_weight(
            shape=(2, 4 * self.units), initializer=torch_recurrent_init(self.units), name="bias"
        )

    def call(self, inputs, states, training=False):
        h, c = states
        z = add_bias(ops.matmul(inputs, self.kernel), self.bias[0])
        z = z + add_bias(ops.matmul(h, self.recurrent_kernel), self.bias[1])
        i, f, g, o = ops.split(z, 4, axis=-1)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h = ops.sigmoid(o) * ops.tanh(c)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def build(cfg: LSTMConfig) -> RecurrentNet:
    def make_layer() -> layers.Layer:
        if cfg.cell == "gru":
            return layers.GRU(
                cfg.hidden_size,
                reset_after=True,
                return_sequences=True,
                kernel_initializer=torch_recurrent_init(cfg.hidden_size),
                recurrent_initializer=torch_recurrent_init(cfg.hidden_size),
                bias_initializer=torch_recurrent_init(cfg.hidden_size),
            )
        return layers.RNN(TorchLSTMCell(cfg.hidden_size), return_sequences=True)

    return build_model(cfg, make_layer)
